"""A run started again: on its own instance (``resume``), from the laptop's copy
(``fromlaptop``), or moved to another box (``move``) with its guard and lease carried
along (``carry``). It stands on ``remote.fleet`` and ``remote.billing``."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.resume.move import Moving, move_run, new_box_rate
    from remote.resume.resume import Resumed, Step, resume_run

__all__, __getattr__ = typed_exports(__name__, __file__)
