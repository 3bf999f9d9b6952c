"""Connecting while the app starts: ``gpurent-tui HOST`` opens SSH in a thread before it
imports the UI, and starts the follower there (``follow``: a function of the connection
that returns its command and stdin; its ``prepare``, when it has one, runs while the
handshake waits on the link), so the round trips of the handshake and of the
follower's start overlap with that work. The first ``Connector.open`` for the same box
that accepts an early connection takes it (``take``), and the watcher adopts the stream
when it would run the very same command (``take_stream``).

Only what needs no question is done early: a host key that is not known yet fails the
early attempt (quietly), and the normal path then asks about it. Boxes named by their
instance are located through the provider's API first, so they start normally.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any

_early: dict[tuple[str, int | None], Future[Any]] = {}
_lock = threading.Lock()
#: How long a taker waits for an early attempt still under way.
TAKE_TIMEOUT = 30.0
#: The interpreter's thread switch interval while the early connection is made.
EARLY_SWITCH_INTERVAL = 0.0005


#: Streams started early: (transport, command) -> the stream.
_streams: dict[tuple[int, str], Any] = {}


def start(host: str, port: int | None, options: Mapping[str, object], *,
          accept_new: bool = False, timeout: float = 15.0,
          follow: Callable[[Any], tuple[str, bytes | None]] | None = None) -> None:
    """Begin connecting to ``host`` in a daemon thread (see the module doc)."""
    future: Future[Any] = Future()
    with _lock:
        if (host, port) in _early:
            return
        _early[(host, port)] = future

    def prepare() -> None:
        # What building the follower's command needs, made while SSH waits on the link
        # (``follow.prepare`` where it has one), so that the exec leaves once connected.
        with contextlib.suppress(Exception):
            getattr(follow, "prepare", lambda: None)()

    def run() -> None:
        if follow is not None:
            threading.Thread(target=prepare, name="early prepare", daemon=True).start()
        try:
            _run()
        finally:
            sys.setswitchinterval(switch)

    def _run() -> None:
        try:
            from remote.transport import ssh

            transport = ssh.connect(host, port=port, accept_new=accept_new,
                                    ask_unknown=None, timeout=timeout, **options)
        except BaseException as exc:  # noqa: BLE001 (the normal path reports it)
            future.set_exception(exc)
            return
        if follow is not None:
            with contextlib.suppress(Exception):  # else the watcher starts its own
                command, stdin = follow(transport)
                stream = transport.stream(command, stdin=stdin)
                with _lock:
                    _streams[(id(transport), command)] = stream
        future.set_result(transport)

    # While the UI imports, this thread waits on the link; the interpreter hands it the
    # GIL sooner when an answer arrives (then the usual interval again).
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, EARLY_SWITCH_INTERVAL))
    threading.Thread(target=run, name=f"early ssh {host}", daemon=True).start()


def take(host: str, port: int | None) -> Any:
    """The early connection to ``host`` (once), or ``None`` when there is none or it
    failed (then connect as usual)."""
    with _lock:
        future = _early.pop((host, port), None)
    if future is None:
        return None
    with contextlib.suppress(Exception):
        transport = future.result(TAKE_TIMEOUT)
        if transport.is_active:
            return transport
        transport.close()
    return None


def take_stream(transport: Any, command: str) -> Any:
    """The stream started early on ``transport`` for exactly ``command``, or ``None``."""
    with _lock:
        return _streams.pop((id(transport), command), None)
