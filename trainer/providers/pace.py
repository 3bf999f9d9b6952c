"""Calls spaced the way each provider asks: a minimum interval per account key and
endpoint, and a rate-limited answer waited out before the next call of its kind.

Providers limit requests per key and endpoint (Vast.ai keeps a minimum interval per
endpoint and answers sooner calls with a plain-text 429 that names it; Lambda Cloud allows
about one request a second). A client that knows the interval never meets the 429; one
that met it waits what the answer said before that endpoint is called again, by any
thread of the process (the watchdog acts on several instances of one account at once).
The provider counts from when a request reached it, which the client cannot see: the
next turn counts from the send and again from the answer (``hold`` both times), so a
request that reached it late never brings the next one closer there.

``GPURENT_API_PACE`` scales every interval (2: twice as far apart, for a key another
tool uses too; under 1: closer, for an API stand-in whose intervals are scaled the same).

Standard library only (the guard runs it on the box).
"""

from __future__ import annotations

import hashlib
import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

#: The environment variable that scales every provider's intervals.
PACE_ENV = "GPURENT_API_PACE"
#: The scales ``GPURENT_API_PACE`` may take.
PACE_RANGE = (0.01, 100.0)


def pace_from_env() -> float:
    """The scale of every interval from ``GPURENT_API_PACE`` (1 when unset); a value
    that is not a number in ``PACE_RANGE`` is said on stderr and 1 is used."""
    text = os.environ.get(PACE_ENV, "").strip()
    if not text:
        return 1.0
    try:
        pace = float(text)
    except ValueError:
        pace = -1.0
    low, high = PACE_RANGE
    if not low <= pace <= high:  # NaN too
        print(f"gpurent: {PACE_ENV}={text[:40]!r} is not a number from {low:g} to {high:g};"
              " the providers' own intervals are kept", file=sys.stderr)
        return 1.0
    return pace


@dataclass(frozen=True)
class Slot:
    """What one interval applies to: an API (its base URL), a key (its fingerprint) and
    an endpoint name (``show``, ``list``...)."""

    api: str
    key: str
    endpoint: str


def fingerprint(key: str) -> str:
    """A short digest of an API key, so that the table of turns holds no key."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:16]


class Pacer:
    """The next moment each slot may be called, shared by the threads of a process.

    ``turn`` books a call and says how long to wait for it; ``hold`` pushes a slot's
    next call back (a 429 said how long). Times are ``clock()``'s (monotonic) and waits
    are ``sleep``'s: a simulation gives both."""

    def __init__(self, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.clock = clock
        self.sleep = sleep
        self._next: dict[Slot, float] = {}
        self._lock = threading.Lock()

    def turn(self, slot: Slot, interval: float) -> float:
        """Seconds until ``slot`` may be called; that moment is booked, and the call
        after it comes ``interval`` seconds later."""
        with self._lock:
            now = self.clock()
            at = max(now, self._next.get(slot, now))
            self._next[slot] = at + max(0.0, interval)
            return at - now

    def hold(self, slot: Slot, seconds: float) -> None:
        """Nothing of ``slot`` before ``seconds`` from now."""
        with self._lock:
            until = self.clock() + max(0.0, seconds)
            self._next[slot] = max(self._next.get(slot, until), until)


#: The process's pacer: every client of one key shares its turns.
PACER = Pacer()
