"""One box tab: the watching half (``view.BoxView``: connect, list runs, follow one) and
the acting half (``actions.BoxActions``: launch, checks, push, pull, stop, guard,
teardown)."""

from tui.box.view import BoxView

__all__ = ["BoxView"]
