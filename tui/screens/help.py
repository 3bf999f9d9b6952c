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
    """Lists the app's key bindings (Escape, q or ? closes)."""

    DEFAULT_CSS = "HelpScreen > Vertical { width: 90; max-width: 95%; padding: 1 2; }"
    BINDINGS = [Binding("escape,q,question_mark,f1", "app.pop_screen", "Close")]

    def __init__(self, keys: list[tuple[str, str]]) -> None:
        super().__init__("Help")
        self.keys = keys

    def compose_body(self) -> ComposeResult:
        """The intro and a table of keys."""
        table = Table(box=None, show_header=True, header_style="bold")
        table.add_column("key")
        table.add_column("action")
        for key, desc in self.keys:
            table.add_row(Text(key, style="bold cyan"), Text(desc))
        yield Static(Text(INTRO + "\n"))
        yield Static(table)
        yield Static(Text("\nctrl+p opens the command palette with every action.",
                          style="dim"))
