"""The weights of a box's runs: pulled to the laptop verified (``pull``), pushed to the
Hub from the box (``push``), whether they are safe off the box (``safety``), and how far
the Hub token handed to the box reaches (``reach``)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "pull": ["box_run_dir", "default_pull_dir", "dest_for", "ledger_stamp", "pull_weights"],
    "push": ["NO_TOKEN", "PUSHED_FILES", "REPO_RE", "PushFailed", "check_push_args",
             "laptop_token", "push_from_box", "require_token"],
    "reach": ["TokenRefused", "reach_warning"],
    "safety": ["Safety", "judged_again", "weights_safety"],
})
