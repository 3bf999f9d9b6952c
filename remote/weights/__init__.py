"""The weights of a box's runs: pulled to the laptop verified (``pull``), pushed to the
Hub from the box (``push``), whether they are safe off the box (``safety``), and how far
the Hub token handed to the box reaches (``reach``)."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.weights.pull import (
        box_run_dir,
        default_pull_dir,
        dest_for,
        ledger_stamp,
        pull_weights,
    )
    from remote.weights.push import (
        NO_TOKEN,
        PUSHED_FILES,
        REPO_RE,
        PushFailed,
        check_push_args,
        laptop_token,
        push_from_box,
        require_token,
    )
    from remote.weights.reach import TokenRefused, reach_warning
    from remote.weights.safety import Safety, judged_again, weights_safety

__all__, __getattr__ = typed_exports(__name__, __file__)
