"""What a watch has delivered of one run, and the run's health judged from it.

``Delivery`` keeps where delivery stands in each file (the next byte and the file's
inode, so a reconnect resumes with no gap and no duplicate), the last status and what
fills it, the pid's liveness and the log's growth, and emits ``StatusEvent``,
``LogEvent`` and ``MetricsEvent``. Both ways of watching feed it: the follower's
stream (``remote.watch.follower``) and file polling (``remote.watch.polling``).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from remote.watch.events import LogEvent, MetricsEvent, StatusEvent, WatchEvent
from remote.watch.start import Position
from trainer import runfiles
from trainer.engines import fill_from_history
from trainer.health import (
    LOG_TAIL_BYTES,
    STOPPED_WRITING,
    Health,
    LaunchRead,
    apply_stop,
    disk_full,
    judge_health,
    with_disk,
)


class Delivery:
    """The delivered state of one run; ``emit`` gets each event (see the module doc)."""

    def __init__(self, emit: Callable[[WatchEvent], None]) -> None:
        self.emit = emit
        self.log_offset = 0
        self.log_ino: int | None = None
        self.metrics_offset = 0
        self.metrics_ino: int | None = None
        self.status_key: str | None = None
        self.status = runfiles.StatusRead(None, "no status received yet")
        #: The launcher's pid and console tail, for a run without a status yet.
        self.launch: LaunchRead | None = None
        #: The pid ``gpurent stop`` stopped (what another engine's status leaves out).
        self.stopped_pid: int | None = None
        self.pid_alive: bool | None = None
        self._last_row: dict[str, Any] | None = None
        self._received = False
        self._log_history: deque[tuple[float, int]] = deque(maxlen=32)
        self._verdict: tuple[str, bool | None, bool] | None = None
        #: The box's clock minus ours (status timestamps are the box's).
        self.skew = 0.0
        #: The run's disk as the box last told it (``trainer.health.disk_space``'s
        #: shape; checked when read), named as the reason when it is full.
        self.disk: object = None
        #: The end of the log delivered so far (what a full disk leaves there).
        self.log_tail = b""

    def position(self) -> Position:
        """Where a new follower resumes."""
        return Position(self.log_offset, self.log_ino, self.metrics_offset, self.metrics_ino,
                        self.status_key)

    # ----------------------------------------------------------------- status

    def set_status(self, read: runfiles.StatusRead, pid_alive: bool | None) -> None:
        """A new status (and whether its pid is alive): judged and delivered."""
        self.status, self._received = read, True
        self.pid_alive = pid_alive
        health = self._judge()
        self._verdict = self._key(health)
        self.emit(self._status_event(health))

    def set_pid_alive(self, pid: Any, alive: bool) -> None:
        """The box says whether ``pid`` lives; kept when it is the run's pid."""
        own = self.status.get("pid") if self.launch is None else self.launch.pid
        if pid == own:
            self.pid_alive = alive

    def rejudge(self) -> None:
        """Deliver the status again when its health verdict or pid liveness changed."""
        if not self._received:
            return
        health = self._judge()
        if self._key(health) != self._verdict:
            self._verdict = self._key(health)
            self.emit(self._status_event(health))

    def _key(self, health: Health) -> tuple[str, bool | None, bool]:
        """What a new status event is delivered for: the verdict, the pid's liveness,
        and whether a full disk is named (the log saying so may come after the pid)."""
        return (health.verdict, self.pid_alive,
                health.verdict in STOPPED_WRITING
                and disk_full(self.disk, self.log_tail) is not None)

    def _now(self) -> float:
        return time.time() + self.skew

    def _status_event(self, health: Health) -> StatusEvent:
        console = "" if self.launch is None else self.launch.console
        return StatusEvent(self._filled(), health, self.pid_alive, time.time(), console,
                           self.skew)

    def _judge(self) -> Health:
        alive = self.pid_alive
        health = judge_health(
            self._filled(), now=self._now(),
            pid_alive=None if alive is None else (lambda _pid: alive),
            log_history=list(self._log_history), launch=self.launch)
        return with_disk(apply_stop(health, self._filled(), self.stopped_pid), self.disk,
                         self.log_tail)

    def _filled(self) -> runfiles.StatusRead:
        """The status with what a final LibreYOLO status drops taken from the last row."""
        read = self.status
        if not read.ok or read.get("state") == "running" or self._last_row is None:
            return read
        return runfiles.StatusRead(fill_from_history(read.fields, self._last_row))

    # ----------------------------------------------------------------- files

    def log(self, data: bytes, offset: int, ino: int | None = None) -> None:
        """Bytes of ``train.log`` from ``offset``; what was delivered already is dropped."""
        if offset < self.log_offset:
            data = data[self.log_offset - offset:]
            offset = self.log_offset
        if not data:
            return
        self.emit(LogEvent(data, offset))
        self.log_tail = (self.log_tail + data)[-LOG_TAIL_BYTES:]
        self.log_offset = offset + len(data)
        self.log_ino = ino if isinstance(ino, int) else self.log_ino
        self._log_history.append((self._now(), self.log_offset))

    def metrics(self, rows: list[dict[str, Any]], offset: int, next_offset: int,
                skipped: int = 0, ino: int | None = None) -> None:
        """Rows of ``metrics.jsonl`` from ``offset`` to ``next_offset``; rows delivered
        already are dropped."""
        if next_offset <= self.metrics_offset and offset < self.metrics_offset:
            return
        self.emit(MetricsEvent(rows, next_offset, skipped))
        self.metrics_offset = next_offset
        self.metrics_ino = ino if isinstance(ino, int) else self.metrics_ino
        if rows:
            before = self._filled()
            self._last_row = rows[-1]
            if self._received and self._filled().fields != before.fields:
                self.emit(self._status_event(self._judge()))

    def reset(self, file: str, ino: int | None = None) -> None:
        """``file`` (``log`` or ``metrics``) was replaced or truncated: start it over."""
        if file == "log":
            self.emit(LogEvent(b"", 0, reset=True))
            self.log_offset, self.log_ino, self.log_tail = 0, ino, b""
            self._log_history.append((self._now(), 0))
        elif file == "metrics":
            self._last_row = None
            self.emit(MetricsEvent([], 0, reset=True))
            self.metrics_offset, self.metrics_ino = 0, ino
