"""Process identity: a pid is only worth signalling while it is still the same process.

A pid is reused once its process is gone (after a crash, or a container restart that
keeps the files), so every pid we may signal is stored with the process's start time
(``/proc/PID/stat`` field 22, clock ticks since boot) and the kernel's boot id. Before a
signal the pid must be alive *and* have that start time. A status written by LibreYOLO
has no start time; then the process must have started before the run's ``started_at``
(a reused pid belongs to a process started after the run's own had gone).

Standard library only; runs on the box (the trainer and the guard record their own
identity) and on the laptop (which parses what ``identity_command`` prints on the box).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: The keys stored next to ``pid`` in status.json and guard.json.
START_KEY = "pid_start"
BOOT_KEY = "boot_id"
#: Seconds of slack when comparing a process's start with a recorded ``started_at``.
STARTED_AT_SLACK = 2.0

_BOOT_ID = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class ProcessIdentity:
    """What ``/proc`` says about a live pid: its state letter, start (clock ticks since
    boot), and when known the boot id, boot time (epoch s) and ticks per second."""

    state: str
    start_ticks: int
    pgid: int | None = None
    boot_id: str | None = None
    btime: int | None = None
    clk_tck: int | None = None

    @property
    def alive(self) -> bool:
        """Not a zombie (nor dead)."""
        return self.state not in ("Z", "X")

    @property
    def started(self) -> float | None:
        """The process's start as epoch seconds, when the boot time is known."""
        if self.btime is None or not self.clk_tck:
            return None
        return self.btime + self.start_ticks / self.clk_tck


def parse_stat(data: bytes) -> tuple[str, int, int] | None:
    """``(state, start_ticks, pgid)`` from a ``/proc/PID/stat`` line (the command name may
    hold spaces and parentheses: fields are counted after its last ``)``)."""
    fields = data.rsplit(b")", 1)[-1].split()
    if len(fields) < 20 or not fields[19].isdigit() or not fields[2].isdigit():
        return None
    return fields[0].decode("ascii", "replace"), int(fields[19]), int(fields[2])


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def boot_id() -> str | None:
    """This machine's boot id (changes at every boot), or ``None``."""
    text = (_read(_BOOT_ID) or b"").decode("ascii", "replace").strip()
    return text or None


def start_ticks(pid: int) -> int | None:
    """Process ``pid``'s start time in clock ticks since boot, or ``None``."""
    if pid <= 0:
        return None
    data = _read(f"/proc/{int(pid)}/stat")
    parsed = parse_stat(data) if data else None
    return parsed[1] if parsed else None


def identity(pid: int) -> dict[str, Any]:
    """``{"pid_start": ..., "boot_id": ...}`` of ``pid`` on this machine, to store next to
    the pid (values are ``None`` where ``/proc`` cannot tell)."""
    return {START_KEY: start_ticks(pid), BOOT_KEY: boot_id()}


def identity_command(pid: int) -> str:
    """A shell command that prints what ``parse_identity`` reads about ``pid`` on the box."""
    pid = int(pid)
    return (f"cat /proc/{pid}/stat 2>/dev/null || echo gone; "
            f"cat {_BOOT_ID} 2>/dev/null || echo -; "
            "grep '^btime ' /proc/stat 2>/dev/null || echo -; "
            "getconf CLK_TCK 2>/dev/null || echo -")


def parse_identity(text: bytes) -> ProcessIdentity | None:
    """The ``ProcessIdentity`` from ``identity_command``'s output; ``None`` when there is
    no such pid."""
    lines = text.splitlines()
    if not lines or lines[0].strip() == b"gone":
        return None
    parsed = parse_stat(lines[0])
    if parsed is None:
        return None
    rest = [line.decode("ascii", "replace").strip() for line in lines[1:4]]
    rest += ["-"] * (3 - len(rest))
    boot = rest[0] if rest[0] not in ("", "-") else None
    btime_words = rest[1].split()
    btime = int(btime_words[1]) if len(btime_words) == 2 and btime_words[1].isdigit() \
        else None
    clk = int(rest[2]) if rest[2].isdigit() else None
    return ProcessIdentity(parsed[0], parsed[1], parsed[2], boot, btime, clk)


def local_identity(pid: int) -> ProcessIdentity | None:
    """The ``ProcessIdentity`` of ``pid`` on this machine (``None`` when there is no such pid)."""
    if pid <= 0:
        return None
    data = _read(f"/proc/{int(pid)}/stat")
    parsed = parse_stat(data) if data else None
    if parsed is None:
        return None
    btime = None
    for line in (_read("/proc/stat") or b"").splitlines():
        if line.startswith(b"btime "):
            btime = int(line.split()[1])
    return ProcessIdentity(parsed[0], parsed[1], parsed[2], boot_id(), btime,
                 os.sysconf("SC_CLK_TCK"))


def mismatch(found: ProcessIdentity | None, record: Mapping[str, Any],
             started_at: float | None = None) -> str | None:
    """Why the live process ``found`` is not the one ``record`` (a status.json or
    guard.json object) describes, or ``None`` when it is. ``started_at`` (epoch s) is the
    fallback for records without a start time."""
    if found is None or not found.alive:
        return "no such process"
    want = record.get(START_KEY)
    boot = record.get(BOOT_KEY)
    if isinstance(boot, str) and found.boot_id and boot != found.boot_id:
        return "recorded before the box rebooted"
    if isinstance(want, int) and not isinstance(want, bool):
        if want != found.start_ticks:
            return (f"it started at tick {found.start_ticks}, the recorded process at "
                    f"tick {want}")
        return None
    if started_at is None:
        return "no start time was recorded for it"
    if found.started is None:
        return "its start time cannot be read on the box"
    if found.started > started_at + STARTED_AT_SLACK:
        return "it started after the run did (the pid was reused)"
    return None


def same_process(pid: int, record: Mapping[str, Any],
                 started_at: float | None = None) -> bool:
    """Whether ``pid`` on this machine is alive and is the process ``record`` describes."""
    return mismatch(local_identity(pid), record, started_at) is None
