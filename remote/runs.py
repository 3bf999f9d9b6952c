"""Reading runs on a box through a ``Transport``: one run's status and health, and the
list of runs under a project directory."""

from __future__ import annotations

import posixpath
import time
from dataclasses import dataclass
from typing import Any

from remote.transport.base import Transport
from trainer import runfiles


@dataclass(frozen=True)
class RunRead:
    """One run as read from the box: its status, health and pid liveness."""

    run_dir: str
    read: runfiles.StatusRead
    health: runfiles.Health
    pid_alive: bool | None
    mtime: float | None

    def summary(self) -> dict[str, Any]:
        """The ``gpurent status --json`` object for this run."""
        body = runfiles.status_summary(self.read, self.health, self.pid_alive)
        body["run_dir"] = self.run_dir
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
        return runfiles.StatusRead(None, f"no status.json in {run_dir}")
    return runfiles.parse_status(transport.read(path, 0, runfiles.MAX_STATUS_BYTES + 1))


def read_run(transport: Transport, run_dir: str, now: float | None = None) -> RunRead:
    """Read ``run_dir/status.json`` and judge the run's health on the box."""
    st = transport.stat(posixpath.join(run_dir, runfiles.STATUS_FILE))
    read = read_status(transport, run_dir)
    pid = read.get("pid")
    alive = None
    if isinstance(pid, int) and not isinstance(pid, bool):
        alive = transport.pid_alive(pid)
    log = transport.stat(posixpath.join(run_dir, runfiles.LOG_FILE))
    # One look cannot see growth; the log's mtime says when it last grew.
    history = [] if log is None else [(log.mtime - 1.0, -1), (log.mtime, log.size)]
    health = runfiles.judge_health(
        read, now=time.time() if now is None else now,
        pid_alive=None if alive is None else (lambda _pid: alive), log_history=history)
    return RunRead(run_dir, read, health, alive, None if st is None else st.mtime)


#: The launcher's pid file (``remote.launch.PID_FILE``): a directory holding it but no
#: status.json is a run that is starting, or that failed before the trainer wrote one.
LAUNCH_PID_FILE = "launch.pid"


def unstarted_run(transport: Transport, run_dir: str, name: str) -> RunInfo | None:
    """A launched run without status.json: ``starting`` while its launch pid lives,
    ``failed to start`` once it is gone (its console.log says why); ``None`` when the
    directory holds no launch pid."""
    pid_path = posixpath.join(run_dir, LAUNCH_PID_FILE)
    st = transport.stat(pid_path)
    if st is None:
        return None
    text = transport.read(pid_path, 0, 64).strip()
    pid = int(text) if text.isdigit() else None
    alive = pid is not None and transport.pid_alive(pid)
    health = "starting" if alive else "failed to start"
    reason = (f"pid {pid} is starting (no status.json yet)" if alive else
              "the trainer ended before writing status.json; see console.log")
    return RunInfo(name=name, run_dir=run_dir, state=None, health=health, reason=reason,
                   epoch=None, total_epochs=None, best_metric=None, best_metric_name=None,
                   updated_at=runfiles.utc_now_iso(st.mtime))


def list_runs(transport: Transport, project: str) -> list[RunInfo]:
    """The runs under ``project`` (directories holding a status.json, and launched ones
    that have none yet: see :func:`unstarted_run`), newest first."""
    found: list[tuple[float, RunInfo]] = []
    now = time.time()
    for name in transport.listdir(project):
        run_dir = posixpath.join(project, name)
        if transport.stat(posixpath.join(run_dir, runfiles.STATUS_FILE)) is None:
            unstarted = unstarted_run(transport, run_dir, name)
            if unstarted is not None:
                found.append((runfiles.parse_iso(unstarted.updated_at or "") or 0.0,
                              unstarted))
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
