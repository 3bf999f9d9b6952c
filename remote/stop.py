"""Stopping a run on the box gracefully, by force when it has not gone by the timeout.

Each engine has its own graceful stop. Our trainer: SIGTERM to its process group (it
finishes the step, saves ``last.pt`` and writes ``state: stopped``). LibreYOLO has no
SIGTERM handler (SIGTERM kills it at once) and ends on SIGINT as ``failed`` with
``KeyboardInterrupt``. Its checkpoints are written in place, so a signal during a save
cuts the file short: the SIGINT waits (at most 30 s) for a moment when none is being
written (just after an epoch's status.json, or once ``weights/`` has been still for a
second). ``NAME.stop.json`` is written beside the run first: readers then show the run
as ``stopped`` (``trainer.health.apply_stop``), and a checkpoint modified after it was
being written when the signal came. SIGKILL follows either signal after the timeout.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remote.procs import StalePid, send, signal_checked, why_not
from remote.runs import read_run, read_status
from remote.transport.base import Transport
from trainer import engines, runfiles
from trainer.text import clean_text

#: How long to wait for the process to vanish after SIGKILL.
KILL_WAIT_SECONDS = 5.0
#: How long a LibreYOLO stop waits for ``weights/`` to be quiet before SIGINT.
QUIET_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class StopResult:
    """``outcome``: ``stopped`` (ended after the graceful signal), ``killed`` (SIGKILL
    was needed), ``not-running``, or ``not-signalled`` (the recorded pid is stale: another
    process has it now); ``detail``: one line for the user; ``torn``: checkpoints that
    were being written when the run stopped (cut short)."""

    outcome: str
    detail: str
    torn: tuple[str, ...] = ()


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


def graceful_signal(transport: Transport, run_dir: str) -> int:
    """The signal that stops the run in ``run_dir`` gracefully: SIGINT for a LibreYOLO run
    (it writes ``train_config.yaml``), SIGTERM for ours."""
    config = posixpath.join(run_dir, engines.TRAIN_CONFIG_FILE)
    return signal.SIGINT if transport.stat(config) is not None else signal.SIGTERM


def stop_run(transport: Transport, run_dir: str, timeout: float = 30.0,
             poll: float = 0.25) -> StopResult:
    """Stop the run in ``run_dir`` gracefully (see the module doc), or by force after
    ``timeout`` seconds. Its pid is signalled only while it is the process status.json
    records (``remote.procs``).

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
    sig = graceful_signal(transport, run_dir)
    name = signal.Signals(sig).name
    if sig == signal.SIGINT:
        wait_quiet(transport, run_dir, min(timeout, QUIET_WAIT_SECONDS), poll)
        write_stop_mark(transport, run_dir, pid, name)
    started = time.monotonic()
    send(transport, pid, sig)
    gone = _wait_gone(transport, pid, record, timeout, poll)
    killed = False
    if not gone:
        try:
            signal_checked(transport, pid, signal.SIGKILL, record)
            killed = True
        except StalePid:  # it ended just now (or its pid is already someone else's)
            pass
    torn = torn_checkpoints(transport, run_dir) if sig == signal.SIGINT else ()
    after = (f"pid {pid} ended {time.monotonic() - started:.1f}s after {name}; "
             f"{_ended(transport, run_dir)}{_torn_text(torn)}")
    if not killed:
        return StopResult("stopped", after, torn)
    gone = _wait_gone(transport, pid, record, KILL_WAIT_SECONDS, poll)
    tail = "" if gone else f"; pid {pid} is still there {KILL_WAIT_SECONDS:g}s later"
    return StopResult("killed", f"pid {pid} ignored {name} for {timeout:g}s and was "
                                f"killed (SIGKILL){tail}; {_ended(transport, run_dir)}"
                                f"{_torn_text(torn)}", torn)


def _ended(transport: Transport, run_dir: str) -> str:
    """``state X`` and, when the reader judges it otherwise, how it is shown."""
    run = read_run(transport, run_dir)
    state = clean_text(str(run.read.get("state"))) if run.read.ok else "unreadable"
    if run.health.verdict == state:
        return f"state {state}"
    return f"state {state}, shown as {run.health.verdict} ({clean_text(run.health.reason)})"


def _torn_text(torn: tuple[str, ...]) -> str:
    if not torn:
        return ""
    return (f"; {', '.join(f'weights/{n}' for n in torn)} was being written when the run "
            "stopped and is likely cut short: resume from an older checkpoint")


# ------------------------------------------------------------------ LibreYOLO's stop


def _weights_state(transport: Transport, run_dir: str) -> tuple[tuple[str, int, float], ...]:
    weights = posixpath.join(run_dir, runfiles.WEIGHTS_DIR)
    out = []
    for name in sorted(transport.listdir(weights)):
        st = transport.stat(posixpath.join(weights, name)) if name.endswith(".pt") else None
        if st is not None:
            out.append((name, st.size, st.mtime))
    return tuple(out)


def wait_quiet(transport: Transport, run_dir: str, seconds: float, poll: float,
               settle: float = 1.0) -> bool:
    """Wait (up to ``seconds``) for a moment when no checkpoint is being written: right
    after ``status.json`` changed (LibreYOLO writes it after the epoch's saves), or once
    ``weights/`` has not changed for ``settle`` seconds. ``False``: no such moment came."""
    status = posixpath.join(run_dir, runfiles.STATUS_FILE)
    deadline = time.monotonic() + seconds
    before, mark = _weights_state(transport, run_dir), transport.stat(status)
    quiet_since = time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(min(poll, 0.1))
        now, st = _weights_state(transport, run_dir), transport.stat(status)
        if st != mark:
            return True
        if now != before:
            before, quiet_since = now, time.monotonic()
        elif time.monotonic() - quiet_since >= settle:
            return True
    return False


def write_stop_mark(transport: Transport, run_dir: str, pid: int, signal_name: str,
                    torn: tuple[str, ...] = ()) -> None:
    """Write ``NAME.stop.json`` beside the run (atomically, box time as its mtime)."""
    path = engines.beside_path(run_dir, engines.BESIDE_STOP)
    body = json.dumps({"pid": int(pid), "signal": signal_name, "by": "gpurent stop",
                       "at": runfiles.utc_now_iso(), "torn": list(torn)})
    q = shlex.quote(path)
    result = transport.run(f"mkdir -p {shlex.quote(posixpath.dirname(path))} && printf "
                           f"'%s\\n' {shlex.quote(body)} > {q}.tmp && mv -f {q}.tmp {q}",
                           timeout=30.0)
    if not result.ok:
        raise ValueError(f"cannot write {clean_text(path)} on the box: "
                         f"{clean_text(result.stderr)[:200]}")


def torn_checkpoints(transport: Transport, run_dir: str) -> tuple[str, ...]:
    """Checkpoints modified after the stop mark was written (the box compares the times):
    a save the signal interrupted. They are added to the mark for later readers."""
    mark = engines.beside_path(run_dir, engines.BESIDE_STOP)
    weights = posixpath.join(run_dir, runfiles.WEIGHTS_DIR)
    found = transport.run(f"find {shlex.quote(weights)} -maxdepth 1 -name '*.pt' -newer "
                          f"{shlex.quote(mark)} -print 2>/dev/null || true", timeout=30.0)
    names = sorted({posixpath.basename(line.strip()) for line in
                    found.stdout.decode("utf-8", "replace").splitlines() if line.strip()})
    if names:
        data = transport.read(mark, 0, 4096)
        pid = engines.parse_stop(data)
        if pid is not None:
            try:
                signal_name = str(json.loads(data).get("signal") or "SIGINT")
            except ValueError:
                signal_name = "SIGINT"
            write_stop_mark(transport, run_dir, pid, signal_name, tuple(names))
    return tuple(names)

