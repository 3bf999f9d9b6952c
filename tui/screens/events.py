"""The events history: every notification, failure and link change of this session, with
its time and box, so that what a toast showed for a few seconds can be read again."""

from __future__ import annotations

import time
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Static

from tui.fmt import safe
from tui.screens.reader import Reader

SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "information": "",
                   "note": "dim"}
#: Entries kept (the oldest go first).
MAX_EVENTS = 500


@dataclass(frozen=True)
class Event:
    """One line of the history."""

    at: float
    title: str
    message: str
    severity: str


def events_text(events: list[Event]) -> Text:
    """The history as lines, oldest first."""
    text = Text()
    if not events:
        text.append("nothing has happened yet", style="dim")
        return text
    for n, event in enumerate(events):
        if n:
            text.append("\n")
        text.append(time.strftime("%H:%M:%S ", time.localtime(event.at)), style="dim")
        if event.title:
            text.append_text(safe(event.title, 40, "bold"))
            text.append(" ")
        text.append_text(safe(event.message, 4000, SEVERITY_STYLES.get(event.severity, "")))
    return text


class EventsScreen(Reader):
    """The history, scrolled to the newest (Escape, e or q closes)."""

    BINDINGS = [Binding("escape,e,q", "app.pop_screen", "Close")]
    start_at_end = True

    def __init__(self, events: list[Event]) -> None:
        super().__init__(f"Events ({len(events)}, newest last; Escape closes)")
        self.events = list(events)

    def compose_body(self) -> ComposeResult:
        """The lines."""
        yield Static(events_text(self.events), id="events")
