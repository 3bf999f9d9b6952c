"""Is a run alive? Liveness is derived, never trusted: ``status.json`` (read by
:mod:`trainer.runfiles`), whether its pid lives, and the growth of its log are combined
into one verdict. Standard library only; the box's follower and the laptop share it."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trainer.runfiles import StatusRead, parse_iso
from trainer.text import format_duration, one_line

#: Health verdicts, from best to worst news.
HEALTH_VERDICTS = (
    "live", "starting", "slow", "stalled", "dead", "completed", "failed", "stopped",
    "unreadable",
)
#: Verdicts of a run that is (or may still be) training (``stalled`` still holds the
#: GPU): chosen first to watch, and what a stop or the guard may act on.
GOING = ("live", "starting", "slow", "stalled")
#: States of a status.json after which a run is judged by its state alone.
ENDED = ("completed", "failed", "stopped")


@dataclass(frozen=True)
class Health:
    """A liveness verdict (one of ``HEALTH_VERDICTS``) and a one-line reason."""

    verdict: str
    reason: str


def local_pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this machine and is not a zombie."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return True
    return not (fields and fields[0] in (b"Z", b"X"))


def last_growth(log_history: Sequence[tuple[float, int]]) -> float | None:
    """The time of the last observed growth in ``(time, size)`` samples, oldest first."""
    grown = None
    for (_, before), (when, after) in zip(log_history, log_history[1:]):
        if after != before:
            grown = when
    return grown


@dataclass(frozen=True)
class LaunchRead:
    """A launched run before its status.json: ``launch.pid`` and ``console.log``'s end."""

    pid: int | None
    console: str = ""


def parse_launch_pid(data: bytes) -> int | None:
    """The pid in the bytes of ``launch.pid``: its first word (more may follow)."""
    words = data.split()
    return int(words[0]) if words and words[0].isdigit() and int(words[0]) > 0 else None


def judge_health(
    read: StatusRead,
    *,
    now: float,
    pid_alive: Callable[[int], bool] | None = None,
    log_history: Sequence[tuple[float, int]] = (),
    slow_factor: float = 1.5,
    stall_epochs: int = 3,
    grace_seconds: float = 30.0,
    first_epoch_stall_seconds: float = 1800.0,
    launch: LaunchRead | None = None,
) -> Health:
    """Judge a run's health. Liveness is derived, never trusted: a run killed with SIGKILL
    leaves ``state: running`` forever, so the state is combined with the age of
    ``updated_at`` against ``mean_epoch_seconds``, whether ``pid`` is alive (``pid_alive``,
    ``None`` when it cannot be asked) and the growth of the log (``log_history``).

    ``slow``: the epoch is overdue (older than ``slow_factor`` epochs plus a grace).
    ``stalled``: alive but no epoch for ``stall_epochs`` epochs and the log is not growing.
    Without status.json, a ``launch`` record makes it a run all the same: ``starting``
    while its pid lives, ``failed`` (the console's last lines the reason) once it is gone.
    """
    if not read.ok:
        if launch is not None and read.missing and launch.pid is not None:
            return _judge_start(launch, None if pid_alive is None else pid_alive(launch.pid))
        return Health("unreadable", read.reason)
    over = ended(read)
    if over is not None:
        return over
    state = read.get("state")
    label = f"state {state!r}" if state != "running" else "state 'running'"
    pid = read.get("pid")
    if pid_alive is not None and isinstance(pid, int) and not pid_alive(pid):
        return Health("dead", f"pid {pid} is gone but {label} was never closed")
    updated = parse_iso(read.get("updated_at") or "")
    if updated is None:
        return Health("live", f"{label}, no updated_at to judge progress by")
    age = max(0.0, now - updated)
    grew = last_growth(log_history)
    log_quiet_for = None if grew is None else now - grew
    log_growing = grew is not None and now - grew < max(grace_seconds, 60.0)
    epoch = read.get("mean_epoch_seconds") or read.get("epoch_seconds")
    if not epoch or epoch <= 0:
        if age > first_epoch_stall_seconds and not log_growing:
            return Health("stalled", f"no update for {format_duration(age)} in the first epoch")
        return Health("live", f"{label}, first epoch in progress ({format_duration(age)})")
    if age > stall_epochs * epoch + grace_seconds and not log_growing:
        quiet = ("" if log_quiet_for is None
                 else f", log quiet for {format_duration(log_quiet_for)}")
        return Health("stalled", f"no epoch for {format_duration(age)} (~{age / epoch:.0f} "
                                 f"epochs of {format_duration(epoch)}){quiet}")
    if age > slow_factor * epoch + grace_seconds:
        return Health("slow", f"epoch overdue: last update {format_duration(age)} ago, an epoch "
                              f"takes ~{format_duration(epoch)}")
    return Health("live", f"updated {format_duration(age)} ago, an epoch takes "
                          f"~{format_duration(epoch)}")


def ended(read: StatusRead) -> Health | None:
    """The verdict of a run whose status says it ended (``completed``, ``failed``,
    ``stopped``), from the status alone; ``None`` for one that has not. Give it the status
    filled in from the history (``trainer.engines.fill_from_history``): a resumed
    LibreYOLO run's own counts only its last invocation's epochs."""
    state = read.get("state") if read.ok else None
    if state not in ENDED:
        return None
    return Health(state, _ending_reason(read))


def _ending_reason(read: StatusRead) -> str:
    state = read.get("state")
    if state == "failed":
        err = read.get("error")
        if isinstance(err, dict):
            return f"{err.get('type') or 'error'}: {err.get('message') or ''}".strip()
        return str(err or "failed without an error message")
    done, total = read.get("completed_epochs"), read.get("total_epochs")
    if done is not None and total is not None:
        return f"{state} after {done}/{total} epochs"
    return str(state)


def apply_stop(health: Health, read: StatusRead, stopped_pid: int | None) -> Health:
    """The verdict for a run that ``gpurent stop`` ended when its engine cannot say so:
    LibreYOLO ends on SIGINT as ``failed`` (``KeyboardInterrupt``), and a run that ignored
    the signal and was killed leaves ``running`` behind (``dead``). ``stopped_pid`` is the
    pid the stop signalled (``NAME.stop.json``); it must be the status's own, so a later
    run in the same folder is judged on its own."""
    if stopped_pid is None or read.get("pid") != stopped_pid:
        return health
    err = read.get("error")
    interrupted = isinstance(err, dict) and err.get("type") == "KeyboardInterrupt"
    if health.verdict == "dead" or (health.verdict == "failed" and interrupted):
        done, total = read.get("completed_epochs"), read.get("total_epochs")
        epochs = f" after {done}/{total} epochs" if done is not None and total else ""
        return Health("stopped", f"stopped by gpurent stop{epochs}")
    return health


def _judge_start(launch: LaunchRead, alive: bool | None) -> Health:
    last = one_line(" | ".join(launch.console.splitlines()[-3:]), 10_000)
    if alive is False:
        return Health("failed", f"failed to start: {last[-400:] or 'no output'}")
    said = f": {last.rsplit(' | ', 1)[-1][-200:]}" if last else ""
    return Health("starting", f"pid {launch.pid} started, no status.json yet{said}")


# --------------------------------------------------------------------------- a full disk

#: Free bytes under which the disk of a run counts as full: a checkpoint (or even
#: status.json's temp file) no longer fits, so a trainer dies at its next write. A disk
#: smaller than 50 times this counts as full below 2 % of its size.
FULL_DISK_BYTES = 64 << 20
#: Verdicts of a run that stopped writing, for which a full disk is named as the reason.
STOPPED_WRITING = ("dead", "stalled", "failed")


def disk_space(path: str | os.PathLike[str]) -> dict[str, int] | None:
    """``{"free": bytes, "size": bytes}`` of the filesystem holding ``path`` (free: what
    a user without root may still write), or ``None`` when it cannot be asked."""
    try:
        st = os.statvfs(path)
    except (OSError, AttributeError):
        return None
    return {"free": st.f_bavail * st.f_frsize, "size": st.f_blocks * st.f_frsize}


#: A count of 1 KiB blocks in ``df -Pk``'s answer: ASCII digits, more than any disk needs.
_DF_COUNT = re.compile(r"[0-9]{1,24}")


def parse_df(data: bytes) -> dict[str, int] | None:
    """``disk_space``'s answer from the output of ``df -Pk PATH`` (POSIX: a header, then
    one line ``FS 1024-blocks Used Available Capacity Mounted-on``); ``None`` for any
    other line (a count not of ASCII digits: ``str.isdigit`` also takes ``²``)."""
    lines = data.decode("utf-8", "replace").strip().splitlines()
    words = lines[-1].split() if len(lines) >= 2 else []
    if len(words) < 6 or not (_DF_COUNT.fullmatch(words[1]) and _DF_COUNT.fullmatch(words[3])):
        return None
    return {"free": int(words[3]) * 1024, "size": int(words[1]) * 1024}


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


#: What a write to a full disk leaves in a log (``OSError: [Errno 28] ...``, any engine).
NO_SPACE = b"No space left on device"
#: How much of the log's end is searched for ``NO_SPACE``.
LOG_TAIL_BYTES = 8192


def disk_full(disk: object, log_tail: bytes = b"") -> str | None:
    """Why a run stopped writing, when its disk is to blame: ``the box's disk is full
    (12.0 kB free of 50.0 GB)`` when ``disk`` (as ``disk_space`` gives it) has less than
    ``FULL_DISK_BYTES`` (or 2 % of a small disk) free, or ``the box's disk filled up
    (the log says "No space left on device"; 12.5 MB free now)`` when the end of its log
    says so (a trainer's failed checkpoint frees its temp file again as it dies).
    ``None`` otherwise."""
    free = size = None
    if isinstance(disk, dict):
        free, size = disk.get("free"), disk.get("size")
        if not (isinstance(free, int) and isinstance(size, int)) or isinstance(free, bool) \
                or isinstance(size, bool) or free < 0 or size <= 0:
            free = size = None
    if free is not None and size is not None and free < min(FULL_DISK_BYTES, size // 50):
        return f"the box's disk is full ({_size(free)} free of {_size(size)})"
    if NO_SPACE in log_tail[-LOG_TAIL_BYTES:]:
        now = "" if free is None or size is None else f"; {_size(free)} free now"
        return f"the box's disk filled up (the log says \"No space left on device\"{now})"
    return None


def with_disk(health: Health, disk: object, log_tail: bytes = b"") -> Health:
    """``health`` with a full disk named first in its reason, for a run that stopped
    writing (``STOPPED_WRITING``): a run killed by a full disk otherwise reads as
    ``dead`` with no reason but its pid."""
    full = disk_full(disk, log_tail) if health.verdict in STOPPED_WRITING else None
    if full is None:
        return health
    return Health(health.verdict, f"{full}: {health.reason}")
