"""``python3 -m trainer runs PROJECT --json``: every run of a project, judged on the box.

One exec lists a project of any size: each directory holding ``status.json``, or what the
launcher writes before it (``launch.pid``, ``console.log``), is a run. Its health is
judged here, where the pid and the log's mtime can be looked at directly, with the same
rules as everywhere (``trainer.health.judge_health``). The follower uses the same
scanner for its ``runs`` messages (``--project``), re-reading only the status files that
changed. Standard library only; the document is ``gpurent.runs/1`` in
``docs/SCHEMAS.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from trainer import engines, runfiles
from trainer.health import (
    ENDED,
    GOING,
    LaunchRead,
    apply_stop,
    judge_health,
    local_pid_alive,
    parse_launch_pid,
)
from trainer.text import console_tail, natural_key

SCHEMA = "gpurent.runs/1"
#: A directory holding any of these is a run.
RUN_FILES = (runfiles.STATUS_FILE, runfiles.LAUNCH_PID_FILE, runfiles.CONSOLE_FILE)
CONSOLE_TAIL_BYTES = 8192


def read_launch(run_dir: Path, tail_bytes: int = CONSOLE_TAIL_BYTES) -> LaunchRead | None:
    """``launch.pid`` and the end of ``console.log``, inside the run or beside it
    (``None`` when neither exists)."""
    pid_path, console_file = engines.local_launch_files(run_dir)
    try:
        pid = parse_launch_pid(Path(pid_path).read_bytes()[:256])
    except OSError:
        pid = None
    try:
        with open(console_file, "rb") as fh:
            fh.seek(max(0, os.fstat(fh.fileno()).st_size - tail_bytes))
            console: bytes | None = fh.read(tail_bytes)
    except OSError:
        console = None
    if pid is None and console is None:
        return None
    return LaunchRead(pid, console_tail(console or b""))


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


class RunScanner:
    """Lists the runs of ``project``; a status.json is parsed again only when its
    (inode, mtime, size) changed, while pid liveness and health are judged at every scan."""

    def __init__(self, project: str) -> None:
        self.project = project
        self._reads: dict[str, tuple[tuple[int, int, int] | None, runfiles.StatusRead,
                                     runfiles.StatusRead]] = {}

    def scan(self, now: float | None = None) -> list[dict[str, Any]]:
        """The runs, newest first (``updated`` descending; runs updated in the same second
        by name, numbers by value, the higher first: exp10 before exp9)."""
        now = time.time() if now is None else now
        names = run_names(self.project)
        runs = []
        for name in names:
            item = self._run(name, now)
            if item is not None:
                runs.append(item)
        self._reads = {k: v for k, v in self._reads.items() if k in names}
        runs.sort(key=lambda r: (r["updated"], natural_key(r["name"])), reverse=True)
        return runs

    def _status(self, name: str, run_dir: Path) -> tuple[runfiles.StatusRead,
                                                          runfiles.StatusRead,
                                                          tuple[int, int, int] | None]:
        """status.json as read, the same with what another engine left out filled in
        (``finished``), and its signature; cached while the signature holds."""
        sig = _signature(run_dir / runfiles.STATUS_FILE)
        cached = self._reads.get(name)
        if cached is not None and cached[0] == sig and sig is not None:
            return cached[1], cached[2], sig
        read = runfiles.read_status(run_dir / runfiles.STATUS_FILE)
        self._reads[name] = (sig, read, finished(run_dir, read))
        return read, self._reads[name][2], sig

    def _run(self, name: str, now: float) -> dict[str, Any] | None:
        run_dir = Path(self.project) / name
        read, full, sig = self._status(name, run_dir)
        launch = None
        if read.missing:
            launch = read_launch(run_dir)
            if launch is None:
                return None  # not a run: none of RUN_FILES
        pid = read.get("pid") if launch is None else launch.pid
        alive, history = None, []
        if read.get("state") not in ENDED:  # an ended run is judged by its state alone
            if isinstance(pid, int) and not isinstance(pid, bool):
                alive = local_pid_alive(pid)
            log = _signature(run_dir / runfiles.LOG_FILE)
            # One look cannot see growth; the log's mtime says when it last grew.
            if log is not None:
                history = [(log[1] / 1e9 - 1.0, -1), (log[1] / 1e9, log[2])]
        # Judged on the filled status: an ended one's words count the run's epochs.
        health = judge_health(full, now=now,
                              pid_alive=None if alive is None else (lambda _p: alive),
                              log_history=history, launch=launch)
        if health.verdict in ("failed", "dead"):
            health = apply_stop(health, full, engines.read_stop_mark(run_dir))
        read = full
        mtime = sig[1] / 1e9 if sig else None
        if mtime is None:
            console = _signature(Path(engines.local_launch_files(run_dir)[1]))
            mtime = console[1] / 1e9 if console else None
        updated = runfiles.parse_iso(read.get("updated_at") or "") or mtime or 0.0
        return runfiles.finite_json({
            "name": name, "run_dir": str(run_dir), "state": read.get("state"),
            "health": health.verdict, "reason": health.reason,
            "epoch": read.get("completed_epochs"), "total_epochs": read.get("total_epochs"),
            "best_metric": read.get("best_metric"),
            "best_metric_name": read.get("best_metric_name"),
            "updated_at": read.get("updated_at"), "updated": updated, "pid_alive": alive})


def run_names(project: str) -> list[str]:
    """The directories of ``project`` that may be runs, and the runs only known beside
    it (launched by an engine that names its folder itself, not made yet)."""
    try:
        names = {e.name for e in os.scandir(project) if e.is_dir()}
    except OSError:
        return []
    suffix = f".{engines.BESIDE_PID}"
    try:
        beside = [e.name[:-len(suffix)] for e in os.scandir(Path(project) / engines.BESIDE_DIR)
                  if e.name.endswith(suffix)]
    except OSError:
        beside = []
    return sorted((names - {engines.BESIDE_DIR}) | set(beside))


def finished(run_dir: Path, read: runfiles.StatusRead) -> runfiles.StatusRead:
    """What another engine's final status leaves out (LibreYOLO drops the epoch count
    and the best metric's name), filled in from the last metrics row."""
    if read.ok and read.get("state") != "running" and (
            read.get("completed_epochs") is None or read.get("best_metric_name") is None
            or (read.get("start_epoch") or 0) > 1):
        return runfiles.StatusRead(engines.fill_from_history(
            read.fields, engines.last_metrics_row(run_dir)))
    return read


def choose(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The run to watch when none was named: the newest going one, else the newest."""
    going = [r for r in runs if r["health"] in GOING]
    return (going or runs or [None])[0]


def document(project: str, runs: list[dict[str, Any]], now: float) -> dict[str, Any]:
    """The ``gpurent.runs/1`` document."""
    return {"schema": SCHEMA, "project": project, "exists": os.path.isdir(project),
            "now": now, "runs": runs}


def main(argv: list[str]) -> int:
    """Print the runs of PROJECT (a JSON document with ``--json``, else a table)."""
    p = argparse.ArgumentParser(prog="python3 -m trainer runs",
                                description="List the runs of a project directory with "
                                "their health, judged on this machine, newest first.")
    p.add_argument("project", metavar="PROJECT")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    args = p.parse_args(argv)
    now = time.time()
    runs = RunScanner(args.project).scan(now)
    if args.json:
        sys.stdout.write(json.dumps(document(args.project, runs, now),
                                    ensure_ascii=True, allow_nan=False) + "\n")
        return 0
    for run in runs:
        epoch = f"{run['epoch'] or 0}/{run['total_epochs']}" if run["total_epochs"] else "-"
        print(f"{run['name']}\t{run['state']}\t{run['health']}\t{epoch}")
    return 0
