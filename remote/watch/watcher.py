"""``Watcher``: follows one run on a box and delivers typed events (``remote.watch.events``).

A thread with a stop Event runs ``python3 -m trainer follow`` on the box through
``transport.stream`` and turns its JSON lines into events. It notices silence (the
follower sends a heartbeat every second), reconnects with a capped backoff and resumes
from the byte offsets and inodes of what it has delivered, so the callback sees every
byte of ``train.log`` and every ``metrics.jsonl`` row exactly once. Health is judged here
with ``trainer.judge_health`` from the status, the pid liveness the follower
reports from the box and the growth of the log. Where the box has no usable python the
watcher falls back to polling the files with ``transport.stat``/``read`` (SFTP).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from remote.link.gate import MARK
from remote.transport.base import LineTooLong, Stream, Transport, TransportError
from remote.watch.caps import (
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES,
    MAX_MESSAGES_PER_SECOND,
    RATE_WINDOW,
    TOO_DEEP,
    RateCap,
    decode_message,
)
from remote.watch.context import SideMessages
from remote.watch.events import (
    ConnectionEvent,
    LogEvent,
    MetricsEvent,
    StatusEvent,
    WatchEvent,
)
from remote.watch.polling import FilePolling
from remote.watch.start import FollowStart, NoPython, StartFailed
from trainer import runfiles
from trainer.engines import fill_from_history
from trainer.health import Health, LaunchRead, apply_stop, judge_health
from trainer.text import clean_text, console_tail, one_line

log = logging.getLogger(__name__)
GATE_MARK = MARK.encode()

BACKOFF_FIRST = 0.5
#: Kept short so that the watcher is back within a few seconds of a long outage's end
#: (an attempt that times out during the outage is followed by at most this wait).
BACKOFF_MAX = 2.0
#: Output of a follow command that failed to start which means "no usable python".
NO_PYTHON_MARKERS = ("no module named", "not found", "no such file", "permission denied",
                     "syntaxerror", "can't open", "cannot import name", "importerror")
#: Bytes of train.log a fresh watch starts with (the pane keeps 5,000 lines); older
#: parts are read on demand (``remote.runs.log``).
LOG_TAIL_BYTES = 512 * 1024
#: Seconds between the follower's looks at the project's runs (it sends what changed).
#: The TUI's first watcher and ``tui.main.FirstFollow`` both take this default: the
#: early follower is adopted only when its command is the very same.
RUNS_INTERVAL = 8.0


class _Dropped(Exception):
    """The follow stream went silent or away; reconnect."""




class Watcher(FollowStart, SideMessages, FilePolling):
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
                 on_event: Callable[[WatchEvent], None], *, silence_timeout: float = 5.0,
                 poll_interval: float = 0.25, gpu_interval: float = 2.0,
                 close_transport: bool = True, project: str | None = None,
                 gate: Any = None, log_tail: int = 0,
                 runs_interval: float = RUNS_INTERVAL) -> None:
        self.connect = connect
        self.run_dir = run_dir
        self.project = project
        self.gate = gate
        self.log_tail = log_tail
        self.runs_interval = runs_interval
        self.on_event = on_event
        self.silence_timeout = silence_timeout
        self.poll_interval = poll_interval
        self.gpu_interval = gpu_interval
        self.close_transport = close_transport
        #: Where delivery stands: the next byte of each file and the file's inode.
        self.log_offset = 0
        self.log_ino: int | None = None
        self.metrics_offset = 0
        self.metrics_ino: int | None = None
        self.status_key: str | None = None
        #: Whether the box has no usable python (then files are polled).
        self.polling = False
        self._poll_reason = ""
        self._stop = threading.Event()
        self._kick = threading.Event()
        self._lock = threading.Lock()
        self._stream: Stream | None = None
        self._thread: threading.Thread | None = None
        self._status = runfiles.StatusRead(None, "no status received yet")
        self._launch: LaunchRead | None = None
        #: What another engine leaves out: the last metrics row, the pid gpurent stopped.
        self._last_row: dict[str, Any] | None = None
        self._stopped_pid: int | None = None
        self._status_received = False
        self._pid_alive: bool | None = None
        self._log_history: deque[tuple[float, int]] = deque(maxlen=32)
        self._verdict: tuple[str, bool | None] | None = None
        self._skew = 0.0
        self._start_failures = 0
        self._went_live = False
        self._limits_said: set[str] = set()
        self.init_side()

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

    def _close_stream(self) -> None:
        with self._lock:
            stream = self._stream
        if stream is not None:
            with contextlib.suppress(Exception):
                stream.close()

    def _wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; ``True`` when stop or reconnect_now cut it short."""
        end = time.monotonic() + seconds
        while not self._kick.is_set():
            left = end - time.monotonic()
            if left <= 0:
                return False
            self._kick.wait(min(left, 0.1))
        return True

    # ----------------------------------------------------------------- main loop

    def _run(self) -> None:
        attempt, detail = 0, ""
        try:
            while not self._stop.is_set():
                if attempt:
                    delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (attempt - 1))
                    self._emit(ConnectionEvent("reconnecting", detail, attempt=attempt))
                    if self._wait(delay) and self._stop.is_set():
                        break
                self._kick.clear()
                attempt, detail = self._session(attempt)
        finally:
            self._emit(ConnectionEvent("closed", "stopped" if self._stop.is_set()
                                       else detail))

    def _session(self, attempt: int) -> tuple[int, str]:
        """One connection: follow (or poll) until it drops. Returns the next attempt
        number (0 after a kick) and a one-line reason for the drop."""
        self._went_live = False
        try:
            transport = self.connect()
        except Exception as exc:  # noqa: BLE001 (any failure to connect means: retry)
            return attempt + 1, one_line(exc) or type(exc).__name__
        try:
            if self.polling:
                self._poll_files(transport)
            else:
                self._follow(transport)
            reason = "the follower ended"
        except StartFailed as exc:
            reason = str(exc)
            self._start_failures += 1
            lowered = reason.lower()
            if isinstance(exc, NoPython) or self._start_failures >= 2 or \
                    any(m in lowered for m in NO_PYTHON_MARKERS):
                if self.gate is not None:
                    self.gate.give_up()
                self.polling, self._poll_reason = True, reason
                return 0, reason
        except _Dropped as exc:
            reason = str(exc)
        except Exception as exc:  # noqa: BLE001 (a broken link must never end the thread)
            reason = one_line(exc) or type(exc).__name__
            if not isinstance(exc, TransportError | OSError | TimeoutError | EOFError):
                log.warning("watcher of %s: unexpected %s", self.run_dir, reason, exc_info=True)
        finally:
            self._close_stream()
            with self._lock:
                self._stream = None
            if self.close_transport:
                with contextlib.suppress(Exception):
                    transport.close()
        if self._kick.is_set():
            return 0, "reconnect requested"
        return (1 if self._went_live else attempt + 1), reason

    # ----------------------------------------------------------------- follow

    def _follow_once(self, transport: Transport, command: str,
                     stdin: bytes | None) -> str | None:
        """Run the follower until it ends; the gate's probe when it could not start."""
        from remote.link import early as headstart

        stream = headstart.take_stream(transport, command) or \
            transport.stream(command, stdin=stdin)
        with self._lock:
            self._stream = stream
        if self._kick.is_set():
            return None
        said_hello = False
        probe: list[str] | None = None
        noise: list[str] = []
        lines = stream.lines(timeout=self.silence_timeout, max_line=MAX_LINE_BYTES)
        rate = RateCap(MAX_MESSAGES_PER_SECOND, RATE_WINDOW)
        try:
            for raw in lines:
                if self._kick.is_set():
                    return None
                if rate.over():
                    raise self._limited("rate", f"the box sent over {MAX_MESSAGES_PER_SECOND} "
                                        "messages a second; reconnecting")
                if probe is not None:
                    probe.append(raw.decode("utf-8", errors="replace"))
                    continue
                if not said_hello and raw.strip() == GATE_MARK:
                    probe = []
                    continue
                message = decode_message(raw)
                if message is None:
                    text = clean_text(raw[:1000]).strip()
                    if text:
                        noise = (noise + [text])[-5:]
                    continue
                if message is TOO_DEEP:
                    self._limited("depth", f"skipped a message nested deeper than "
                                  f"{MAX_JSON_DEPTH} levels")
                    continue
                if message.get("t") == "hello":
                    said_hello = True
                    self._on_hello(message, transport)
                    continue
                self._handle(message)
        except LineTooLong:
            raise self._limited("line", f"the box sent a line over {MAX_LINE_BYTES >> 20} "
                                "MiB without a newline; reconnecting") from None
        except TimeoutError:
            if self._kick.is_set():
                return None
            self._emit(ConnectionEvent("stale", f"no data for {self.silence_timeout:g}s",
                                       silent_for=self.silence_timeout))
            raise _Dropped(f"no data for {self.silence_timeout:g}s") from None
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
        if self._kick.is_set():
            return None
        if probe is not None:
            return "\n".join(probe) + "\n"
        if not said_hello:
            raise StartFailed(noise[-1] if noise else "the follower ended without output")
        raise _Dropped("the follower ended")

    def _limited(self, cap: str, reason: str) -> _Dropped:
        """Say ``reason`` (once per cap and watcher) and return the drop to raise."""
        if cap not in self._limits_said:
            self._limits_said.add(cap)
            log.warning("watcher of %s: %s", self.run_dir, reason)
            self._emit(ConnectionEvent("limited", reason))
        return _Dropped(reason)

    def _on_hello(self, message: dict[str, Any], transport: Transport) -> None:
        box_now = message.get("now")
        if isinstance(box_now, int | float):
            self._skew = float(box_now) - time.time()
        if self.gate is not None:
            self.gate.learned(transport, message.get("box"))
        self.chose(message.get("run"))
        self._start_failures = 0
        self._went_live = True
        gpu = " with GPU stats" if message.get("gpu") else ""
        self._emit(ConnectionEvent("live", f"following {self.run_dir}{gpu}"))

    def _handle(self, message: dict[str, Any]) -> None:
        """Turn one follower message into events; a malformed one is skipped."""
        kind = message.get("t")
        handler = {"status": self._on_status, "pid": self._on_pid, "log": self._on_log,
                   "metrics": self._on_metrics, "reset": self._on_reset,
                   "gpu": self._on_gpu, **self.side_handlers()}.get(kind)  # type: ignore[arg-type]
        try:
            if handler is not None:
                handler(message)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            log.debug("skipped a malformed %r line: %s", kind, exc)
        self._rejudge()

    def _on_status(self, message: dict[str, Any]) -> None:
        body, reason, launch = message["status"], message.get("reason"), message.get("launch")
        if isinstance(body, dict):
            read = runfiles.parse_status(json.dumps(body).encode("utf-8"))
        elif body is None and isinstance(reason, str):
            read = runfiles.StatusRead(None, clean_text(reason), missing=launch is not None)
        else:
            raise ValueError("status is neither an object nor null with a reason")
        self._launch = None
        if isinstance(launch, dict):
            pid = launch.get("pid")
            self._launch = LaunchRead(
                pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                console_tail(str(launch.get("console") or "")))
        stop = message.get("stop")
        pid = stop.get("pid") if isinstance(stop, dict) else None
        self._stopped_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        alive = message.get("pid_alive")
        self._set_status(read, alive if isinstance(alive, bool) else None)
        key = message.get("key")
        self.status_key = key if isinstance(key, str) and key.isprintable() else None

    def _on_pid(self, message: dict[str, Any]) -> None:
        alive = message["alive"]
        pid = self._status.get("pid") if self._launch is None else self._launch.pid
        if message["pid"] == pid and isinstance(alive, bool):
            self._pid_alive = alive

    def _on_log(self, message: dict[str, Any]) -> None:
        offset = _int(message["offset"])
        if "text" in message:
            data = str(message["text"]).encode("utf-8")
        else:
            data = base64.b64decode(message["b64"], validate=True)
        ino = message.get("ino")
        if offset < self.log_offset:
            data = data[self.log_offset - offset:]  # already delivered
            offset = self.log_offset
        if not data:
            return
        self._emit(LogEvent(data, offset))
        self.log_offset = offset + len(data)
        self.log_ino = ino if isinstance(ino, int) else self.log_ino
        self._log_history.append((self._now(), self.log_offset))

    def _on_metrics(self, message: dict[str, Any]) -> None:
        offset, next_offset = _int(message["offset"]), _int(message["next"])
        rows = message["rows"]
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError("rows is not a list of objects")
        if next_offset <= self.metrics_offset and offset < self.metrics_offset:
            return  # already delivered
        self._emit(MetricsEvent(rows, next_offset, _int(message.get("skipped", 0))))
        self.metrics_offset = next_offset
        self._note_row(rows)
        ino = message.get("ino")
        self.metrics_ino = ino if isinstance(ino, int) else self.metrics_ino

    def _on_reset(self, message: dict[str, Any]) -> None:
        ino = message.get("ino")
        ino = ino if isinstance(ino, int) else None
        if message["file"] == "metrics":
            self._last_row = None
        if message["file"] == "log":
            self._emit(LogEvent(b"", 0, reset=True))
            self.log_offset, self.log_ino = 0, ino
            self._log_history.append((self._now(), 0))
        elif message["file"] == "metrics":
            self._emit(MetricsEvent([], 0, reset=True))
            self.metrics_offset, self.metrics_ino = 0, ino

    # ----------------------------------------------------------------- health

    def _now(self) -> float:
        """The box's clock (timestamps in status.json are the box's)."""
        return time.time() + self._skew

    def _set_status(self, read: runfiles.StatusRead, pid_alive: bool | None) -> None:
        self._status, self._status_received = read, True
        self._pid_alive = pid_alive
        health = self._judge()
        self._verdict = (health.verdict, self._pid_alive)
        self._emit(self._status_event(health))

    def _status_event(self, health: Health) -> StatusEvent:
        console = "" if self._launch is None else self._launch.console
        return StatusEvent(self._filled(), health, self._pid_alive, time.time(), console)

    def _judge(self) -> Health:
        alive = self._pid_alive
        health = judge_health(
            self._status, now=self._now(),
            pid_alive=None if alive is None else (lambda _pid: alive),
            log_history=list(self._log_history), launch=self._launch)
        return apply_stop(health, self._filled(), self._stopped_pid)

    def _filled(self) -> runfiles.StatusRead:
        """The status with what a final LibreYOLO status drops taken from the last row."""
        read = self._status
        if not read.ok or read.get("state") == "running" or self._last_row is None:
            return read
        return runfiles.StatusRead(fill_from_history(read.fields, self._last_row))

    def _note_row(self, rows: list[dict[str, Any]]) -> None:
        """Keep the newest row; a final status that lacked what it fills is sent again."""
        if not rows:
            return
        before = self._filled()
        self._last_row = rows[-1]
        if self._status_received and self._filled().fields != before.fields:
            self._emit(self._status_event(self._judge()))

    def _rejudge(self) -> None:
        """Send the status again when its health verdict or pid liveness changed."""
        if not self._status_received:
            return
        health = self._judge()
        if (health.verdict, self._pid_alive) != self._verdict:
            self._verdict = (health.verdict, self._pid_alive)
            self._emit(self._status_event(health))

    # ----------------------------------------------------------------- delivery

    def _emit(self, event: WatchEvent) -> None:
        try:
            self.on_event(event)
        except Exception:  # a bug in the callback must not stop the watching
            log.exception("watcher callback failed on %s", type(event).__name__)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not an offset")
    return value
