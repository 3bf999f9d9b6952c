"""The follower's JSON lines, read under caps: a box cannot make the laptop hold an
endless line (``MAX_LINE_BYTES``, enforced by ``Stream.lines``), parse a message nested
without end (``MAX_JSON_DEPTH``) or handle an endless flood (``MAX_MESSAGES_PER_SECOND``).
``remote.watch.watcher`` skips a message past the depth cap and resets the connection past the
others, saying the reason once."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

#: The longest line: the largest real message is a status.json of at most 4 MiB
#: (``trainer.runfiles.MAX_STATUS_BYTES``), escaped.
MAX_LINE_BYTES = 16 * 1024 * 1024
#: The deepest nesting of a message (a real one nests four levels).
MAX_JSON_DEPTH = 32
#: Messages per second, averaged over ``RATE_WINDOW`` seconds (a real follower sends a
#: few a second; a backlog of log chunks a few hundred).
MAX_MESSAGES_PER_SECOND = 2000
RATE_WINDOW = 5.0

#: What ``decode_message`` returns for a message nested too deeply.
TOO_DEEP: dict[str, Any] = {"t": "too-deep"}


def decode_message(raw: bytes) -> dict[str, Any] | None:
    """A follower line as a message object, ``None`` when it is not one, ``TOO_DEEP``
    when it nests deeper than ``MAX_JSON_DEPTH``."""
    try:
        value = json.loads(raw)
    except RecursionError:
        return TOO_DEEP
    except ValueError:
        return None
    if not (isinstance(value, dict) and isinstance(value.get("t"), str)):
        return None
    return value if depth_within(value, MAX_JSON_DEPTH) else TOO_DEEP


def depth_within(value: Any, limit: int) -> bool:
    """Whether ``value`` nests at most ``limit`` containers deep (iterative: a hostile
    value cannot exhaust the stack)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        for child in children:
            if isinstance(child, dict | list):
                if depth + 1 > limit:
                    return False
                stack.append((child, depth + 1))
    return True


class RateCap:
    """Counts messages in windows of ``window`` seconds; ``over()`` tells when a window
    holds more than ``per_second * window`` of them."""

    def __init__(self, per_second: float, window: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limit = per_second * window
        self.window = window
        self.clock = clock
        self.start = clock()
        self.count = 0

    def over(self) -> bool:
        """Count one message; ``True`` when the current window is over the cap."""
        now = self.clock()
        if now - self.start >= self.window:
            self.start, self.count = now, 0
        self.count += 1
        return self.count > self.limit
