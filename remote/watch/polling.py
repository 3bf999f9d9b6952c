"""Watching by file polling, on a box without a usable python: stat and read the run's
files over SFTP each poll, instead of the follower's stream (the watcher's other way of
watching, beside ``remote.watch.follower``). It feeds the same ``Delivery``."""

from __future__ import annotations

import posixpath
import time

from remote.runs.read import (
    box_disk,
    console_path,
    list_runs,
    read_launch,
    read_status,
    stopped_pid,
)
from remote.transport.base import Transport, TransportError
from remote.watch.context import RunContext
from remote.watch.delivery import Delivery
from remote.watch.events import ConnectionEvent, RunsEvent
from remote.watch.follower import Controls
from remote.watch.start import FollowOptions
from trainer import engines, runfiles
from trainer.health import GOING

#: Largest read of a file per poll.
POLL_READ_BYTES = 1 << 20
#: How often to ask whether the status pid is alive.
POLL_PID_SECONDS = 2.0

_NEVER = object()


def box_clock_skew(transport: Transport) -> float | None:
    """The box's clock minus this laptop's, in seconds (to the second: ``date +%s``,
    which every box's shell has), measured around one exec; ``None`` when the box does
    not say. The status's timestamps are the box's; the money lines judge them so."""
    before = time.time()
    try:
        result = transport.run("date +%s", timeout=15.0, max_bytes=64)
    except (TransportError, OSError):  # a broken link shows at the next stat
        return None
    after = time.time()
    words = result.stdout.split()
    if not result.ok or len(words) != 1 or not words[0].isdigit():
        return None
    return int(words[0]) + 0.5 - (before + after) / 2


class FilePoller:
    """Polling sessions of one run directory; ``reason``: why there is no follower (said
    when polling starts). ``went_live``: whether the last session read the files."""

    def __init__(self, options: FollowOptions, delivery: Delivery, context: RunContext,
                 controls: Controls) -> None:
        self.options = options
        self.delivery = delivery
        self.context = context
        self.controls = controls
        self.reason = ""
        self.went_live = False
        self._disk_asked = False

    def run(self, transport: Transport) -> None:
        """One session: stat and read the files each poll until a kick."""
        self.went_live = False
        context, delivery = self.context, self.delivery
        self.controls.emit(ConnectionEvent("polling", f"no usable python on the box "
                                           f"({self.reason}); reading the run's files"))
        skew = box_clock_skew(transport)
        if skew is not None:
            delivery.skew = skew
        if context.project:
            runs = list_runs(transport, context.project)
            self.controls.emit(RunsEvent(context.project, runs))
            if context.run_dir is None:
                going = [r for r in runs if r.health in GOING]
                context.chose((going or runs)[0].run_dir if runs else None)
        run_dir = context.run_dir
        if run_dir is None:
            self.controls.wait(3600.0)  # no run to read until one is chosen (a new watcher)
            return
        status_path = posixpath.join(run_dir, runfiles.STATUS_FILE)
        log_path = posixpath.join(run_dir, runfiles.LOG_FILE)
        metrics_path = posixpath.join(run_dir, runfiles.METRICS_FILE)
        stop_path = engines.beside_path(run_dir, engines.BESIDE_STOP)
        seen_status: object = _NEVER
        seen_metrics = -1
        next_pid_check = 0.0
        while not self.controls.kicked():
            st = transport.stat(status_path)
            if st is None:
                st = transport.stat(console_path(transport, run_dir))
                sig: object = None if st is None else ("console", st.size)
            else:
                sig = (st.size, st.mtime, transport.stat(stop_path))
            if sig != seen_status:
                seen_status = sig
                read = read_status(transport, run_dir)
                delivery.launch = read_launch(transport, run_dir) if read.missing else None
                delivery.stopped_pid = stopped_pid(transport, run_dir)
                alive = self._ask_pid(transport, read)
                self._note_disk(transport, run_dir, alive)
                delivery.set_status(read, alive)
                next_pid_check = time.monotonic() + POLL_PID_SECONDS
            elif time.monotonic() >= next_pid_check:
                delivery.pid_alive = self._ask_pid(transport, delivery.status)
                self._note_disk(transport, run_dir, delivery.pid_alive)
                next_pid_check = time.monotonic() + POLL_PID_SECONDS
            self._poll_log(transport, log_path)
            seen_metrics = self._poll_metrics(transport, metrics_path, seen_metrics)
            delivery.rejudge()
            self.went_live = True
            if self.controls.wait(self.options.poll_interval):
                return

    def _note_disk(self, transport: Transport, run_dir: str, alive: bool | None) -> None:
        """Once the run's pid is gone, ask the box how full the run's disk is (once per
        death): a full disk is then named as the reason."""
        if alive is not False:
            self._disk_asked = False
        elif not self._disk_asked:
            self._disk_asked = True
            self.delivery.disk = box_disk(transport, run_dir)

    def _ask_pid(self, transport: Transport, read: runfiles.StatusRead) -> bool | None:
        launch = self.delivery.launch
        pid = read.get("pid") if launch is None else launch.pid
        if not isinstance(pid, int) or isinstance(pid, bool):
            return None
        return transport.pid_alive(pid)

    def _poll_log(self, transport: Transport, path: str) -> None:
        st = transport.stat(path)
        if st is None:
            return
        offset = self.delivery.log_offset
        if st.size < offset:
            self.delivery.reset("log")
            offset = 0
        if st.size > offset:
            data = transport.read(path, offset, POLL_READ_BYTES)
            if data:
                self.delivery.log(data, offset)

    def _poll_metrics(self, transport: Transport, path: str, seen: int) -> int:
        st = transport.stat(path)
        if st is None or st.size == seen:
            return seen
        if st.size < self.delivery.metrics_offset:
            self.delivery.reset("metrics")
        offset = self.delivery.metrics_offset
        data = transport.read(path, offset, POLL_READ_BYTES)
        chunk = runfiles.parse_metrics(data, offset)
        if chunk.next_offset > offset:
            self.delivery.metrics(chunk.rows, offset, chunk.next_offset, chunk.skipped)
        return st.size
