"""Choosing a run directory and keeping its history consistent.

Names behave like ``libreyolo train``: ``project/name``, and when that holds an earlier
run, ``name2``, ``name3``... unless ``exist_ok``. Two rules of ours on top:

- a directory holding a live run (``state: running`` and its pid alive) is never
  reused, not even with ``exist_ok``;
- a directory that exists but holds no run yet (no status, metrics or weights; e.g. the
  launcher created it for ``console.log``) is taken as it is.
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer.health import local_pid_alive
from trainer.runfiles import (
    METRICS_FILE,
    RESULTS_FILE,
    STATUS_FILE,
    SUMMARY_FILE,
    WEIGHTS_DIR,
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
