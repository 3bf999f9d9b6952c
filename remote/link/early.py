"""A connection opened before it is asked for: ``gpurent-tui HOST`` opens SSH in a thread
before it imports the UI and starts the follower there, so the round trips of the
handshake and of the follower's start overlap with that work. ``EarlyLink`` belongs to
the box's ``Connector`` (``Connector.start_early``): the connector's first ``open``
takes the connection (``take``), and the watcher adopts the stream when it would run
the very same command (``take_stream``).

Only what needs no question is done early: a host key that is not known yet fails the
early attempt (quietly), and the normal path then asks about it.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

#: How long a taker waits for an early attempt still under way.
TAKE_TIMEOUT = 30.0
#: The interpreter's thread switch interval while the early connection is made.
EARLY_SWITCH_INTERVAL = 0.0005


class EarlyLink:
    """One early connection and the stream of its first command (see the module doc)."""

    def __init__(self) -> None:
        self._future: Future[Any] = Future()
        self._lock = threading.Lock()
        self._taken = False
        #: The stream started early: (transport, command, stream).
        self._stream: tuple[Any, str, Any] | None = None

    def start(self, connect: Callable[[], Any], *,
              first: Callable[[Any], tuple[str, bytes | None]] | None = None,
              prepare: Callable[[], object] | None = None) -> None:
        """Connect (``connect()``) in a daemon thread; then start ``first(transport)``'s
        command as a stream. ``prepare`` runs in a thread of its own meanwhile: what the
        first command needs that needs no connection."""

        def run() -> None:
            if prepare is not None:
                threading.Thread(target=_quietly, args=(prepare,), name="early prepare",
                                 daemon=True).start()
            try:
                self._connect(connect, first)
            finally:
                sys.setswitchinterval(switch)

        # While the UI imports, this thread waits on the link; the interpreter hands it the
        # GIL sooner when an answer arrives (then the usual interval again).
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, EARLY_SWITCH_INTERVAL))
        threading.Thread(target=run, name="early ssh", daemon=True).start()

    def _connect(self, connect: Callable[[], Any],
                 first: Callable[[Any], tuple[str, bytes | None]] | None) -> None:
        try:
            transport = connect()
        except BaseException as exc:  # noqa: BLE001 (the normal path reports it)
            self._future.set_exception(exc)
            return
        if first is not None:
            with contextlib.suppress(Exception):  # else the watcher starts its own
                command, stdin = first(transport)
                stream = transport.stream(command, stdin=stdin)
                with self._lock:
                    self._stream = (transport, command, stream)
        self._future.set_result(transport)

    def take(self) -> Any:
        """The early connection (once), or ``None`` when it was taken, failed or is
        closed (then connect as usual)."""
        with self._lock:
            if self._taken:
                return None
            self._taken = True
        with contextlib.suppress(Exception):
            transport = self._future.result(TAKE_TIMEOUT)
            if transport.is_active:
                return transport
            transport.close()
        return None

    def take_stream(self, transport: Any, command: str) -> Any:
        """The stream started early on ``transport`` for exactly ``command`` (once), or
        ``None``. A stream for another command is closed: nobody will read it."""
        with self._lock:
            held = self._stream
            if held is None or held[0] is not transport:
                return None
            self._stream = None
        if held[1] == command:
            return held[2]
        with contextlib.suppress(Exception):
            held[2].close()
        return None


def _quietly(work: Callable[[], object]) -> None:
    with contextlib.suppress(Exception):
        work()
