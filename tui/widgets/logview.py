"""How the log pane draws its lines: ``FollowLog``, a ``Log`` that tells the pane when the
user scrolls, marks the current search hit and scrolls it into view, and shows its lines
one of two ways. Unwrapped, one line a row as in the file, scrolled sideways by half a
screen (the default from 120 columns). Wrapped, in a compact form (the time, without the
date, and without the level where it is INFO) wrapped at spaces to the pane's width (the
default below 120 columns, where a training line would otherwise end before its loss).

``lines`` stay the file's lines in both ways (search, filter and the tests read them);
wrapping keeps, per line, the row where it ends, updated for the lines written and the
lines pruned from the top, and laid out anew only when the width changes."""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Iterable

from rich.cells import cell_len, get_character_cell_size
from rich.highlighter import Highlighter
from rich.style import Style
from rich.text import Text
from textual.actions import SkipAction
from textual.events import Resize
from textual.geometry import Size
from textual.message import Message
from textual.strip import Strip
from textual.widgets import Log

#: The trainer's (and loguru's) line start: date, time, level, and loguru's place.
PREFIX = re.compile(r"(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:[.,]\d+)? *\| *([A-Z]+) *\| ?"
                    r"(?:[\w.<>-]+:[\w.<>-]+:\d+ - )?")
#: The current search hit (the other hits are black on yellow).
MARK_STYLE = "bold white on dark_orange3"


def compact(line: str) -> str:
    """``line`` without its date and its level when that is INFO (other levels stay as
    a word); a line of another format as it is."""
    found = PREFIX.match(line)
    if found is None:
        return line
    level = found.group(3)
    rest = line[found.end():]
    return f"{found.group(2)} {rest}" if level == "INFO" else \
        f"{found.group(2)} {level} {rest}"


def row_starts(text: str, width: int) -> list[int]:
    """Where each row of ``text`` wrapped to ``width`` cells starts: at a space where
    there is one in the row, else cut at the width (a wide character is never split)."""
    if width <= 0:
        return [0]
    starts = [0]
    if text.isascii():
        start, size = 0, len(text)
        while size - start > width:
            space = text.rfind(" ", start + 1, start + width + 1)
            start = space + 1 if space > start else start + width
            starts.append(start)
        return starts
    used = 0
    for n, char in enumerate(text):
        cells = get_character_cell_size(char)
        if used + cells > width and used:
            starts.append(n)
            used = 0
        used += cells
    return starts


def find_term(text: str, term: str) -> re.Match[str] | None:
    """The first (case-insensitive) occurrence of ``term`` in ``text``."""
    return re.search(re.escape(term), text, re.IGNORECASE) if term else None


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
        self.paint(text, text.plain)

    def paint(self, text: Text, source: str) -> None:
        """Stylise ``text``, the shown form of the log line ``source`` (the level is read
        from the line as written, which the compact form shortens)."""
        if "| ERROR" in source or "| CRITICAL" in source or "Traceback" in source:
            text.stylize("red")
        elif "| WARNING" in source:
            text.stylize("yellow")
        if self.pattern is not None:
            for m in self.pattern.finditer(text.plain):
                text.stylize("bold black on yellow", m.start(), m.end())


class FollowLog(Log):
    """A ``Log`` that tells its pane when the user scrolls it (keys or wheel), so that
    following pauses when they scroll up and resumes when they reach the end; that wraps
    its lines or not (``set_wrap``), and marks the current search hit (``show_hit``).
    Rows and lines differ only when wrapped: ``row_of``/``line_at`` convert."""

    class Scrolled(Message):
        """The user scrolled; ``at_end`` when the view is now at the last line."""

        def __init__(self, at_end: bool) -> None:
            super().__init__()
            self.at_end = at_end

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.wrap = False
        #: The current search hit: (line index, term), or ``None``.
        self.mark: tuple[int, str] | None = None
        #: When wrapped: the row after each line (plus ``_base``, the rows of the lines
        #: pruned from the top) and the width the rows were cut at.
        self._ends: list[int] = []
        self._base = 0
        self._cols = 0

    # ------------------------------------------------------------------ scrolling, told

    def _told(self) -> None:
        self.call_after_refresh(lambda: self.post_message(
            self.Scrolled(self.is_vertical_scroll_end)))

    def _on_mouse_scroll_up(self, event) -> None:  # noqa: ANN001 - Textual's event
        super()._on_mouse_scroll_up(event)
        self._told()

    def _on_mouse_scroll_down(self, event) -> None:  # noqa: ANN001
        super()._on_mouse_scroll_down(event)
        self._told()

    def action_scroll_up(self) -> None:
        """Up arrow (and k)."""
        super().action_scroll_up()
        self._told()

    def action_scroll_down(self) -> None:
        """Down arrow (and j)."""
        super().action_scroll_down()
        self._told()

    def action_page_up(self) -> None:
        """Page up."""
        super().action_page_up()
        self._told()

    def action_page_down(self) -> None:
        """Page down."""
        super().action_page_down()
        self._told()

    def action_scroll_home(self) -> None:
        """Home (and g)."""
        super().action_scroll_home()
        self._told()

    def action_scroll_end(self) -> None:
        """End (and G)."""
        super().action_scroll_end()
        self._told()

    def action_scroll_left(self) -> None:
        """Left arrow: half a screen to the left (lines not wrapped)."""
        self._sideways(-1)

    def action_scroll_right(self) -> None:
        """Right arrow: half a screen to the right (lines not wrapped)."""
        self._sideways(1)

    def _sideways(self, direction: int) -> None:
        if not self.allow_horizontal_scroll:
            raise SkipAction()
        half = max(1, self.scrollable_content_region.width // 2)
        self.scroll_relative(x=direction * half, animate=False, immediate=True)

    # ------------------------------------------------------------------ wrapping

    def set_wrap(self, on: bool) -> None:
        """Wrap the lines (compact form) or show one line a row; the line at the top
        stays at the top."""
        if on == self.wrap:
            return
        top = self.line_at(round(self.scroll_y))
        self.wrap = on
        self._layout()
        self.scroll_to(x=0, y=self.row_of(top), animate=False, immediate=True)
        self.refresh()

    def _layout(self) -> None:
        self._ends, self._base = [], 0
        self._cols = self.scrollable_content_region.width
        self._extend()

    def _extend(self) -> None:
        """Rows for the lines not laid out yet, then the scrollable size."""
        if self.wrap:
            ends, cols = self._ends, self._cols
            total = ends[-1] if ends else self._base
            for line in self._lines[len(ends):]:
                total += len(row_starts(self._shown(line), cols))
                ends.append(total)
            self.virtual_size = Size(cols, total - self._base)
        else:
            self.virtual_size = Size(self._width, len(self._lines))

    def _shown(self, line: str) -> str:
        text = self._process_line(line)
        return compact(text) if self.wrap else text

    def row_of(self, line: int) -> int:
        """The first row of line ``line``."""
        if not self.wrap:
            return line
        if line <= 0 or not self._ends:
            return 0
        return self._ends[min(line, len(self._ends)) - 1] - self._base

    def line_at(self, row: int) -> int:
        """The line shown on row ``row``."""
        if not self.wrap or not self._ends:
            return row
        return min(bisect_right(self._ends, row + self._base), len(self._ends) - 1)

    def on_resize(self, _event: Resize) -> None:
        """A new width cuts the rows anew (the line at the top stays there)."""
        if self.wrap and self.scrollable_content_region.width != self._cols:
            top = self.line_at(round(self.scroll_y))
            self._layout()
            self.scroll_to(y=self.row_of(top), animate=False, immediate=True)

    # ------------------------------------------------------------------ Log, wrapped

    def write_lines(self, lines: Iterable[str], scroll_end: bool | None = None) -> FollowLog:
        """Write ``lines`` (as ``Log.write_lines``), laid out in rows when wrapped."""
        if not self.wrap:
            super().write_lines(lines, scroll_end)
            return self
        at_end = self.is_vertical_scroll_end
        super().write_lines(lines, scroll_end=False)
        self._extend()
        if (self.auto_scroll if scroll_end is None else scroll_end) and at_end:
            self.scroll_end(animate=False, immediate=True, x_axis=False)
        return self

    def clear(self) -> FollowLog:
        """Empty the log (and its rows)."""
        super().clear()
        self._ends, self._base = [], 0
        return self

    def _prune_max_lines(self) -> None:
        before = len(self._lines)
        super()._prune_max_lines()
        gone = min(before - len(self._lines), len(self._ends))
        if gone > 0:
            self._base = self._ends[gone - 1]
            del self._ends[:gone]

    def _update_maximum_width(self, updates: int, size: int) -> None:
        if not self.wrap:
            super()._update_maximum_width(updates, size)
        elif updates == self._updates:  # kept for when the lines are unwrapped again
            self._width = max(size, self._width)

    # ------------------------------------------------------------------ the hit

    def set_mark(self, line: int | None, term: str) -> None:
        """Mark the first occurrence of ``term`` on line ``line`` as the current hit
        (``None``: no hit)."""
        mark = None if line is None or not term else (line, term)
        if mark != self.mark:
            self.mark = mark
            self.refresh()

    def show_hit(self, line: int, term: str) -> None:
        """Mark the hit of ``term`` on line ``line`` and scroll it into view: its row in
        the middle; unwrapped, sideways too when it is past the right edge."""
        self.set_mark(line, term)
        height = self.scrollable_content_region.height
        shown = self._shown(self._lines[line])
        hit = find_term(shown, term)
        if self.wrap:
            row = self.row_of(line)
            if hit is not None:
                row += bisect_right(row_starts(shown, self._cols), hit.start()) - 1
            self.scroll_to(y=max(0, row - height // 2), animate=False, immediate=True)
            return
        x = 0
        if hit is not None:
            width = self.scrollable_content_region.width
            left, right = cell_len(shown[:hit.start()]), cell_len(shown[:hit.end()])
            if right > width:
                x = max(0, left - width // 3)
            if cell_len(shown) > self._width:  # the width is measured in a thread
                self._width = cell_len(shown)
                self.virtual_size = Size(self._width, len(self._lines))
        self.scroll_to(x=x, y=max(0, line - height // 2), animate=False, immediate=True)

    # ------------------------------------------------------------------ drawing

    def _styled(self, line: int, rich_style: Style) -> Text:
        """Line ``line`` as shown, highlighted, with the current hit marked."""
        source = self._process_line(self._lines[line])
        shown = compact(source) if self.wrap else source
        text = Text(shown, no_wrap=True, end="")
        text.stylize(rich_style)
        if self.highlight:
            if isinstance(self.highlighter, SearchHighlighter):
                self.highlighter.paint(text, source)
            else:
                self.highlighter.highlight(text)
        if self.mark is not None and self.mark[0] == line:
            hit = find_term(shown, self.mark[1])
            if hit is not None:
                text.stylize(MARK_STYLE, hit.start(), hit.end())
        return text

    def _render_line_strip(self, y: int, rich_style: Style) -> Strip:
        if self.mark is None or self.mark[0] != y:
            return super()._render_line_strip(y, rich_style)
        text = self._styled(y, rich_style)
        return Strip(text.render(self.app.console), text.cell_len)

    def render_line(self, y: int) -> Strip:
        """Row ``y`` of the view: a line, or when wrapped one row of a line."""
        if not self.wrap:
            return super().render_line(y)
        width, rich_style = self.size.width, self.rich_style
        row = round(self.scroll_y) + y + self._base
        line = bisect_right(self._ends, row)
        if line >= len(self._ends) or line >= len(self._lines):
            return Strip.blank(width, rich_style)
        first = self._ends[line - 1] if line else self._base
        text = self._styled(line, rich_style)
        starts = row_starts(text.plain, self._cols)
        k = min(row - first, len(starts) - 1)
        end = starts[k + 1] if k + 1 < len(starts) else len(text.plain)
        piece = text[starts[k]:end]
        strip = Strip(piece.render(self.app.console), piece.cell_len)
        return strip.crop_extend(0, width, rich_style)
