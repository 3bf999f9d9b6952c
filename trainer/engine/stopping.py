"""Graceful stop on SIGTERM / SIGINT: the first signal asks the loop to finish its step,
save ``last.pt`` and end as ``stopped``; a second one exits at once.

A stop can come while the process is still loading the data or importing torch (a
user who launched by mistake presses the stop key at once). :class:`EarlySignals` keeps
that first signal until :class:`GracefulStop` takes over and acts on it."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class EarlySignals:
    """The SIGTERM / SIGINT handler for the seconds before training: the first signal is
    kept for :class:`GracefulStop`, a second exits at once (nothing is saved yet).

    As a context manager it installs itself and puts the previous handlers back."""

    def __init__(self) -> None:
        self.received: list[int] = []
        self._previous: dict[int, Any] = {}

    def __call__(self, signum: int, _frame: FrameType | None) -> None:
        if self.received:
            os._exit(128 + signum)
        self.received.append(signum)

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


class GracefulStop:
    """Installs the handlers and restores the old ones.

    ``on_force(signum)`` runs before the immediate exit of a second signal (to leave a
    last word in ``status.json``); its errors are ignored."""

    def __init__(self, log: logging.Logger,
                 on_force: Callable[[int], None] | None = None) -> None:
        self.log = log
        self.on_force = on_force
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def requested(self) -> bool:
        """Whether a stop was asked for."""
        return self.signum is not None

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.signum is None:
            self.signum = signum
            self.log.warning("%s received: finishing the current step, then saving "
                             "last.pt (send it again to exit at once)", name)
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
        early = early_signal(self._previous[signal.SIGTERM])
        if early is not None:
            self._handle(early, None)

    def restore(self) -> None:
        """Put back the handlers that were there before :meth:`install`."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
