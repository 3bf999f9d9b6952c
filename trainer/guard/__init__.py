"""The guard: a detached box-side process that stops or destroys the instance once the run
is over and its weights are safe. The laptop imports :mod:`trainer.guard.state` (the
guard's file) and :mod:`trainer.guard.ring` (the box's GPU ring, which the guard keeps)
only."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "state": ["GUARD_FILE", "ACTIVE_STATES", "GuardError", "parse_when", "read_guard"],
    "loop": ["Guard", "GuardConfig"],
})
