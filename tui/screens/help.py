"""The help screen: every key, what it does, and how the app treats the run."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.screens.reader import Reader

INTRO = (
    "gpurent-tui watches runs on rented GPU boxes. Training runs detached on the box: "
    "quitting this app, or losing the network, never stops it. Costs keep running until "
    "you stop or destroy the instance."
)


class HelpScreen(Reader):
    """Lists the app's keys pane by pane (Escape, q or ? closes). ``sections``: (title,
    [(keys, what they do)])."""

    DEFAULT_CSS = "HelpScreen > Vertical { width: 100; max-width: 95%; padding: 1 2; }"
    BINDINGS = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]

    def __init__(self, sections: list[tuple[str, list[tuple[str, str]]]]) -> None:
        super().__init__("Help (j/k, space/b, g/G scroll; Esc closes)")
        self.sections = sections

    @property
    def keys(self) -> list[tuple[str, str]]:
        """Every (keys, what they do), all sections together."""
        return [pair for _title, pairs in self.sections for pair in pairs]

    def section(self, title: str) -> dict[str, str]:
        """The keys of the section whose title starts with ``title``."""
        return next(dict(pairs) for name, pairs in self.sections if name.startswith(title))

    def compose_body(self) -> ComposeResult:
        """The intro and one table of keys per pane."""
        yield Static(Text(INTRO))
        for title, pairs in self.sections:
            table = Table(box=None, show_header=False, padding=(0, 2, 0, 0))
            table.add_column("key", min_width=18)
            table.add_column("action")
            for key, desc in pairs:
                table.add_row(Text(key, style="bold cyan"), Text(desc))
            yield Static(Text(f"\n{title}", style="bold underline"))
            yield Static(table)


def unprefixed(desc: str) -> str:
    """A key's description without its pane ("Log: search…" reads "Search…" under the
    help screen's "Log pane")."""
    for prefix in ("Log: ", "Charts: "):
        if desc.startswith(prefix):
            rest = desc[len(prefix):]
            return rest[:1].upper() + rest[1:]
    return desc
