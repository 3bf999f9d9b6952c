"""The lines of the whole ``train.log`` that hold the search term, as the box found them
(``remote.logread.search``): the pane holds only the log's tail, so this is where a
match from hours ago is read, with its line number."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from remote.logread import LogMatches
from tui.fmt import safe

#: Characters of a matched line shown (the rest is cut with an ellipsis).
LINE_CHARS = 400


def matches_title(found: LogMatches) -> str:
    """One line: how many lines hold the term, and how many are listed."""
    if not found.total:
        return f"no line of the whole log holds {found.term!r}"
    listed = len(found.matches)
    more = f", the first {listed} listed" if found.truncated or listed < found.total else ""
    return (f"{found.total} line{'s' if found.total != 1 else ''} of the whole log hold "
            f"{found.term!r}{more} (Escape closes)")


def matches_text(found: LogMatches) -> Text:
    """The matched lines, each after its line number, the term highlighted."""
    text = Text()
    width = len(f"{max((m.line for m in found.matches), default=0):,}")
    for n, match in enumerate(found.matches):
        if n:
            text.append("\n")
        text.append(f"{match.line:>{width},} ", style="dim")
        line = safe(match.text, LINE_CHARS)
        line.highlight_words([found.term], style="reverse", case_sensitive=False)
        text.append_text(line)
    return text


class MatchesScreen(ModalScreen[None]):
    """The box's matches of a whole-log search (Escape, L or q closes)."""

    DEFAULT_CSS = """
    MatchesScreen { align: center middle; }
    MatchesScreen > Vertical {
        width: 140; max-width: 98%; height: 90%; border: thick $primary;
        background: $surface; padding: 0 1;
    }
    MatchesScreen #matches-title { text-style: bold; margin-bottom: 1; }
    MatchesScreen VerticalScroll { height: 1fr; }
    """
    BINDINGS = [Binding("escape,L,q", "app.pop_screen", "Close")]

    def __init__(self, found: LogMatches) -> None:
        super().__init__()
        self.found = found

    def compose(self) -> ComposeResult:
        """The title stays; the lines scroll under it."""
        with Vertical():
            yield Static(Text(matches_title(self.found)), id="matches-title")
            with VerticalScroll():
                yield Static(matches_text(self.found), id="matches")

    def on_mount(self) -> None:
        """The newest matches are the likeliest wanted: show the end."""
        self.query_one(VerticalScroll).scroll_end(animate=False)
