"""``TextLine``: one line of text that repaints without a layout pass.

``Static.update`` asks for a new layout each time (its size may change), which costs a
full-screen recomposition; the panes update their status lines many times a second, and
a fixed-size line never needs one. A line too long for its width is cut between words
(``fit_words``), never inside one."""

from __future__ import annotations

from rich.cells import get_character_cell_size
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

#: A cut after a clause (a comma), else at the end of a part (two spaces), is preferred
#: when it loses at most this many columns more than a cut at the last space would.
NEAR = ((", ", 12), ("  ", 16))
#: Words a cut line never ends with, nor with a label (``guard:``) left without its value.
DANGLING = {"a", "an", "and", "or", "but", "the", "of", "to", "in", "on", "for", "at", "by",
            "with", "from", "after", "is", "was"}


def fit_words(text: Text, width: int) -> Text:
    """``text`` cut to ``width`` cells between words: at the end of a part (two spaces)
    or a clause (a comma) when one is near, else at the last space; a label left without
    its value (``guard:``) or a dangling ``and`` goes too; nothing is shown when no word
    fits."""
    if text.cell_len <= width:
        return text
    plain = text.plain
    limit, used = 0, 0
    for limit, char in enumerate(plain):  # noqa: B007 - the first char that does not fit
        used += get_character_cell_size(char)
        if used > width:
            break
    word = plain.rfind(" ", 0, limit + 1)
    cut = word
    for mark, near in NEAR:
        at = plain.rfind(mark, 0, limit + 1)
        if at > 0 and word - at <= near:
            cut = at
            break
    head = plain[:max(cut, 0)].rstrip()
    while head and (head.rsplit(" ", 1)[-1].endswith(":")
                    or head.rsplit(" ", 1)[-1].lower() in DANGLING):
        head = head.rsplit(" ", 1)[0].rstrip() if " " in head.strip() else ""
    return text[:len(head)] if head.strip() else Text("")


class TextLine(Widget):
    """A fixed-height line showing a ``Text`` (no markup is ever parsed). With ``wrap``
    a text too long for one line is wrapped onto up to ``MAX_ROWS`` rows instead of cut
    (a message that ends with the command fixing it must be read whole)."""

    DEFAULT_CSS = "TextLine { height: 1; width: 1fr; }"
    MAX_ROWS = 6

    text: reactive[Text] = reactive(Text, layout=False)

    def __init__(self, text: Text | None = None, *, wrap: bool = False, **kwargs) -> None:
        super().__init__(**kwargs)
        self.wrap = wrap
        if text is not None:
            self.text = text

    def update(self, text: Text) -> None:
        """Show ``text`` (nothing happens when it is unchanged)."""
        if text.plain != self.text.plain or text.spans != self.text.spans:
            self.text = text
            self._fit_rows()

    def on_resize(self) -> None:
        """A wrapped line may need more or fewer rows at the new width."""
        self._fit_rows()

    def _fit_rows(self) -> None:
        if not self.wrap or not self.size.width or not self.is_mounted:
            return
        rows = len(self.text.wrap(self.app.console, self.size.width))
        rows = max(1, min(rows, self.MAX_ROWS))
        if self.styles.height is None or self.styles.height.value != rows:
            self.styles.height = rows

    def render(self) -> Text:
        """The line, cut between words at the widget's width (wrapped with ``wrap``)."""
        if self.wrap or not self.size.width:
            return self.text
        return fit_words(self.text, self.size.width)
