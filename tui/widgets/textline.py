"""``TextLine``: one line of text that repaints without a layout pass.

``Static.update`` asks for a new layout each time (its size may change), which costs a
full-screen recomposition; the panes update their status lines many times a second, and
a fixed-size line never needs one."""

from __future__ import annotations

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget


class TextLine(Widget):
    """A fixed-height line showing a ``Text`` (no markup is ever parsed)."""

    DEFAULT_CSS = "TextLine { height: 1; width: 1fr; }"

    text: reactive[Text] = reactive(Text, layout=False)

    def __init__(self, text: Text | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        if text is not None:
            self.text = text

    def update(self, text: Text) -> None:
        """Show ``text`` (nothing happens when it is unchanged)."""
        if text.plain != self.text.plain or text.spans != self.text.spans:
            self.text = text

    def render(self) -> Text:
        """The line, cut at the widget's width."""
        return self.text
