"""Stopping a run on the box: SIGTERM to its process group (the trainer then writes
``state: stopped`` and its last checkpoint), SIGKILL when it has not gone by the timeout."""

from __future__ import annotations

import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remote.procs import StalePid, send, signal_checked, why_not
from remote.runs import read_status
from remote.transport.base import Transport
from trainer.text import clean_text

#: How long to wait for the process to vanish after SIGKILL.
KILL_WAIT_SECONDS = 5.0


@dataclass(frozen=True)
class StopResult:
    """``outcome``: ``stopped`` (ended after SIGTERM), ``killed`` (SIGKILL was needed),
    ``not-running``, or ``not-signalled`` (the recorded pid is stale: another process has
    it now); ``detail``: one line for the user."""

    outcome: str
    detail: str


def _read_state(transport: Transport, run_dir: str) -> str:
    read = read_status(transport, run_dir)
    return clean_text(str(read.get("state"))) if read.ok else "unreadable"


def _wait_gone(transport: Transport, pid: int, record: Mapping[str, Any], seconds: float,
               poll: float) -> bool:
    """Wait until the recorded process is gone (its pid dead, or someone else's now)."""
    deadline = time.monotonic() + seconds
    while True:
        if why_not(transport, pid, record) is not None:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(poll)


def stop_run(transport: Transport, run_dir: str, timeout: float = 30.0,
             poll: float = 0.25) -> StopResult:
    """Stop the run in ``run_dir`` gracefully, or by force after ``timeout`` seconds.
    Its pid is signalled only while it is the process status.json records
    (``remote.procs``).

    Raises ``ValueError`` when the status cannot be read or names no pid to signal."""
    read = read_status(transport, run_dir)
    if not read.ok:
        raise ValueError(clean_text(read.reason))
    state = read.get("state")
    if state != "running":
        return StopResult("not-running", f"the run is {clean_text(str(state))}")
    pid = read.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        raise ValueError("status.json names no pid to signal; stop the run on the box")
    record = read.fields or {}
    why = why_not(transport, pid, record)
    if why == "no such process":
        return StopResult("not-running", f"pid {pid} is gone; the run died without "
                                         "closing its status")
    if why is not None:
        return StopResult("not-signalled", f"stale pid {pid}: not signalling ({why})")
    started = time.monotonic()
    send(transport, pid, signal.SIGTERM)
    if _wait_gone(transport, pid, record, timeout, poll):
        return StopResult("stopped", f"pid {pid} ended {time.monotonic() - started:.1f}s "
                                     f"after SIGTERM; state {_read_state(transport, run_dir)}")
    try:
        signal_checked(transport, pid, signal.SIGKILL, record)
    except StalePid:  # it ended just now (or its pid is already someone else's)
        return StopResult("stopped", f"pid {pid} ended {time.monotonic() - started:.1f}s "
                                     f"after SIGTERM; state {_read_state(transport, run_dir)}")
    gone = _wait_gone(transport, pid, record, KILL_WAIT_SECONDS, poll)
    tail = "" if gone else f"; pid {pid} is still there {KILL_WAIT_SECONDS:g}s later"
    return StopResult("killed", f"pid {pid} ignored SIGTERM for {timeout:g}s and was "
                                f"killed (SIGKILL){tail}; state "
                                f"{_read_state(transport, run_dir)}")
