"""Choosing a run directory and keeping its history consistent.

Names behave like ``libreyolo train``: ``project/name``, and when that holds an earlier
run, ``name2``, ``name3``... unless ``exist_ok``. Two rules of ours on top:

- a directory holding a live run (``state: running`` and its pid alive) is never
  reused, not even with ``exist_ok``;
- a directory that exists but holds no run yet (no status, metrics or weights; e.g. the
  launcher created it for ``console.log``) is taken as it is.
"""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

from trainer.health import local_pid_alive
from trainer.runfiles import (
    METRICS_FILE,
    RESULTS_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    WEIGHTS_DIR,
    atomic_write_bytes,
    read_status,
)


class RunDirError(ValueError):
    """The run directory cannot be used (one-line message)."""


def live_pid(run_dir: Path) -> int | None:
    """The pid of a live run in ``run_dir`` (not this process), or ``None``."""
    read = read_status(run_dir)
    pid = read.get("pid")
    if read.get("state") == "running" and isinstance(pid, int) and pid != os.getpid() \
            and local_pid_alive(pid):
        return pid
    return None


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds (the start of) a run: status, metrics or weights."""
    if (run_dir / STATUS_FILE).exists() or (run_dir / METRICS_FILE).exists():
        return True
    weights = run_dir / WEIGHTS_DIR
    return weights.is_dir() and any(weights.iterdir())


def choose_run_dir(project: str, name: str, exist_ok: bool) -> Path:
    """The directory for a new run, following the rules in the module docstring."""
    base = Path(project) / name
    pid = live_pid(base) if base.exists() else None
    if pid is not None and exist_ok:
        raise RunDirError(f"{base} holds a live run (pid {pid}); pick another name or "
                          "stop that run first")
    if not base.exists() or not holds_run(base) or (exist_ok and pid is None):
        return base
    for n in range(2, 10000):
        candidate = Path(project) / f"{name}{n}"
        if not candidate.exists() or (not holds_run(candidate) and live_pid(candidate) is None):
            return candidate
    raise RunDirError(f"no free run name left after {name}9999 in {project}")


def check_not_live(run_dir: Path) -> None:
    """Refuse a directory with a live run (used before resuming into it)."""
    pid = live_pid(run_dir)
    if pid is not None:
        raise RunDirError(f"{run_dir} holds a live run (pid {pid}); stop it before resuming")


def clear_history(run_dir: Path) -> list[str]:
    """Remove the per-epoch history of an earlier run before a fresh run reuses the
    directory (``exist_ok``); returns the names removed."""
    removed = []
    for name in (METRICS_FILE, RESULTS_FILE, SUMMARY_FILE):
        path = run_dir / name
        if path.exists():
            path.unlink()
            removed.append(name)
    return removed


def trim_history(run_dir: Path, last_epoch: int) -> int:
    """Drop ``metrics.jsonl`` and ``results.csv`` rows after ``last_epoch`` (written after
    the checkpoint a resume starts from), so the history has one row per epoch. Returns
    the number of metrics rows dropped. Files are replaced atomically."""
    dropped = 0
    metrics = run_dir / METRICS_FILE
    if metrics.exists():
        kept = []
        for line in metrics.read_bytes().splitlines(keepends=True):
            epoch = _row_epoch(line)
            if epoch is not None and epoch > last_epoch:
                dropped += 1
            elif line.endswith(b"\n"):  # a torn last line (crash mid-write) goes too
                kept.append(line)
        if dropped or sum(map(len, kept)) != metrics.stat().st_size:
            atomic_write_bytes(metrics, b"".join(kept))
    results = run_dir / RESULTS_FILE
    if results.exists():
        text = results.read_text(encoding="utf-8")
        rows = list(csv.reader(io.StringIO(text)))
        if rows:
            header, body = rows[0], rows[1:]
            col = header.index("epoch") if "epoch" in header else None
            keep = [r for r in body if col is None or not _after(r, col, last_epoch)]
            if len(keep) != len(body):
                buf = io.StringIO()
                csv.writer(buf, lineterminator="\n").writerows([header, *keep])
                atomic_write_bytes(results, buf.getvalue().encode("utf-8"))
    return dropped


def _row_epoch(line: bytes) -> int | None:
    try:
        row = json.loads(line)
    except ValueError:
        return None
    epoch = row.get("epoch") if isinstance(row, dict) else None
    return epoch if isinstance(epoch, int) else None


def _after(row: list[str], col: int, last_epoch: int) -> bool:
    try:
        return int(row[col]) > last_epoch
    except (IndexError, ValueError):
        return False
