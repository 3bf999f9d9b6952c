"""``Watcher``: follows one run on a box and delivers typed events (``remote.watch.events``).

A thread with a stop Event runs sessions until stopped: each connects (``connect()``),
then watches in one of two ways, ``Follower`` (``python3 -m trainer follow`` on the box
through ``transport.stream``, its JSON lines turned into events; it sends a heartbeat
every second, so silence is noticed) or, where the box has no usable python,
``FilePoller`` (the files read with ``transport.stat``/``read`` over SFTP). After a drop
it reconnects with a capped backoff, and both resume from the byte offsets and inodes
``Delivery`` holds, so the callback sees every byte of ``train.log`` and every
``metrics.jsonl`` row exactly once. Health is judged there with
``trainer.health.judge_health`` from the status, the pid's liveness on the box and the
growth of the log.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from remote.link.connector import changed_host_key, whole_line, worth_retrying
from remote.transport.base import Stream, Transport, TransportError
from remote.watch.context import RunContext
from remote.watch.delivery import Delivery
from remote.watch.events import ConnectionEvent, WatchEvent
from remote.watch.follower import Dropped, Follower
from remote.watch.polling import FilePoller
from remote.watch.start import (
    RUNS_INTERVAL,
    SILENCE_TIMEOUT,
    FollowOptions,
    NoPython,
    StartFailed,
)
from trainer.text import one_line

log = logging.getLogger(__name__)

BACKOFF_FIRST = 0.5
#: Kept short so that the watcher is back within a few seconds of a long outage's end
#: (an attempt that times out during the outage is followed by at most this wait).
BACKOFF_MAX = 2.0
#: What ``_session`` returns as the next attempt when trying again cannot help.
BLOCKED = -1
#: Output of a follow command that failed to start which means "no usable python".
NO_PYTHON_MARKERS = ("no module named", "not found", "no such file", "permission denied",
                     "syntaxerror", "can't open", "cannot import name", "importerror")


class Watcher:
    """Watches ``run_dir`` on the box that ``connect()`` reaches; see the module doc.

    ``on_event`` is called from the watcher thread. ``connect`` is called again after a
    drop; the watcher closes the transports it got (``close_transport=False`` leaves them
    to whoever owns a shared one).

    With ``project`` the follower also streams the project's runs (``RunsEvent``), and
    ``run_dir`` may be ``None``: the box chooses the run (``ChosenEvent``). With ``gate``
    (a ``remote.link.connector.Connector``) the follower starts through the gate, in one exec
    whatever the box holds, and its ``hello`` teaches the connector the trainer's prefix.
    ``log_tail``: a fresh start streams only that many bytes of the log's end;
    ``runs_interval``: how often the follower looks at the project's runs."""

    def __init__(self, connect: Callable[[], Transport], run_dir: str | None,
                 on_event: Callable[[WatchEvent], None], *,
                 silence_timeout: float = SILENCE_TIMEOUT,
                 poll_interval: float = 0.25, gpu_interval: float = 2.0,
                 close_transport: bool = True, project: str | None = None,
                 gate: Any = None, log_tail: int = 0,
                 runs_interval: float = RUNS_INTERVAL) -> None:
        self.connect = connect
        self.on_event = on_event
        self.close_transport = close_transport
        self.gate = gate
        self.options = FollowOptions(project, poll_interval, silence_timeout, gpu_interval,
                                     runs_interval, log_tail, gated=gate is not None)
        #: What has been delivered, and the run's health.
        self.delivery = Delivery(self.emit)
        #: The run (chosen by the box when ``run_dir`` is ``None``) and the project.
        self.context = RunContext(run_dir, project, self.emit)
        self.follower = Follower(self.options, self.delivery, self.context, self, gate)
        self.poller = FilePoller(self.options, self.delivery, self.context, self)
        #: Whether the box has no usable python (then files are polled).
        self.polling = False
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._lock = threading.Lock()
        self._stream: Stream | None = None
        self._thread: threading.Thread | None = None
        self._start_failures = 0
        #: The changed host key that blocked the last try (see ``ConnectionEvent.forget``).
        self._forget: tuple[str, str] | None = None

    @property
    def run_dir(self) -> str | None:
        """The run watched (``None`` until the box has chosen one)."""
        return self.context.run_dir

    def poll_files(self, reason: str) -> None:
        """Watch by reading the files from now on (``reason``: why, said once)."""
        self.polling, self.poller.reason = True, reason

    # ----------------------------------------------------------------- control

    def start(self) -> None:
        """Start the watcher thread."""
        if self._thread is not None:
            raise RuntimeError("watcher already started")
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"watch {self.run_dir}")
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop following and wait up to ``timeout`` s for the thread to end."""
        self._stop.set()
        self._kick.set()
        self._close_stream()
        if self._thread is not None:
            self._thread.join(timeout)

    def reconnect_now(self) -> None:
        """Drop the current connection and reconnect at once, without backoff."""
        self._kick.set()
        self._close_stream()

    @property
    def running(self) -> bool:
        """Whether the watcher thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------- what the ways of watching use

    def kicked(self) -> bool:
        """Whether stop or reconnect_now was asked for."""
        return self._kick.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; ``True`` when stop or reconnect_now cut it short."""
        end = time.monotonic() + seconds
        while not self._kick.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._kick.wait(min(left, 0.1))
        return True

    def hold(self, stream: Stream | None) -> None:
        """The stream a stop or kick closes; ``None`` closes the one held."""
        if stream is None:
            self._close_stream()
        with self._lock:
            self._stream = stream

    def emit(self, event: WatchEvent) -> None:
        """Deliver ``event``; a bug in the callback must not stop the watching."""
        try:
            self.on_event(event)
        except Exception:
            log.exception("watcher callback failed on %s", type(event).__name__)

    def _close_stream(self) -> None:
        with self._lock:
            stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    # ----------------------------------------------------------------- main loop

    def _run(self) -> None:
        attempt, detail = 0, ""
        try:
            while not self._stop.is_set():
                if attempt == BLOCKED:
                    self.emit(ConnectionEvent("blocked", detail, forget=self._forget))
                    self._kick.wait()  # reconnect_now (r) or stop
                    if self._stop.is_set():
                        break
                    attempt = 0
                elif attempt:
                    delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (attempt - 1))
                    self.emit(ConnectionEvent("reconnecting", detail, attempt=attempt))
                    if self.wait(delay) and self._stop.is_set():
                        break
                self._kick.clear()
                attempt, detail = self._session(attempt)
        finally:
            self.emit(ConnectionEvent("closed", "stopped" if self._stop.is_set() else detail))

    def _session(self, attempt: int) -> tuple[int, str]:
        """One connection: follow (or poll) until it drops. Returns the next attempt
        number (0 after a kick) and a one-line reason for the drop."""
        way: Follower | FilePoller = self.poller if self.polling else self.follower
        way.went_live = False
        try:
            transport = self.connect()
        except Exception as exc:  # noqa: BLE001 (any failure to connect: retry, or wait)
            self._forget = changed_host_key(exc)
            return (attempt + 1 if worth_retrying(exc) else BLOCKED), whole_line(exc)
        try:
            way.run(transport)
            reason = "the follower ended"
        except StartFailed as exc:
            reason = str(exc)
            self._start_failures += 1
            lowered = reason.lower()
            if isinstance(exc, NoPython) or self._start_failures >= 2 or \
                    any(m in lowered for m in NO_PYTHON_MARKERS):
                if self.gate is not None:
                    self.gate.give_up()
                self.poll_files(reason)
                return 0, reason
        except Dropped as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 (a broken link must never end the thread)
            reason = one_line(exc) or type(exc).__name__
            if not isinstance(exc, TransportError | OSError | TimeoutError | EOFError):
                log.warning("watcher of %s: unexpected %s", self.run_dir, reason, exc_info=True)
        finally:
            self.hold(None)
            if self.close_transport:
                with contextlib.suppress(Exception):
                    transport.close()
        if way.went_live:
            self._start_failures = 0
        if self._kick.is_set():
            return 0, "reconnect requested"
        return (1 if way.went_live else attempt + 1), reason
