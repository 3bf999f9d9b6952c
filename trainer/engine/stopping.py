"""Graceful stop on SIGTERM / SIGINT: the first signal asks the loop to finish its step,
save ``last.pt`` and end as ``stopped``; a second one exits at once, when it comes at
least ``REPEAT_SECONDS`` after the first. One sooner is the same stop asked twice (a
double key press, a second ``gpurent stop``, a stop from the TUI and the guard) and is
only logged: it must not throw away the save the first one asked for.

A stop can come while the process is still loading the data or importing torch (a
user who launched by mistake presses the stop key at once). :class:`EarlySignals` keeps
that first signal until :class:`GracefulStop` takes over and acts on it."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: A second signal sooner than this after the first repeats the stop; later, it forces
#: the exit (for a step that hangs).
REPEAT_SECONDS = 10.0


def _repeat(first_at: float | None, now: float) -> bool:
    """Whether a signal at ``now`` repeats a first one at ``first_at``."""
    return first_at is not None and now - first_at < REPEAT_SECONDS


class EarlySignals:
    """The SIGTERM / SIGINT handler for the seconds before training: the first signal is
    kept for :class:`GracefulStop` (with the time it came), a second one
    ``REPEAT_SECONDS`` later exits at once (nothing is saved yet); a sooner one repeats
    the stop. ``clock``: ``time.monotonic`` (tests pass another).

    As a context manager it installs itself and puts the previous handlers back."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.received: list[int] = []
        self.first_at: float | None = None
        self.clock = clock
        self._previous: dict[int, Any] = {}

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        now = self.clock()
        if self.received:
            if _repeat(self.first_at, now):
                return
            os._exit(128 + signum)
        self.received.append(signum)
        self.first_at = now

    def install(self) -> EarlySignals:
        """Install the handler (main thread only, as :meth:`GracefulStop.install`)."""
        if threading.current_thread() is threading.main_thread():
            for sig in STOP_SIGNALS:
                self._previous[sig] = signal.signal(sig, self)
        return self

    def __enter__(self) -> EarlySignals:
        return self.install()

    def __exit__(self, *_exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def early_signal(handler: Any) -> int | None:
    """The signal an :class:`EarlySignals` handler kept, if ``handler`` is one."""
    if isinstance(handler, EarlySignals) and handler.received:
        return handler.received[0]
    return None


def early_signal_at(handler: Any) -> float | None:
    """When an :class:`EarlySignals` handler got the signal it kept (its clock)."""
    return handler.first_at if isinstance(handler, EarlySignals) else None


class GracefulStop:
    """Installs the handlers and restores the old ones.

    ``on_force(signum)`` runs before the immediate exit of a second signal (to leave a
    last word in ``status.json``); its errors are ignored. A second signal sooner than
    ``REPEAT_SECONDS`` after the first only repeats the stop (see the module doc).
    ``clock``: ``time.monotonic`` (tests pass another)."""

    def __init__(self, log: logging.Logger,
                 on_force: Callable[[int], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.log = log
        self.on_force = on_force
        self.clock = clock
        self.signum: int | None = None
        self.first_at: float | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    def _handle(self, signum: int, _frame: FrameType | None, at: float | None = None) -> None:
        name = signal.Signals(signum).name
        now = self.clock()
        if self.signum is None:
            self.signum = signum
            self.first_at = now if at is None else at
            self.log.warning("%s received: finishing the current step, then saving "
                             "last.pt (send it again %gs later to exit at once)", name,
                             REPEAT_SECONDS)
            return
        if _repeat(self.first_at, now):
            self.log.warning("%s again %.1fs after the first: already stopping, still "
                             "saving last.pt first", name, now - (self.first_at or now))
            return
        self.log.error("second signal (%s): exiting at once without saving", name)
        if self.on_force is not None:
            with contextlib.suppress(Exception):  # we are leaving anyway
                self.on_force(signum)
        for handler in self.log.handlers:
            handler.flush()
        os._exit(128 + signum)

    def install(self) -> None:
        """Install the handlers, and act on a signal that :class:`EarlySignals` kept.
        Python delivers signals to the main thread only, so from another thread (an
        embedding program's) this does nothing."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in STOP_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._handle)
        handler = self._previous[signal.SIGTERM]
        early = early_signal(handler)
        if early is not None:
            self._handle(early, None, early_signal_at(handler))

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
