"""The watcher's fallback on a box without a usable python: stat and read the run's
files over SFTP each poll, instead of the follower's stream (a mixin of
:class:`remote.watch.watcher.Watcher`, whose state it reads and feeds)."""

from __future__ import annotations

import posixpath
import time

from remote.runs.read import console_path, list_runs, read_launch, read_status, stopped_pid
from remote.transport.base import Transport
from remote.watch.events import ConnectionEvent, LogEvent, MetricsEvent, RunsEvent
from trainer import engines, runfiles
from trainer.health import GOING

#: Largest read of a file per poll.
POLL_READ_BYTES = 1 << 20
#: How often to ask whether the status pid is alive.
POLL_PID_SECONDS = 2.0

_NEVER = object()


class FilePolling:
    """Polling of the run directory, for a watcher (``self``) that has no follower."""

    def _poll_files(self, transport: Transport) -> None:
        """The fallback without python on the box: stat and read the files each poll."""
        self._emit(ConnectionEvent("polling", f"no usable python on the box "
                                   f"({self._poll_reason}); reading the run's files"))
        if self.project:
            runs = list_runs(transport, self.project)
            self._emit(RunsEvent(self.project, runs))
            if self.run_dir is None:
                going = [r for r in runs if r.health in GOING]
                self.chose((going or runs)[0].run_dir if runs else None)
        if self.run_dir is None:
            self._wait(3600.0)  # no run to read until one is chosen (a new watcher)
            return
        status_path = posixpath.join(self.run_dir, runfiles.STATUS_FILE)
        log_path = posixpath.join(self.run_dir, runfiles.LOG_FILE)
        metrics_path = posixpath.join(self.run_dir, runfiles.METRICS_FILE)
        stop_path = engines.beside_path(self.run_dir, engines.BESIDE_STOP)
        seen_status: object = _NEVER
        seen_metrics = -1
        next_pid_check = 0.0
        while not self._kick.is_set():
            st = transport.stat(status_path)
            if st is None:
                st = transport.stat(console_path(transport, self.run_dir))
                sig: object = None if st is None else ("console", st.size)
            else:
                sig = (st.size, st.mtime, transport.stat(stop_path))
            if sig != seen_status:
                seen_status = sig
                read = read_status(transport, self.run_dir)
                self._launch = read_launch(transport, self.run_dir) if read.missing else None
                self._stopped_pid = stopped_pid(transport, self.run_dir)
                self._set_status(read, self._ask_pid(transport, read))
                next_pid_check = time.monotonic() + POLL_PID_SECONDS
            elif time.monotonic() >= next_pid_check:
                self._pid_alive = self._ask_pid(transport, self._status)
                next_pid_check = time.monotonic() + POLL_PID_SECONDS
            self._poll_log(transport, log_path)
            seen_metrics = self._poll_metrics(transport, metrics_path, seen_metrics)
            self._rejudge()
            self._went_live = True
            if self._wait(self.poll_interval):
                return

    def _ask_pid(self, transport: Transport, read: runfiles.StatusRead) -> bool | None:
        pid = read.get("pid") if self._launch is None else self._launch.pid
        if not isinstance(pid, int) or isinstance(pid, bool):
            return None
        return transport.pid_alive(pid)

    def _poll_log(self, transport: Transport, path: str) -> None:
        st = transport.stat(path)
        if st is None:
            return
        if st.size < self.log_offset:
            self._on_reset({"file": "log"})
        if st.size > self.log_offset:
            data = transport.read(path, self.log_offset, POLL_READ_BYTES)
            if data:
                self._emit(LogEvent(data, self.log_offset))
                self.log_offset += len(data)
                self._log_history.append((self._now(), self.log_offset))

    def _poll_metrics(self, transport: Transport, path: str, seen: int) -> int:
        st = transport.stat(path)
        if st is None or st.size == seen:
            return seen
        if st.size < self.metrics_offset:
            self._on_reset({"file": "metrics"})
        data = transport.read(path, self.metrics_offset, POLL_READ_BYTES)
        chunk = runfiles.parse_metrics(data, self.metrics_offset)
        if chunk.next_offset > self.metrics_offset:
            self._emit(MetricsEvent(chunk.rows, chunk.next_offset, chunk.skipped))
            self.metrics_offset = chunk.next_offset
            self._note_row(chunk.rows)
        return st.size
