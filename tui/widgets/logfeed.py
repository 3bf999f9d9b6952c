"""The log pane's data, apart from its widgets: ``LogFeed`` cuts the bytes the watcher
delivers into clean lines (on the watcher thread), and ``HeldLines`` keeps the lines the
pane holds together with where each starts in the file, so that the lines fetched from
before the first one join it exactly, and lines dropped from the top move that place on.
Every line keeps its size in the file (its newline included): cleaning changes a line's
length, the file's offsets must not drift."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from typing import NamedTuple

from remote.watch import LogEvent
from trainer.text import clean_text

#: A line without a newline longer than this is shown anyway (a runaway progress bar).
MAX_PARTIAL = 64 * 1024


def split_lines(whole: bytes) -> tuple[list[str], list[int]]:
    """The clean lines of ``whole`` (bytes ending at a line end, or one runaway line) and
    each line's size in the file."""
    body = whole[:-1] if whole.endswith(b"\n") else whole
    parts = body.split(b"\n")
    sizes = [len(part) + 1 for part in parts]
    if not whole.endswith(b"\n"):
        sizes[-1] -= 1
    lines = clean_text(body, keep_newlines=True).split("\n")
    if len(lines) != len(parts):  # an escape sequence spanned a newline: line by line
        lines = [clean_text(part) for part in parts]
    return lines, sizes


class Drained(NamedTuple):
    """What arrived since the last drain: ``lines`` (with their ``sizes``) start at byte
    ``start`` of the file; ``reset``: the file was replaced, forget what is held."""

    reset: bool
    lines: list[str]
    sizes: list[int]
    start: int


class LogFeed:
    """Thread-safe buffer between the watcher thread and the UI: whole, cleaned lines.

    Memory is bounded: when the UI falls behind, only the newest ``max_lines`` lines
    wait (older ones would have scrolled out of the pane anyway)."""

    def __init__(self, max_lines: int) -> None:
        self._lock = threading.Lock()
        self._pending: deque[str] = deque(maxlen=max_lines)
        self._sizes: deque[int] = deque(maxlen=max_lines)
        self._carry = b""
        self._reset = False
        self._started = False
        #: Where the line after the last whole one taken starts in the file.
        self._next = 0
        self.received_lines = 0

    def feed(self, event: LogEvent) -> None:
        """Take one ``LogEvent`` (the watcher's thread)."""
        with self._lock:
            if event.reset:
                self._pending.clear()
                self._sizes.clear()
                self._carry, self._reset = b"", True
            if event.reset or not self._started:
                self._next, self._started = event.offset, True
            data = self._carry + event.data
            end = data.rfind(b"\n") + 1
            if end == 0 and len(data) > MAX_PARTIAL:
                end = len(data)
            whole, self._carry = data[:end], data[end:]
        if not whole:
            return
        lines, sizes = split_lines(whole)
        with self._lock:
            self._pending.extend(lines)
            self._sizes.extend(sizes)
            self._next += len(whole)
            self.received_lines += len(lines)

    def restart(self) -> None:
        """Forget everything: another run's log follows."""
        with self._lock:
            self._pending.clear()
            self._sizes.clear()
            self._carry, self._reset, self._started = b"", False, False
            self._next = self.received_lines = 0

    def drain(self) -> Drained:
        """What arrived since the last drain (the UI thread)."""
        with self._lock:
            reset, self._reset = self._reset, False
            lines, sizes = list(self._pending), list(self._sizes)
            self._pending.clear()
            self._sizes.clear()
            start = self._next - sum(sizes)
        return Drained(reset, lines, sizes, start)


class HeldLines:
    """The lines the pane holds, oldest first, and the byte range of the file they cover
    (``first``..``end``). At most ``capacity`` lines: new ones push the oldest out at the
    top; older ones fetched from the box may raise the capacity up to a limit."""

    def __init__(self, capacity: int) -> None:
        self.base = self.capacity = capacity
        self.lines: deque[str] = deque()
        self.sizes: deque[int] = deque()
        self.first = 0
        self.end = 0

    def __len__(self) -> int:
        return len(self.lines)

    def __iter__(self) -> Iterator[str]:
        return iter(self.lines)

    @property
    def more_above(self) -> bool:
        """Whether the file has lines before the first one held."""
        return self.first > 0

    def clear(self, at: int = 0) -> None:
        """Hold nothing (at the first capacity); the next lines start at byte ``at``."""
        self.capacity = self.base
        self.lines.clear()
        self.sizes.clear()
        self.first = self.end = at

    def replace(self, lines: list[str]) -> None:
        """Hold lines that are not the log's (the console's, while there is no log)."""
        self.clear()
        self.lines.extend(lines[-self.capacity:])
        self.sizes.extend([0] * len(self.lines))

    def append(self, lines: list[str], sizes: list[int], start: int) -> bool:
        """Add lines that start at byte ``start``; the oldest go when full. ``False``
        when they do not follow the held ones (the feed dropped lines while the UI was
        behind): what was held is forgotten first, so no gap is ever shown."""
        joined = start == self.end or not self.lines
        if not self.lines or not joined:
            self.clear(start)
        for line, size in zip(lines, sizes, strict=True):
            if len(self.lines) >= self.capacity:
                self.lines.popleft()
                self.first += self.sizes.popleft()
            self.lines.append(line)
            self.sizes.append(size)
            self.end += size
        return joined

    def prepend(self, start: int, data: bytes, limit: int) -> int:
        """Put the file's bytes ``start``.. (ending where the held lines begin) above
        them, raising the capacity up to ``limit`` lines; how many lines were taken (0:
        they do not end where the held lines begin, or ``limit`` is reached)."""
        room = limit - len(self.lines)
        if not data or start + len(data) != self.first or room <= 0:
            return 0
        lines, sizes = split_lines(data)
        lines, sizes = lines[-room:], sizes[-room:]
        self.first -= sum(sizes)
        self.lines.extendleft(reversed(lines))
        self.sizes.extendleft(reversed(sizes))
        self.capacity = max(self.capacity, len(self.lines))
        return len(lines)
