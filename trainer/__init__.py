"""Everything that runs on the box: the training engine, the run follower, preflight,
the dataset doctor, the profiler and the Hub tools.

Importing this package must not import torch: ``trainer.runfiles`` and ``trainer.follow``
run on boxes that have only ``python3``. Commands are reached as ``python3 -m trainer``.
"""

from trainer._exports import lazy_exports
from trainer.version import __version__

# ``from trainer import Trainer`` without importing torch for every user of the package
__all__, __getattr__ = lazy_exports(__name__, {"engine.api": ["Trainer"]})
__all__ += ["__version__"]
