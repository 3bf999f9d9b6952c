"""Signalling a process on the box only while it is still the process we recorded.

A pid from a JSON file on the box (``status.json``, ``guard.json``) is checked before
every signal: it must be above 1, alive, and have the start time recorded next to it
(``trainer.procid``); a status without one (LibreYOLO's) needs a process that started
before the run's ``started_at``. Otherwise: "stale pid N: not signalling".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remote.transport.base import Transport
from trainer import procid, runfiles


class StalePid(Exception):
    """The recorded pid is not (or no longer) the recorded process; one line."""


def identity_of(transport: Transport, pid: int) -> procid.ProcessIdentity | None:
    """What the box's ``/proc`` says about ``pid`` (``None``: no such process)."""
    result = transport.run(procid.identity_command(pid), timeout=30.0)
    return procid.parse_identity(result.stdout) if result.ok else None


def started_at(record: Mapping[str, Any]) -> float | None:
    """The record's ``started_at`` as epoch seconds."""
    return runfiles.parse_iso(str(record.get("started_at") or ""))


def why_not(transport: Transport, pid: Any, record: Mapping[str, Any]) -> str | None:
    """Why ``pid`` must not be signalled as the process ``record`` describes (``None``
    when it may)."""
    return _check(transport, pid, record)[0]


def _check(transport: Transport, pid: Any,
           record: Mapping[str, Any]) -> tuple[str | None, procid.ProcessIdentity | None]:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 1:
        return f"pid {pid!r} is not a process we may signal", None
    found = identity_of(transport, pid)
    return procid.mismatch(found, record, started_at(record)), found


def is_ours(transport: Transport, pid: Any, record: Mapping[str, Any]) -> bool:
    """Whether ``pid`` is alive and is the process ``record`` describes."""
    return why_not(transport, pid, record) is None


def signal_checked(transport: Transport, pid: Any, sig: int, record: Mapping[str, Any],
                   pgid: Any = None) -> None:
    """Send ``sig`` to ``pid`` once it is verified as the recorded process: to the
    recorded process group ``pgid`` when the process is in it, else to the group ``pid``
    leads, else to ``pid`` alone. Raises ``StalePid``."""
    why, found = _check(transport, pid, record)
    if why is not None:
        raise StalePid(f"stale pid {pid}: not signalling ({why})")
    if pgid in (None, pid):
        send(transport, pid, sig)
        return
    if not isinstance(pgid, int) or pgid <= 1 or found is None or found.pgid != pgid:
        raise StalePid(f"stale pid {pid}: not signalling (it is not in the recorded "
                       f"process group {pgid!r})")
    transport.signal_group(pgid, sig)


def send(transport: Transport, pid: int, sig: int) -> None:
    """Signal ``pid``'s process group when it leads one, else ``pid`` alone. Call it only
    for a pid ``why_not`` has just passed."""
    if pid <= 1:
        raise StalePid(f"pid {pid}: not signalling")
    if not transport.signal_group(pid, sig):
        transport.run(f"kill -{int(sig)} {int(pid)}", timeout=15.0)
