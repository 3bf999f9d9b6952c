"""Reading runs on a box through a ``Transport``: one run's status and health, and the
list of runs under a project directory."""

from __future__ import annotations

import contextlib
import posixpath
import shlex
import time
from dataclasses import dataclass
from typing import Any

from remote.transport.base import Transport, TransportError
from trainer import engines, runfiles
from trainer.health import (
    LOG_TAIL_BYTES,
    STOPPED_WRITING,
    Health,
    LaunchRead,
    apply_stop,
    ended,
    judge_health,
    parse_df,
    parse_launch_pid,
    with_disk,
)
from trainer.text import console_tail, natural_key

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
    """``launch.pid`` and the end of ``console.log`` of the run in ``run_dir`` on the box
    (inside it, or beside it for an engine that renames); ``None`` when there are
    neither (not a launched run)."""
    for pid_path, console_path in engines.launch_files(run_dir):
        pid_st, console_st = transport.stat(pid_path), transport.stat(console_path)
        if pid_st is not None or console_st is not None:
            break
    else:
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
        st = transport.stat(console_path(transport, run_dir))
    read, health = finish_read(transport, run_dir, read, health)
    if health.verdict in STOPPED_WRITING:
        tail = b""
        if log is not None:
            with contextlib.suppress(TransportError, OSError):
                tail = transport.read(posixpath.join(run_dir, runfiles.LOG_FILE),
                                      max(0, log.size - LOG_TAIL_BYTES), LOG_TAIL_BYTES)
        health = with_disk(health, box_disk(transport, run_dir), tail)
    return RunRead(run_dir, read, health, alive, None if st is None else st.mtime, launch)


def box_disk(transport: Transport, path: str) -> dict[str, int] | None:
    """The free space and size of the box's filesystem holding ``path`` (``df -Pk``),
    or ``None`` when the box does not say."""
    try:
        result = transport.run(f"df -Pk {shlex.quote(path)}", timeout=15.0, max_bytes=4096)
    except (TransportError, OSError):  # a broken link shows at the next read
        return None
    return parse_df(result.stdout) if result.ok else None


# ------------------------------------------------------------------ what engines leave out


def console_path(transport: Transport, run_dir: str) -> str:
    """Where the run's console log is on the box: inside the run, or beside it."""
    for _pid, console in engines.launch_files(run_dir):
        if transport.stat(console) is not None:
            return console
    return engines.launch_files(run_dir)[0][1]


def last_row(transport: Transport, run_dir: str, tail: int = 65536) -> dict[str, Any] | None:
    """The last whole row of ``metrics.jsonl`` on the box (``None``: none)."""
    path = posixpath.join(run_dir, runfiles.METRICS_FILE)
    st = transport.stat(path)
    if st is None or st.size == 0:
        return None
    start = max(0, st.size - tail)
    data = transport.read(path, start, tail)
    if start:
        data = data[data.find(b"\n") + 1:]
    rows = runfiles.parse_metrics(data).rows
    return rows[-1] if rows else None


def stopped_pid(transport: Transport, run_dir: str) -> int | None:
    """The pid ``gpurent stop`` signalled for this run (``NAME.stop.json``), if any."""
    path = engines.beside_path(run_dir, engines.BESIDE_STOP)
    if transport.stat(path) is None:
        return None
    return engines.parse_stop(transport.read(path, 0, engines.MAX_MARK_BYTES))


def finish_read(transport: Transport, run_dir: str, read: runfiles.StatusRead,
                health: Health) -> tuple[runfiles.StatusRead, Health]:
    """What another engine leaves out, filled in: the fields a final LibreYOLO status
    drops, from the last metrics row; ``stopped`` for the run ``gpurent stop`` ended."""
    row = last_row(transport, run_dir) if needs_history(read) else None
    stopped = stopped_pid(transport, run_dir) if health.verdict in ("failed", "dead") \
        else None
    return finish(read, health, row, stopped)


def needs_history(read: runfiles.StatusRead) -> bool:
    """Whether a final status lacks what the last metrics row gives (LibreYOLO's)."""
    return read.ok and read.get("state") != "running" and (
        read.get("completed_epochs") is None or read.get("best_metric_name") is None
        or (read.get("start_epoch") or 0) > 1)


def finish(read: runfiles.StatusRead, health: Health, row: dict[str, Any] | None,
           stopped: int | None) -> tuple[runfiles.StatusRead, Health]:
    """``finish_read`` with the last metrics row and the stopped pid already read."""
    if needs_history(read):
        read = runfiles.StatusRead(engines.fill_from_history(read.fields, row))
        health = ended(read) or health  # the run's epochs, not its last invocation's
    if health.verdict in ("failed", "dead"):
        health = apply_stop(health, read, stopped)
    return read, health


def run_extras(transport: Transport, run_dir: str) -> dict[str, Any]:
    """What else the run directory holds for people: the engine's resolved arguments
    (``train_config.yaml``), ``results.csv``/``summary.json`` when present, the number of
    validation plots (``val/plots/``) and the weight files."""
    extras: dict[str, Any] = {"args": {}, "files": [], "plots": 0, "weights": []}
    config = posixpath.join(run_dir, engines.TRAIN_CONFIG_FILE)
    if transport.stat(config) is not None:
        text = transport.read(config, 0, 256 * 1024).decode("utf-8", "replace")
        extras["args"] = engines.parse_train_config(text)
    extras["files"] = [name for name in (runfiles.RESULTS_FILE, runfiles.SUMMARY_FILE,
                                         engines.TRAIN_CONFIG_FILE)
                       if transport.stat(posixpath.join(run_dir, name)) is not None]
    extras["plots"] = len(transport.listdir(posixpath.join(run_dir, "val", "plots")))
    extras["weights"] = sorted(n for n in transport.listdir(
        posixpath.join(run_dir, runfiles.WEIGHTS_DIR)) if n.endswith(".pt"))
    return extras


def run_names(transport: Transport, project: str) -> list[str]:
    """The names of the runs under ``project``: directories holding a status.json or the
    launcher's files, and runs only known beside (launched, folder not made yet)."""
    names = [name for name in transport.listdir(project)
             if any(transport.stat(posixpath.join(project, name, f)) is not None
                    for f in RUN_FILES)]
    suffix = f".{engines.BESIDE_PID}"
    for entry in transport.listdir(posixpath.join(project, engines.BESIDE_DIR)):
        if entry.endswith(suffix) and entry[:-len(suffix)] not in names:
            names.append(entry[:-len(suffix)])
    return names


def list_runs(transport: Transport, project: str) -> list[RunInfo]:
    """The runs under ``project``, newest first: directories holding a status.json, or
    what the launcher writes before it (``launch.pid``, ``console.log``)."""
    found: list[tuple[float, RunInfo]] = []
    now = time.time()
    for name in run_names(transport, project):
        run_dir = posixpath.join(project, name)
        run = read_run(transport, run_dir, now)
        s = run.read
        updated = runfiles.parse_iso(s.get("updated_at") or "") or run.mtime or 0.0
        found.append((updated, RunInfo(
            name=name, run_dir=run_dir, state=s.get("state"), health=run.health.verdict,
            reason=run.health.reason, epoch=s.get("completed_epochs"),
            total_epochs=s.get("total_epochs"), best_metric=s.get("best_metric"),
            best_metric_name=s.get("best_metric_name"), updated_at=s.get("updated_at"))))
    found.sort(key=lambda item: (item[0], natural_key(item[1].name)), reverse=True)
    return [info for _, info in found]
