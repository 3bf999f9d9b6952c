"""Everything that runs on the box: the training engine, the run follower, preflight,
the dataset doctor, the profiler and the Hub tools.

Importing this package must not import torch: ``trainer.runfiles`` and ``trainer.follow``
run on boxes that have only ``python3``. Commands are reached as ``python3 -m trainer``.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``from trainer import Trainer`` without importing torch for every user of the package
    if name == "Trainer":
        from trainer.api import Trainer

        return Trainer
    raise AttributeError(f"module 'trainer' has no attribute {name!r}")
