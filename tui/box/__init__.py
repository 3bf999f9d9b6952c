"""One box tab: ``view.BoxView`` composes the parts that watch and act on one box, over
one plain state object (``state.BoxState``)."""

from tui.box.view import BoxView

__all__ = ["BoxView"]
