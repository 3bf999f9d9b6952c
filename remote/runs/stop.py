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

Every graceful stop writes ``NAME.stop.json`` (pid, signal, time) before its signal, our
trainer's too: a second stop of the same pid sees the first in progress (a long final save
or Hub push) and sends nothing; it waits for the process to end and never kills it, unless
``force`` (``gpurent stop --force``) asks for SIGKILL at once.
"""

from __future__ import annotations

import contextlib
import json
import posixpath
import shlex
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from remote.runs.processes import StalePid, send, signal_checked, started_at, why_not
from remote.runs.read import read_run, read_status
from remote.transport.base import Transport
from trainer import engines, procid, runfiles
from trainer.text import clean_text

#: How long to wait for the process to vanish after SIGKILL.
KILL_WAIT_SECONDS = 5.0
#: How long a LibreYOLO stop waits for ``weights/`` to be quiet before SIGINT.
QUIET_WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class StopResult:
    """``outcome``: ``stopped`` (ended after the graceful signal), ``killed`` (SIGKILL
    was needed), ``stopping`` (a stop already in progress was waited for, and the run is
    still saving), ``not-running``, or ``not-signalled`` (the recorded pid is stale:
    another process has it now); ``detail``: one line for the user; ``torn``: checkpoints that
    were being written when the run stopped (cut short)."""

    outcome: str
    detail: str
    torn: tuple[str, ...] = ()


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
             poll: float = 0.25, force: bool = False) -> StopResult:
    """Stop the run in ``run_dir`` gracefully (see the module doc), or by force after
    ``timeout`` seconds. Its pid is signalled only while it is the process status.json
    records (``remote.runs.processes``). When a stop of that pid is already in progress,
    nothing is sent: the process is waited for up to ``timeout`` seconds and left running
    after it, unless ``force`` (then SIGKILL at once).

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
    sent = stop_in_progress(transport, run_dir, pid, started_at(record))
    if sent is not None:
        return _join(transport, run_dir, pid, record, sent, timeout, poll, force)
    sig = graceful_signal(transport, run_dir)
    name = signal.Signals(sig).name
    if sig == signal.SIGINT:
        signal_when_quiet(transport, run_dir, pid, sig, min(timeout, QUIET_WAIT_SECONDS))
    else:
        _write_mark(transport, run_dir, json.loads(_mark_body(pid, name)))
        send(transport, pid, sig)
    started = time.monotonic()
    gone = _wait_gone(transport, pid, record, timeout, poll)
    killed = False
    if not gone:
        if sig == signal.SIGINT:  # it ignored SIGINT: what it saved since is whole
            torn_checkpoints(transport, run_dir, rebase=True)
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


@dataclass(frozen=True)
class StopSent:
    """A stop of the run's process already sent (``NAME.stop.json``): its ``signal``
    name and when it was sent (``at``, UTC; ``None`` when the mark does not say)."""

    signal: str
    at: datetime | None


def stop_in_progress(transport: Transport, run_dir: str, pid: int,
                     started: float | None = None) -> StopSent | None:
    """The stop already sent to ``pid`` (its ``NAME.stop.json`` names that pid), if any.
    A mark written before the process started (``started``: the status's ``started_at``,
    epoch s; the mark's mtime is on the same clock, the box's) was left by the stop of an
    earlier process of the run that had the same pid (a box restarted for a resume
    hands out the same pids): not this one's."""
    mark = engines.beside_path(run_dir, engines.BESIDE_STOP)
    st = transport.stat(mark)
    if st is None or (started is not None and st.mtime < started - procid.STARTED_AT_SLACK):
        return None
    try:
        data = transport.read(mark, 0, engines.MAX_MARK_BYTES)
        record = json.loads(data)
    except ValueError:
        return None
    if not isinstance(record, dict) or engines.parse_stop(data) != pid:
        return None
    at: datetime | None
    try:
        at = datetime.fromisoformat(str(record.get("at")).replace("Z", "+00:00"))
    except ValueError:
        at = None
    return StopSent(clean_text(str(record.get("signal") or "a signal")), at)


def in_progress_text(sent: StopSent, now: datetime | None = None) -> str:
    """``a stop sent at HH:MM:SS (N s ago) is in progress`` (local time of this machine)."""
    if sent.at is None:
        return f"a stop ({sent.signal}) is in progress"
    now = now or datetime.now(UTC)
    ago = max(0, round((now - sent.at).total_seconds()))
    return (f"a stop sent at {sent.at.astimezone():%H:%M:%S} ({ago} s ago) is in "
            "progress")


def _join(transport: Transport, run_dir: str, pid: int, record: Mapping[str, Any],
          sent: StopSent, timeout: float, poll: float, force: bool) -> StopResult:
    """Wait for a stop already in progress, sending nothing (SIGKILL at once: ``force``)."""
    said = in_progress_text(sent)
    libre = sent.signal == signal.SIGINT.name
    if force:
        if libre:  # what it saved before the kill is whole
            torn_checkpoints(transport, run_dir, rebase=True)
        with contextlib.suppress(StalePid):  # it ended just now
            signal_checked(transport, pid, signal.SIGKILL, record)
        gone = _wait_gone(transport, pid, record, KILL_WAIT_SECONDS, poll)
        torn = torn_checkpoints(transport, run_dir) if libre else ()
        tail = "" if gone else f"; pid {pid} is still there {KILL_WAIT_SECONDS:g}s later"
        return StopResult("killed", f"{said}: forced, pid {pid} was killed (SIGKILL){tail}; "
                                    f"{_ended(transport, run_dir)}{_torn_text(torn)}", torn)
    started = time.monotonic()
    if not _wait_gone(transport, pid, record, timeout, poll):
        return StopResult("stopping", f"{said}: waited {timeout:g}s, pid {pid} is still "
                                      "going: the first stop is still saving; not signalled "
                                      "again (force it: gpurent stop --force)")
    torn = torn_checkpoints(transport, run_dir) if libre else ()
    return StopResult("stopped", f"{said}: waited, pid {pid} ended "
                                 f"{time.monotonic() - started:.1f}s later; "
                                 f"{_ended(transport, run_dir)}{_torn_text(torn)}", torn)


def _write_mark(transport: Transport, run_dir: str, record: Mapping[str, Any]) -> None:
    """Write ``NAME.stop.json`` atomically (temp file, then rename) on the box."""
    mark = engines.beside_path(run_dir, engines.BESIDE_STOP)
    q = shlex.quote(mark)
    done = transport.run(f"mkdir -p {shlex.quote(posixpath.dirname(mark))} && "
                         f"printf '%s\\n' {shlex.quote(json.dumps(record))} > {q}.tmp && "
                         f"mv -f {q}.tmp {q}", timeout=30.0)
    if done.rc != 0:
        why = clean_text(done.stderr.decode("utf-8", "replace")).strip().splitlines()
        raise ValueError(f"could not write the stop mark: "
                         f"{why[-1] if why else f'exit {done.rc}'}")


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


#: Run by the box's python for a LibreYOLO stop (``ARGS: RUN PID SIG MARK BODY WAIT
#: SETTLE``): wait for a moment when no checkpoint is being written (just after
#: status.json changed: the engine writes it after the epoch's saves; or once weights/
#: has been still for SETTLE s; at most WAIT s), write the stop mark, signal at once.
#: The mark records each checkpoint's size and mtime (ns) at the signal, so that a file
#: the signal cut short is told by its change, whatever the clock's granularity. On the
#: box, so that the signal follows the quiet moment by milliseconds, not round trips.
QUIET_THEN_SIGNAL = """
import json, os, signal, sys, time
run, pid, sig, mark, body, wait, settle = sys.argv[1:8]
pid, sig, wait, settle = int(pid), int(sig), float(wait), float(settle)
def weights():
    out, folder = [], os.path.join(run, "weights")
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        names = []
    for name in names:
        try:
            st = os.stat(os.path.join(folder, name))
        except OSError:
            continue
        out.append((name, st.st_size, st.st_mtime_ns))
    return out
def status():
    try:
        st = os.stat(os.path.join(run, "status.json"))
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)
end = time.time() + wait
first, seen, quiet = status(), weights(), time.time()
while time.time() < end:
    time.sleep(0.02)
    now = weights()
    if status() != first:
        break
    if now != seen:
        seen, quiet = now, time.time()
    elif time.time() - quiet >= settle:
        break
if not os.path.isdir(os.path.dirname(mark)):
    os.makedirs(os.path.dirname(mark))
record = json.loads(body)
record["weights"] = dict((n, [size, ns]) for n, size, ns in weights())
with open(mark + ".tmp", "w") as fh:
    fh.write(json.dumps(record) + "\\n")
os.rename(mark + ".tmp", mark)
try:
    os.killpg(pid, sig)
except OSError:
    os.kill(pid, sig)
print("signalled")
"""


def signal_when_quiet(transport: Transport, run_dir: str, pid: int, sig: int,
                      seconds: float, settle: float = 1.0) -> None:
    """Write ``NAME.stop.json`` and send ``sig`` to ``pid`` (its group when it leads one)
    from the box, at a moment when no checkpoint is being written (see
    :data:`QUIET_THEN_SIGNAL`). Raises ``ValueError`` when the box could not do it."""
    mark = engines.beside_path(run_dir, engines.BESIDE_STOP)
    body = _mark_body(pid, signal.Signals(sig).name)
    words = [run_dir, str(int(pid)), str(int(sig)), mark, body, f"{seconds:g}", f"{settle:g}"]
    result = transport.run(f"{shlex.quote(_python(transport))} -c "
                           f"{shlex.quote(QUIET_THEN_SIGNAL)} "
                           f"{shlex.join(words)}", timeout=seconds + 60.0)
    if b"signalled" not in result.stdout:
        why = clean_text(result.stderr.decode("utf-8", "replace")).strip().splitlines()
        raise ValueError(f"could not signal pid {pid} on the box: "
                         f"{why[-1] if why else f'exit {result.rc}'}")


def _mark_body(pid: int, signal_name: str) -> str:
    return json.dumps({"pid": int(pid), "signal": signal_name, "by": "gpurent stop",
                       "at": runfiles.utc_now_iso(), "torn": []})


#: Run by the box's python after a LibreYOLO stop (``ARGS: RUN MARK``): the checkpoints
#: whose size or mtime changed since the mark recorded them (written after the signal).
#: With ``rebase``, the mark takes the checkpoints as they are now instead (before a
#: SIGKILL: only a save that kill interrupts is cut short).
CHANGED_SINCE = """
import json, os, sys
run, mark, rebase = sys.argv[1:4]
with open(mark) as fh:
    record = json.load(fh)
before, now = record.get("weights") or {}, {}
folder = os.path.join(run, "weights")
for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
    try:
        st = os.stat(os.path.join(folder, name))
    except OSError:
        continue
    if name.endswith(".pt"):
        now[name] = [st.st_size, st.st_mtime_ns]
        if before.get(name) != now[name] and rebase != "rebase":
            print(name)
if rebase == "rebase":
    record["weights"] = now
    with open(mark + ".tmp", "w") as fh:
        fh.write(json.dumps(record) + "\\n")
    os.rename(mark + ".tmp", mark)
"""


def _python(transport: Transport) -> str:
    found = transport.run("command -v python3 || command -v python", timeout=30.0)
    return (found.stdout.decode("utf-8", "replace").strip().splitlines() or ["python3"])[0]


def torn_checkpoints(transport: Transport, run_dir: str,
                     rebase: bool = False) -> tuple[str, ...]:
    """Checkpoints written after the stop's signal (a save it interrupted, cut short); they
    are added to ``NAME.stop.json`` (``torn``) for later readers (resume, the watcher).
    ``rebase``: record the checkpoints as they are now instead (returns ``()``)."""
    mark = engines.beside_path(run_dir, engines.BESIDE_STOP)
    words = [run_dir, mark, "rebase" if rebase else "check"]
    found = transport.run(f"{shlex.quote(_python(transport))} -c "
                          f"{shlex.quote(CHANGED_SINCE)} {shlex.join(words)}", timeout=60.0)
    names = tuple(line.strip() for line in found.stdout.decode("utf-8", "replace").splitlines()
                  if line.strip().endswith(".pt"))
    if names:
        try:
            record = json.loads(transport.read(mark, 0, engines.MAX_MARK_BYTES))
        except ValueError:
            record = {}
        record["torn"] = list(names)
        with contextlib.suppress(ValueError):  # the stop is done; the mark is a hint
            _write_mark(transport, run_dir, record)
    return names
