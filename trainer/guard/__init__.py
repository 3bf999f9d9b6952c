"""The guard: a detached box-side process that stops or destroys the instance once the run
is over and its weights are safe. The laptop imports :mod:`trainer.guard.state` only."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "state": ["GUARD_FILE", "ACTIVE_STATES", "GuardError", "parse_when", "read_guard"],
    "loop": ["Guard", "GuardConfig"],
})
