"""The log pane: ``train.log`` followed live into a bounded ``Log`` widget, written in
batches, with follow on/off, ``/`` search with highlights and a line filter.

Bytes arrive on the watcher thread (``LogFeed.feed``), are cut into clean lines there,
and the UI drains them a few times a second with one ``write_lines`` call, so a log
growing by tens of thousands of lines a second costs the UI one cheap call per tick.
"""

from __future__ import annotations

import re
import threading
from collections import deque
from typing import Any

from rich.highlighter import Highlighter
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, Log

from remote.events import LogEvent
from trainer.text import clean_text
from tui.fmt import safe
from tui.widgets.textline import TextLine

#: Lines kept in the pane (and in the unfiltered copy used to re-filter).
MAX_LINES = 5000
#: A line without a newline longer than this is shown anyway (a runaway progress bar).
MAX_PARTIAL = 64 * 1024
#: How often the UI takes the lines that arrived (seconds).
DRAIN_INTERVAL = 0.1
#: The pane's title: the run's log, or its console output before there is one.
LOG_TITLE, CONSOLE_TITLE = "train.log", "console.log (no train.log yet)"


class LogFeed:
    """Thread-safe buffer between the watcher thread and the UI: whole, cleaned lines.

    Memory is bounded: when the UI falls behind, only the newest ``max_lines`` lines
    wait (older ones would have scrolled out of the pane anyway)."""

    def __init__(self, max_lines: int = MAX_LINES) -> None:
        self._lock = threading.Lock()
        self._pending: deque[str] = deque(maxlen=max_lines)
        self._carry = b""
        self._reset = False
        self.received_lines = 0
        #: Where the bytes held start in the file (the watch starts at the tail).
        self.first_offset = 0

    def feed(self, event: LogEvent) -> None:
        """Take one ``LogEvent`` (any thread)."""
        data = event.data
        with self._lock:
            if event.reset or not self.received_lines and not self._carry:
                self.first_offset = event.offset
            if event.reset:
                self._pending.clear()
                self._carry = b""
                self._reset = True
            data = self._carry + data
            end = data.rfind(b"\n") + 1
            if end == 0 and len(data) > MAX_PARTIAL:
                end = len(data)
            whole, self._carry = data[:end], data[end:]
        if not whole:
            return
        text = clean_text(whole.rstrip(b"\n"), keep_newlines=True)
        lines = text.split("\n")
        with self._lock:
            self._pending.extend(lines)
            self.received_lines += len(lines)

    def restart(self) -> None:
        """Forget everything: another run's log follows."""
        with self._lock:
            self._pending.clear()
            self._carry, self._reset = b"", False
            self.received_lines = self.first_offset = 0

    def drain(self) -> tuple[bool, list[str]]:
        """``(reset, lines)`` that arrived since the last drain (UI thread)."""
        with self._lock:
            reset, self._reset = self._reset, False
            lines = list(self._pending)
            self._pending.clear()
        return reset, lines


class SearchHighlighter(Highlighter):
    """Highlights every (case-insensitive) occurrence of the search term, and colours
    warning and error lines."""

    def __init__(self) -> None:
        self.pattern: re.Pattern[str] | None = None

    def set_term(self, term: str) -> None:
        """Highlight ``term`` (plain text, not a regex); empty turns it off."""
        self.pattern = re.compile(re.escape(term), re.IGNORECASE) if term else None

    def highlight(self, text: Text) -> None:
        """Stylise ``text`` in place."""
        plain = text.plain
        if "| ERROR" in plain or "| CRITICAL" in plain or "Traceback" in plain:
            text.stylize("red")
        elif "| WARNING" in plain:
            text.stylize("yellow")
        if self.pattern is not None:
            for m in self.pattern.finditer(plain):
                text.stylize("bold black on yellow", m.start(), m.end())


class LogPane(Vertical):
    """``train.log`` of the watched run. A watch starts at the log's tail: scrolled to its
    top, the pane asks for what came before (``WantsOlder``); a search also asks the box
    to search the whole file (``Searched``), whose count shows in the status line."""

    class WantsOlder(Message):
        """The pane is at its top and the log has older lines."""

    class Searched(Message):
        """The search term changed (``""``: cleared)."""

        def __init__(self, term: str) -> None:
            super().__init__()
            self.term = term

    DEFAULT_CSS = """
    LogPane { border: round $primary; height: 1fr; }
    LogPane Log { height: 1fr; }
    LogPane #log-status { height: 1; background: $boost; }
    LogPane Input { display: none; height: 3; }
    LogPane Input.-open { display: block; }
    """

    def __init__(self, max_lines: int = MAX_LINES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = LOG_TITLE
        self.feed = LogFeed(max_lines)
        self.max_lines = max_lines
        self.all_lines: deque[str] = deque(maxlen=max_lines)
        self.highlighter = SearchHighlighter()
        self.search = ""
        self.filter_text = ""
        self.follow = True
        self._editing: str | None = None
        #: Older lines exist on the box above the first one held.
        self.more_above = False
        self.box_matches: Any = None

    def compose(self) -> ComposeResult:
        """The log, a one-line status and a hidden input for search and filter."""
        log = Log(highlight=True, max_lines=self.max_lines, id="log")
        log.highlighter = self.highlighter
        yield log
        yield TextLine(id="log-status")
        yield Input(id="log-input")

    def on_mount(self) -> None:
        """Start draining the feed; watch for the top being reached."""
        self.set_interval(DRAIN_INTERVAL, self.drain)
        self.watch(self.log, "scroll_y", self._scrolled, init=False)
        self._draw_status()

    def _scrolled(self, y: float) -> None:
        if y <= 0 and self.more_above and not self.follow:
            self.post_message(self.WantsOlder())

    def show_older(self, data: bytes, more: bool) -> None:
        """Put the log's bytes that came before the first line held above it (the
        newest lines past ``max_lines`` drop off the bottom), staying where the reader
        was; ``more``: still older ones on the box."""
        older = clean_text(data.rstrip(b"\n"), keep_newlines=True).split("\n")
        keep = list(self.all_lines)[:max(0, self.max_lines - len(older))]
        self.more_above = more
        self.all_lines.clear()
        self.all_lines.extend([*older, *keep][:self.max_lines])
        self.set_filter(self.filter_text)
        self.log.scroll_to(y=len(older), animate=False)

    def show_box_matches(self, found: Any) -> None:
        """The box's count of the lines of the whole log holding the search term."""
        if found.term == self.search:
            self.box_matches = found
            self._draw_status()

    @property
    def log(self) -> Log:
        """The ``Log`` widget."""
        return self.query_one("#log", Log)

    def drain(self) -> int:
        """Move the lines that arrived into the pane; return how many were written."""
        reset, lines = self.feed.drain()
        if lines and self.border_title != LOG_TITLE:
            reset, self.border_title = True, LOG_TITLE  # train.log replaces the console
        if reset:
            self.all_lines.clear()
            self.log.clear()
        if lines and not self.all_lines and not self.log.lines:
            self.more_above = self.feed.first_offset > 0
        if not lines:
            if reset:
                self._draw_status()
            return 0
        self.all_lines.extend(lines)
        if self.filter_text:
            needle = self.filter_text.lower()
            lines = [ln for ln in lines if needle in ln.lower()]
        if lines:
            self.log.write_lines(lines[-self.max_lines:], scroll_end=self.follow)
        self._draw_status()
        return len(lines)

    def clear(self) -> None:
        """Empty the pane (another run was chosen)."""
        self.more_above, self.box_matches = False, None
        self.feed.restart()
        self.border_title = LOG_TITLE
        self.all_lines.clear()
        self.log.clear()
        self._draw_status()

    def show_console(self, text: str) -> None:
        """Show the end of console.log (cleaned) while the run has written no train.log:
        it is starting, or it died before it could, and the reason is there."""
        if self.feed.received_lines or not text:
            return
        self.border_title = CONSOLE_TITLE
        self.all_lines.clear()
        self.all_lines.extend(clean_text(text, keep_newlines=True).splitlines())
        self.set_filter(self.filter_text)

    def toggle_follow(self) -> bool:
        """Follow on/off; returns the new state."""
        self.follow = not self.follow
        self.log.auto_scroll = self.follow
        if self.follow:
            self.log.scroll_end(animate=False)
        self._draw_status()
        return self.follow

    def open_input(self, what: str) -> None:
        """Open the input line for ``search`` or ``filter``."""
        self._editing = what
        box = self.query_one("#log-input", Input)
        box.placeholder = ("search (enter: find, n/N: next/previous, empty: clear)"
                           if what == "search" else "show only lines containing… (empty: all)")
        box.value = self.search if what == "search" else self.filter_text
        box.add_class("-open")
        box.focus()

    def close_input(self) -> None:
        """Hide the input line without changing anything."""
        self._editing = None
        self.query_one("#log-input", Input).remove_class("-open")
        self.log.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Apply the search term or the filter."""
        event.stop()
        value = clean_text(event.value)
        what = self._editing
        self.close_input()
        if what == "search":
            self.set_search(value)
        elif what == "filter":
            self.set_filter(value)

    def key_escape(self) -> None:
        """Escape closes the input line."""
        if self._editing is not None:
            self.close_input()

    def set_search(self, term: str) -> None:
        """Highlight ``term`` and jump to its last occurrence; the box counts it in the
        whole log."""
        self.search, self.box_matches = term, None
        self.post_message(self.Searched(term))
        self.highlighter.set_term(term)
        self.log.refresh()
        if term:
            self.find(forward=False, from_end=True)
        self._draw_status()

    def set_filter(self, text: str) -> None:
        """Show only lines holding ``text`` (case-insensitive); empty shows all."""
        self.filter_text = text
        needle = text.lower()
        lines = [ln for ln in self.all_lines if needle in ln.lower()] if text else \
            list(self.all_lines)
        self.log.clear()
        self.log.write_lines(lines, scroll_end=self.follow)
        self._draw_status()

    def matches(self) -> list[int]:
        """Indices of the shown lines that hold the search term."""
        if not self.search:
            return []
        needle = self.search.lower()
        return [i for i, ln in enumerate(self.log.lines) if needle in ln.lower()]

    def find(self, forward: bool = True, from_end: bool = False) -> int | None:
        """Scroll to the next (or previous) line holding the search term; its index."""
        hits = self.matches()
        if not hits:
            self.app.notify("no match for the search", severity="warning", timeout=2)
            return None
        log = self.log
        here = len(log.lines) if from_end else int(log.scroll_offset.y)
        if forward:
            target = next((i for i in hits if i > here), hits[0])
        else:
            target = next((i for i in reversed(hits) if i < here), hits[-1])
        if self.follow:
            self.toggle_follow()
        log.scroll_to(y=max(0, target - log.size.height // 2), animate=False)
        return target

    def _draw_status(self) -> None:
        status = Text(" ")
        status.append("follow on" if self.follow else "follow OFF",
                      style="green" if self.follow else "bold yellow")
        status.append(f"  {len(self.log.lines)} lines shown", style="dim")
        if self.search:
            status.append("  search: ")
            status.append_text(safe(self.search, 40, "bold"))
            status.append(f" ({len(self.matches())} lines")
            found = self.box_matches
            if found is not None:
                status.append(f", {found.total} in the whole log")
                if found.matches:
                    status.append(f" from line {found.matches[0].line}")
            status.append(")")
        if self.filter_text:
            status.append("  filter: ")
            status.append_text(safe(self.filter_text, 40, "bold"))
        status.append("   f follow · / search · n/N next · & filter", style="dim")
        self.query_one("#log-status", TextLine).update(status)
