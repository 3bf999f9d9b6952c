"""``Reader``: the frame of every modal that is read rather than answered (the keys, the
events history, the whole log's matches): a title that stays, content that scrolls
under it, closed by Escape or q or the key that opened it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class Reader(ModalScreen[None]):
    """A title and scrolling content (``compose_body``); subclasses set ``BINDINGS`` for
    the keys that close it, and ``start_at_end`` to open on the newest lines. It scrolls
    with a pager's keys besides the arrows: j/k, space/b, g/G, ctrl+d/ctrl+u."""

    DEFAULT_CSS = """
    Reader { align: center middle; }
    Reader > Vertical {
        width: 120; max-width: 98%; height: 90%; border: thick $primary;
        background: $surface; padding: 0 1;
    }
    Reader .reader-title { text-style: bold; margin-bottom: 1; }
    Reader VerticalScroll { height: 1fr; }
    """
    BINDINGS = [Binding("j", "scroll('down')", show=False),
                Binding("k", "scroll('up')", show=False),
                Binding("space,ctrl+d", "scroll('page_down')", show=False),
                Binding("b,ctrl+u", "scroll('page_up')", show=False),
                Binding("g", "scroll('home')", show=False),
                Binding("G", "scroll('end')", show=False)]
    #: Open scrolled to the end (the newest lines) rather than the top.
    start_at_end = False

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title

    def compose(self) -> ComposeResult:
        """The title, then the body in a scrolling container."""
        with Vertical():
            yield Static(Text(self.title_text), classes="reader-title")
            with VerticalScroll():
                yield from self.compose_body()

    def compose_body(self) -> ComposeResult:
        """The content (override)."""
        yield from ()

    def action_scroll(self, how: str) -> None:
        """Scroll the content as a pager does."""
        body = self.query_one(VerticalScroll)
        {"down": body.scroll_down, "up": body.scroll_up, "page_down": body.scroll_page_down,
         "page_up": body.scroll_page_up, "home": body.scroll_home,
         "end": body.scroll_end}[how](animate=False)

    def on_mount(self) -> None:
        """Show the end first where the newest lines matter most."""
        if self.start_at_end:
            self.query_one(VerticalScroll).scroll_end(animate=False)
