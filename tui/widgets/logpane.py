"""The log pane: ``train.log`` followed live into a bounded ``Log`` widget, written in
batches, with follow on/off, ``/`` search with highlights (``n``/``N`` cycle through the
matches; the current one is marked and scrolled into view), a line filter, the keys of
a pager (j/k, g/G, ctrl+d/ctrl+u, left/right by half a screen), and wrapping (``W``; on
by default below ``WRAP_BELOW`` columns: ``tui.widgets.logview``). Scrolling up pauses
following, visibly; G or End resumes it; a resize keeps following.

Bytes arrive on the watcher thread (``LogFeed.feed``), are cut into clean lines there,
and the UI drains them a few times a second with one ``write_lines`` call, so a log
growing by tens of thousands of lines a second costs the UI one cheap call per tick.
"""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input

from remote.runs import LogMatches
from trainer.text import clean_text
from tui.fmt import safe
from tui.widgets.field import Field
from tui.widgets.logfeed import HeldLines, LogFeed
from tui.widgets.logview import FollowLog, SearchHighlighter
from tui.widgets.textline import TextLine

#: Lines kept in the pane (and in the unfiltered copy used to re-filter).
MAX_LINES = 5000
#: Lines the pane may hold once older parts of the log were fetched from the box.
HISTORY_LINES = 50_000
#: How often the UI takes the lines that arrived (seconds).
DRAIN_INTERVAL = 0.1
#: The pane's title: the run's log, or its console output before there is one.
LOG_TITLE, CONSOLE_TITLE = "train.log", "console.log (no train.log yet)"
#: Below this many columns of terminal the lines are wrapped (until W chooses).
WRAP_BELOW = 120


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
    LogPane Log { height: 1fr; scrollbar-size-horizontal: 0; }
    LogPane #log-status { height: 1; background: $boost; }
    LogPane Input { display: none; height: 1; }
    LogPane Input.-open { display: block; }
    """
    BINDINGS = [
        Binding("j", "scroll('down')", "down", show=False),
        Binding("k", "scroll('up')", "up", show=False),
        Binding("g", "scroll('top')", "top", show=False),
        Binding("G", "scroll('bottom')", "bottom", show=False),
        Binding("ctrl+d", "scroll('half_down')", "half page down", show=False),
        Binding("ctrl+u", "scroll('half_up')", "half page up", show=False),
    ]

    def __init__(self, max_lines: int = MAX_LINES, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = LOG_TITLE
        self.feed = LogFeed(max_lines)
        self.max_lines = max_lines
        #: The lines held (filtered or not), where they start in the file.
        self.all_lines = HeldLines(max_lines)
        self.highlighter = SearchHighlighter()
        self.search = ""
        self.filter_text = ""
        self.follow = True
        #: The line of the current search match (an index into the shown lines).
        self.match_line: int | None = None
        #: Wrapping as chosen with W (``None``: by the terminal's width).
        self.wrap_chosen: bool | None = None
        self._editing: str | None = None
        #: The box's answer to a search of the whole log (``None``: none yet).
        self.box_matches: LogMatches | None = None
        #: Why the box could not search the whole log for the current term.
        self.box_search_error: str | None = None

    def compose(self) -> ComposeResult:
        """The log, a one-line status and a hidden input for search and filter."""
        log = FollowLog(highlight=True, max_lines=self.max_lines, auto_scroll=False, id="log")
        log.highlighter = self.highlighter
        yield log
        yield TextLine(id="log-status")
        yield Field(id="log-input", compact=True)

    def on_mount(self) -> None:
        """Start draining the feed; watch for the top being reached."""
        self.set_interval(DRAIN_INTERVAL, self.drain)
        self.watch(self.log_view, "scroll_y", self._scrolled, init=False)
        self._draw_status()

    @property
    def more_above(self) -> bool:
        """Whether the log has lines before the first one held (on the box)."""
        return self.all_lines.more_above

    def _scrolled(self, _y: float) -> None:
        self._at_top()

    def _at_top(self) -> None:
        # Checked on every scroll and when following stops: a key like g scrolls to the
        # top first and stops following after, and either order must fetch.
        if self.log_view.scroll_y <= 0 and self.more_above and not self.follow:
            if len(self.all_lines) >= HISTORY_LINES:
                self.app.notify(f"the pane holds {HISTORY_LINES:,} lines: / searches the "
                                "whole log on the box (L lists the matches)", timeout=5)
            else:
                self.post_message(self.WantsOlder())

    def show_older(self, start: int, data: bytes) -> None:
        """Put the log's bytes ``start``.. that end where the first line held begins
        above it, staying where the reader was (nothing when they no longer join: the
        log changed meanwhile)."""
        shown = len(self.log_view.lines)
        if not self.all_lines.prepend(start, data, HISTORY_LINES):
            return
        self.log_view.max_lines = self.all_lines.capacity
        self.set_filter(self.filter_text)
        self.log_view.scroll_to(y=self.log_view.row_of(len(self.log_view.lines) - shown),
                           animate=False, immediate=True)

    def show_box_matches(self, found: LogMatches) -> None:
        """The box's count of the lines of the whole log holding the search term."""
        if found.term == self.search:
            self.box_matches, self.box_search_error = found, None
            self._draw_status()

    def box_search_failed(self, term: str, why: str) -> None:
        """The box could not search the whole log for ``term``."""
        if term == self.search:
            self.box_search_error = why
            self._draw_status()

    @property
    def log_view(self) -> FollowLog:
        """The log, as the ``FollowLog`` it is."""
        return self.query_one("#log", FollowLog)

    def _to_end(self) -> None:
        self.log_view.scroll_end(animate=False, immediate=True, x_axis=False)

    def drain(self) -> int:
        """Move the lines that arrived into the pane; return how many were written."""
        reset, lines, sizes, start = self.feed.drain()
        if lines and self.border_title != LOG_TITLE:
            reset, self.border_title = True, LOG_TITLE  # train.log replaces the console
        if reset:
            self.all_lines.clear(start)
        if lines and not self.all_lines.append(lines, sizes, start):
            reset = True  # the feed dropped lines while the UI was behind: no gap shown
        if reset:
            self.log_view.max_lines = self.all_lines.capacity
            self.log_view.clear()
            self.match_line = None
        if not lines:
            if reset:
                self._draw_status()
            return 0
        if self.filter_text:
            needle = self.filter_text.lower()
            lines = [ln for ln in lines if needle in ln.lower()]
        if lines:
            before = len(self.log_view.lines)
            self.log_view.write_lines(lines[-self.all_lines.capacity:], scroll_end=False)
            if self.match_line is not None:  # lines pruned from the top shift the match
                pruned = before + len(lines[-self.all_lines.capacity:]) - len(self.log_view.lines)
                self.match_line = self.match_line - pruned if self.match_line >= pruned \
                    else None
            if self.follow:
                self._to_end()
        self._draw_status()
        return len(lines)

    def on_resize(self) -> None:
        """A new size keeps following (the old end is no longer the end); the status
        line fits the new width; below ``WRAP_BELOW`` columns the lines wrap unless W
        chose otherwise."""
        if self.wrap_chosen is None:
            self.log_view.set_wrap(self.app.size.width < WRAP_BELOW)
        self._draw_status()
        if self.follow:
            self.call_after_refresh(self._to_end)

    def clear(self) -> None:
        """Empty the pane (another run was chosen)."""
        self.box_matches, self.box_search_error = None, None
        self.feed.restart()
        self.border_title = LOG_TITLE
        self.all_lines.clear()
        self.log_view.max_lines = self.all_lines.capacity
        self.log_view.clear()
        self.match_line = None
        self._draw_status()

    def set_follow(self, on: bool) -> None:
        """Follow the end of the log, or stay where the view is."""
        was, self.follow = self.follow, on
        if on:
            self._to_end()
        elif was:
            self._at_top()
        self._draw_status()

    def show_console(self, text: str) -> None:
        """Show the end of console.log (cleaned) while the run has written no train.log:
        it is starting, or it died before it could, and the reason is there."""
        if self.feed.received_lines or not text:
            return
        self.border_title = CONSOLE_TITLE
        self.all_lines.replace(clean_text(text, keep_newlines=True).splitlines())
        self.set_filter(self.filter_text)

    def toggle_wrap(self) -> bool:
        """W: wrap the lines (compact form) or one line a row; the choice holds at any
        width. Returns whether they wrap now."""
        self.wrap_chosen = not self.log_view.wrap
        self.log_view.set_wrap(self.wrap_chosen)
        if self.follow:
            self._to_end()
        elif self.match_line is not None and self.search:  # the hit stays in view
            self.log_view.show_hit(self.match_line, self.search)
        self._draw_status()
        return self.wrap_chosen

    def toggle_follow(self) -> bool:
        """f: follow on/off; returns the new state."""
        self.set_follow(not self.follow)
        return self.follow

    def on_follow_log_scrolled(self, event: FollowLog.Scrolled) -> None:
        """The user scrolled: up pauses following, reaching the end resumes it."""
        if event.at_end != self.follow:
            self.set_follow(event.at_end)

    def action_scroll(self, how: str) -> None:
        """The pager keys."""
        log = self.log_view
        half = max(1, log.size.height // 2)
        if how == "bottom":
            self.set_follow(True)
            return
        if how == "top":
            log.scroll_home(animate=False, immediate=True)
        elif how in ("up", "down"):
            log.scroll_relative(y=-1 if how == "up" else 1, animate=False, immediate=True)
        else:
            log.scroll_relative(y=-half if how == "half_up" else half, animate=False,
                                immediate=True)
        self.set_follow(log.is_vertical_scroll_end and how not in ("top", "up", "half_up"))

    def open_input(self, what: str) -> None:
        """Open the input line for ``search`` or ``filter``."""
        self._editing = what
        box = self.query_one("#log-input", Input)
        box.placeholder = ("search (Enter: find, n/N: next/previous, Esc: clear)"
                           if what == "search" else "show only lines containing… (Esc: all)")
        box.value = self.search if what == "search" else self.filter_text
        box.add_class("-open")
        box.focus()

    def close_input(self) -> None:
        """Hide the input line without changing anything."""
        self._editing = None
        self.query_one("#log-input", Input).remove_class("-open")
        self.log_view.focus()

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

    def escape(self) -> bool:
        """Esc: close the input line, else clear the search and the filter; ``True``
        when there was something to close or clear."""
        if self._editing is not None:
            self.close_input()
            return True
        if self.search or self.filter_text:
            if self.search:
                self.set_search("")
            if self.filter_text:
                self.set_filter("")
            return True
        return False

    def set_search(self, term: str) -> None:
        """Highlight ``term`` and jump to its last occurrence; the box counts it in the
        whole log."""
        self.search, self.box_matches, self.box_search_error = term, None, None
        self.post_message(self.Searched(term))
        self.match_line = None
        self.highlighter.set_term(term)
        self.log_view.refresh()
        if term:
            self.find(forward=False)
        else:
            self.log_view.scroll_to(x=0, animate=False, immediate=True)
        self._draw_status()

    def set_filter(self, text: str) -> None:
        """Show only lines holding ``text`` (case-insensitive); empty shows all."""
        self.filter_text = text
        self.match_line = None
        needle = text.lower()
        lines = [ln for ln in self.all_lines if needle in ln.lower()] if text else \
            list(self.all_lines)
        self.log_view.clear()
        self.log_view.write_lines(lines, scroll_end=False)
        if self.follow:
            self._to_end()
        self._draw_status()

    def matches(self) -> list[int]:
        """Indices of the shown lines that hold the search term."""
        if not self.search:
            return []
        needle = self.search.lower()
        return [i for i, ln in enumerate(self.log_view.lines) if needle in ln.lower()]

    def find(self, forward: bool = True) -> int | None:
        """n / N: move to the next (or previous) match, wrapping around; its line. The
        first search starts from the end (the newest match)."""
        hits = self.matches()
        if not hits:
            self.app.notify("no match for the search" if self.search else
                            "no search yet: / starts one", severity="warning", timeout=3)
            return None
        here = self.match_line
        if here is None:
            target = hits[-1]
        elif forward:
            target = next((i for i in hits if i > here), hits[0])
        else:
            target = next((i for i in reversed(hits) if i < here), hits[-1])
        self.match_line = target
        self.follow = False
        self.log_view.show_hit(target, self.search)
        self._draw_status()
        return target

    def _draw_status(self) -> None:
        # A narrow pane (an 80-column terminal) keeps what matters: the state, the
        # search's place and the whole log's count; the counts and the key hints go.
        wide = self.size.width == 0 or self.size.width >= 70
        status = Text(" ")
        if self.follow:
            status.append("following", style="green")
        else:
            status.append("⏸ paused (G: follow)" if wide else "⏸ paused (G)",
                          style="bold yellow")
        if wide:
            status.append(f"  {len(self.log_view.lines)} lines", style="dim")
        if self.search:
            hits = self.matches()
            status.append("  /")
            status.append_text(safe(self.search, 30 if wide else 12, "bold"))
            if self.match_line in hits:
                status.append(f" match {hits.index(self.match_line) + 1}/{len(hits)}")
            else:
                status.append(f" {len(hits)} here" if hits else " none here")
            if self.box_matches is not None:
                status.append(f" · whole log {self.box_matches.total} (L)")
            elif self.box_search_error is not None:
                status.append(" · whole log not searched", style="yellow")
        if self.filter_text:
            status.append("  &")
            status.append_text(safe(self.filter_text, 30 if wide else 12, "bold"))
        wrapped = self.log_view.wrap
        if wrapped and wide:
            status.append("  wrapped", style="dim")
        if wide or not (self.search or self.filter_text):
            # The key hints that fit, whole, in their order.
            hints = ["/ search", "n/N", "& filter", "W unwrap" if wrapped else "W wrap",
                     "j/k g/G", *(() if wrapped else ("←/→",)), "Esc clear"]
            room = (self.size.width or 200) - status.cell_len - 2
            shown = [h for n, h in enumerate(hints)
                     if len(" · ".join(hints[:n + 1])) <= room]
            if shown:
                status.append("  " + " · ".join(shown), style="dim")
        self.log_view.set_mark(self.match_line, self.search)
        self.query_one("#log-status", TextLine).update(status)
