"""The lines of the whole ``train.log`` that hold the search term, as the box found them
(``remote.runs.log.search``): the pane holds only the log's tail, so this is where a
match from hours ago is read, with its line number."""

from __future__ import annotations

from rich.table import Table
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from remote.runs import LogMatches
from tui.fmt import safe
from tui.screens.reader import Reader

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


def matches_table(found: LogMatches) -> Table:
    """The matched lines after their line numbers (a long line wraps under its own
    column), the term highlighted."""
    table = Table(box=None, show_header=False, padding=(0, 1, 0, 0), expand=True)
    table.add_column(justify="right", style="dim", no_wrap=True)
    table.add_column(ratio=1, overflow="fold")
    for match in found.matches:
        line = safe(match.text, LINE_CHARS)
        line.highlight_words([found.term], style="reverse", case_sensitive=False)
        table.add_row(f"{match.line:,}", line)
    return table


class MatchesScreen(Reader):
    """The box's matches of a whole-log search, newest shown first (Escape, L or q
    closes)."""

    DEFAULT_CSS = "MatchesScreen > Vertical { width: 140; }"
    BINDINGS = [Binding("escape,L,q", "app.pop_screen", "Close")]
    start_at_end = True

    def __init__(self, found: LogMatches) -> None:
        super().__init__(matches_title(found))
        self.found = found

    def compose_body(self) -> ComposeResult:
        """The matched lines."""
        yield Static(matches_table(self.found), id="matches")
