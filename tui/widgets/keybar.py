"""The footer: the keys that act now (``tui.hints``), as many as fit, the most important
kept on a narrow terminal; a click on one presses it."""

from __future__ import annotations

from rich.text import Text
from textual import events

from tui.hints import Hint, fit
from tui.widgets.textline import TextLine


class KeyBar(TextLine):
    """One line at the bottom of the main screen, fed with ``show``."""

    COMPONENT_CLASSES = {"keybar--key"}
    DEFAULT_CSS = """
    KeyBar { dock: bottom; height: 1; background: $footer-background;
             color: $footer-description-foreground; }
    KeyBar > .keybar--key { color: $footer-key-foreground; text-style: bold; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.hints: list[Hint] = []
        #: The hints drawn, with the columns each covers (for clicks).
        self.drawn: list[tuple[int, int, Hint]] = []

    def show(self, hints: list[Hint]) -> None:
        """Draw the hints that fit the width now."""
        self.hints = list(hints)
        width = self.size.width or 80
        text = Text(" ")
        key_style = self.get_component_rich_style("keybar--key")
        drawn = []
        for n, hint in enumerate(fit(self.hints, width - 1)):
            if n:
                text.append("  ")
            start = text.cell_len
            text.append(hint.shown, style=key_style)
            text.append(" " + hint.label)
            drawn.append((start, text.cell_len, hint))
        self.drawn = drawn
        self.update(text)

    @property
    def shown(self) -> list[str]:
        """The keys drawn now, as written (``?``, ``q``, ``Esc``...)."""
        return [hint.shown for _, _, hint in self.drawn]

    def on_resize(self) -> None:
        """Another width: as many as fit now."""
        self.show(self.hints)

    def on_click(self, event: events.Click) -> None:
        """A click on a key presses it."""
        for start, end, hint in self.drawn:
            if start <= event.x < end:
                self.app.simulate_key(hint.key)
                return
