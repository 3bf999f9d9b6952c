"""Reading runs on a box through a ``Transport``: one run's status and health, and the
list of runs under a project directory."""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any

from remote.transport.base import Transport
from trainer import runfiles
from trainer.health import Health, LaunchRead, judge_health, parse_launch_pid
from trainer.text import console_tail

#: Keys of the ``gpurent status --json`` object -> the status.json key each comes from.
SUMMARY_KEYS = {
    "state": "state", "epoch": "completed_epochs", "total_epochs": "total_epochs",
    "progress": "progress", "eta_seconds": "eta_seconds", "elapsed_seconds": "elapsed_seconds",
    "best_metric": "best_metric", "best_metric_name": "best_metric_name",
    "best_epoch": "best_epoch", "current_metric": "current_metric",
    "current_metric_name": "current_metric_name", "train_loss": "train_loss",
    "updated_at": "updated_at", "pid": "pid", "error": "error", "hub": "hub",
}
#: A directory holding any of these is a run.
RUN_FILES = (runfiles.STATUS_FILE, runfiles.LAUNCH_PID_FILE, runfiles.CONSOLE_FILE)
#: Bytes of console.log read for a run that has not written status.json.
CONSOLE_TAIL_BYTES = 8192


@dataclass(frozen=True)
class RunRead:
    """One run as read from the box: its status, health and pid liveness."""

    run_dir: str
    read: runfiles.StatusRead
    health: Health
    pid_alive: bool | None
    mtime: float | None

    #: The launcher's record when there is no status.json yet (``None`` otherwise).
    launch: LaunchRead | None = None

    def summary(self) -> dict[str, Any]:
        """The ``gpurent status --json`` object for this run (unknown keys left out)."""
        read = self.read
        body = {key: read.get(name) for key, name in SUMMARY_KEYS.items()}
        body.update(health=self.health.verdict, reason=self.health.reason,
                    pid_alive=self.pid_alive, run_dir=self.run_dir)
        if self.launch is not None:
            body.update(pid=self.launch.pid, console=self.launch.console)
        return body


@dataclass(frozen=True)
class RunInfo:
    """One row of ``list_runs``."""

    name: str
    run_dir: str
    state: str | None
    health: str
    reason: str
    epoch: int | None
    total_epochs: int | None
    best_metric: float | None
    best_metric_name: str | None
    updated_at: str | None


def read_status(transport: Transport, run_dir: str) -> runfiles.StatusRead:
    """``run_dir/status.json`` on the box, parsed; never raises for a bad file (a missing
    one reads as "no status.json in RUN")."""
    path = posixpath.join(run_dir, runfiles.STATUS_FILE)
    if transport.stat(path) is None:
        return runfiles.StatusRead(None, f"no status.json in {run_dir}", missing=True)
    return runfiles.parse_status(transport.read(path, 0, runfiles.MAX_STATUS_BYTES + 1))


def read_launch(transport: Transport, run_dir: str) -> LaunchRead | None:
    """``launch.pid`` and the end of ``console.log`` in ``run_dir`` on the box; ``None``
    when it holds neither (not a launched run)."""
    pid_path = posixpath.join(run_dir, runfiles.LAUNCH_PID_FILE)
    console_path = posixpath.join(run_dir, runfiles.CONSOLE_FILE)
    pid_st, console_st = transport.stat(pid_path), transport.stat(console_path)
    if pid_st is None and console_st is None:
        return None
    pid = None if pid_st is None else parse_launch_pid(transport.read(pid_path, 0, 256))
    console = b""
    if console_st is not None:
        start = max(0, console_st.size - CONSOLE_TAIL_BYTES)
        console = transport.read(console_path, start, CONSOLE_TAIL_BYTES)
    return LaunchRead(pid, console_tail(console))


def read_run(transport: Transport, run_dir: str, now: float | None = None) -> RunRead:
    """Read ``run_dir/status.json`` and judge the run's health on the box."""
    st = transport.stat(posixpath.join(run_dir, runfiles.STATUS_FILE))
    read = read_status(transport, run_dir)
    launch = read_launch(transport, run_dir) if read.missing else None
    pid = read.get("pid") if launch is None else launch.pid
    alive = None
    if isinstance(pid, int) and not isinstance(pid, bool):
        alive = transport.pid_alive(pid)
    log = transport.stat(posixpath.join(run_dir, runfiles.LOG_FILE))
    # One look cannot see growth; the log's mtime says when it last grew.
    history = [] if log is None else [(log.mtime - 1.0, -1), (log.mtime, log.size)]
    health = judge_health(
        read, now=time.time() if now is None else now,
        pid_alive=None if alive is None else (lambda _pid: alive), log_history=history,
        launch=launch)
    if launch is not None and st is None:
        st = transport.stat(posixpath.join(run_dir, runfiles.CONSOLE_FILE))
    return RunRead(run_dir, read, health, alive, None if st is None else st.mtime, launch)


def list_runs(transport: Transport, project: str) -> list[RunInfo]:
    """The runs under ``project``, newest first: directories holding a status.json, or
    what the launcher writes before it (``launch.pid``, ``console.log``)."""
    found: list[tuple[float, RunInfo]] = []
    now = time.time()
    for name in transport.listdir(project):
        run_dir = posixpath.join(project, name)
        if not any(transport.stat(posixpath.join(run_dir, f)) is not None for f in RUN_FILES):
            continue
        run = read_run(transport, run_dir, now)
        s = run.read
        updated = runfiles.parse_iso(s.get("updated_at") or "") or run.mtime or 0.0
        found.append((updated, RunInfo(
            name=name, run_dir=run_dir, state=s.get("state"), health=run.health.verdict,
            reason=run.health.reason, epoch=s.get("completed_epochs"),
            total_epochs=s.get("total_epochs"), best_metric=s.get("best_metric"),
            best_metric_name=s.get("best_metric_name"), updated_at=s.get("updated_at"))))
    found.sort(key=lambda item: (-item[0], item[1].name))
    return [info for _, info in found]
