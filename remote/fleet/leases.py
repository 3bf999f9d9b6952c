"""Leases: a deadline for an instance, after which its billing is ended.

A lease is kept in two places. On the laptop, in ``STATE/leases.json`` (beside
``boxes.json``; ``remote.config.state_path``), where the off-box watchdog
(``remote.fleet.watchdog``) reads it and ends the billing through the provider's API
even when the box hangs or is gone. On the box, when it can be reached, in
``CACHE/lease.json`` (``$GPURENT_CACHE_DIR``, default ``~/.cache/gpurent``), where the
guard (``trainer.guard.lease``) reads it on every poll: the box ends its own billing
with the instance's key when the laptop is closed. Neither needs the other.

The laptop's file is changed under a lock (``remote.billing.statefile``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, overload

from remote.billing.statefile import locked_json, moment, read_entries, state_file
from remote.fleet.idle import span
from remote.runs.probe import cache_dir_expr
from remote.transport.base import Transport, TransportError
from trainer import runfiles
from trainer.guard.lease import LEASE_FILE, THEN, parse_lease
from trainer.text import WHOLE_ERROR, clock_time, one_line

#: The laptop's lease file, in the state directory.
LEASES_FILE = "leases.json"
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
#: The longest lease: a year (a longer one is a typo, and past a date's range).
MAX_LEASE_DAYS = 366


@dataclass(frozen=True)
class Lease:
    """``target`` (``vast:4242``) may bill until ``until`` (epoch seconds); then
    ``then`` (stop, or destroy when the destroy check allows it, else stop)."""

    target: str
    until: float
    then: str = "stop"
    set_at: float = 0.0

    @property
    def until_at(self) -> str:
        """The deadline, ISO-8601 UTC."""
        return runfiles.utc_now_iso(self.until)

    @property
    def until_words(self) -> str:
        """The deadline for people: ``2026-12-03 14:47 UTC``."""
        return runfiles.utc_now_iso(self.until)[:16].replace("T", " ") + " UTC"

    def deadline_words(self, now: float | None = None) -> str:
        """``until 14:47 (in 5 h 59 min), then stop`` on this laptop's clock (local time),
        or ``ran out at 14:47 (3 min ago), then stop``."""
        left = self.left(now)
        when = clock_time(self.until)
        return (f"until {when} (in {span(left)})" if left > 0 else
                f"ran out at {when} ({span(-left)} ago)") + f", then {self.then}"

    def left(self, now: float | None = None) -> float:
        """Seconds until the deadline (negative once passed)."""
        return self.until - (time.time() if now is None else now)

    def left_words(self, now: float | None = None) -> str:
        """``5 h 59 min left``, ``59 s left``, or ``passed 3 min ago``."""
        left = self.left(now)
        return f"{span(left)} left" if left > 0 else f"passed {span(-left)} ago"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (also what the box's ``lease.json`` holds)."""
        return {**asdict(self), "until_at": self.until_at}


def parse_duration(text: str) -> float:
    """Seconds in ``6h``, ``90m``, ``1h30m``, ``2d``, ``45s`` (a bare number is hours).
    ``ValueError`` (one line) otherwise."""
    words = text.strip().lower()
    if re.fullmatch(r"\d+(\.\d+)?", words):
        seconds = float(words) * _UNITS["h"]
    else:
        parts = re.findall(r"(\d+(?:\.\d+)?)([smhd])", words)
        if not parts or "".join(n + u for n, u in parts) != words:
            raise ValueError(f"{text!r} is not a duration: write it as 6h, 90m, 1h30m or 2d")
        seconds = sum(float(n) * _UNITS[u] for n, u in parts)
    if seconds <= 0:
        raise ValueError(f"{text!r}: a lease must last more than nothing")
    if seconds > MAX_LEASE_DAYS * _UNITS["d"]:
        raise ValueError(f"{text[:40]!r}: a lease lasts at most {MAX_LEASE_DAYS} days")
    return seconds


def _lease(target: str, entry: Any) -> Lease | None:
    data = parse_lease(entry)
    until = None if data is None else moment(data.get("until"))
    if data is None or until is None:  # a deadline past a date's range is none either
        return None
    return Lease(target, until, data.get("then", "stop"), moment(data.get("set_at")) or 0.0)


def leases() -> dict[str, Lease]:
    """Every lease on this laptop, by target (unreadable entries left out, said once)."""
    return read_entries(state_file(LEASES_FILE), _lease)


def lease_for(target: str) -> Lease | None:
    """The lease of ``target`` (``vast:4242``), or ``None``."""
    return leases().get(target)


def set_lease(target: str, seconds: float, then: str = "stop",
              now: float | None = None) -> Lease:
    """Give ``target`` a lease of ``seconds`` from now (replacing any other)."""
    if then not in THEN:
        raise ValueError(f"a lease ends in {' or '.join(THEN)}, not {then!r}")
    now = time.time() if now is None else now
    lease = Lease(target, now + seconds, then, now)
    with locked_json(LEASES_FILE) as data:
        data[target] = {"until": lease.until, "then": then, "set_at": now}
    return lease


def clear_lease(target: str) -> Lease | None:
    """Remove ``target``'s lease; the one removed, or ``None``."""
    with locked_json(LEASES_FILE) as data:
        return _lease(target, data.pop(target, None))


def write_on_box(transport: Transport, lease: Lease | None, timeout: float = 20.0) -> None:
    """Put ``lease`` in the box's ``CACHE/lease.json`` (atomically), or remove it when
    ``None``. ``TransportError`` (one line) when the box did not do it."""
    where = f"{cache_dir_expr()}/{LEASE_FILE}"
    if lease is None:
        command, stdin = f"rm -f {where}", None
    else:
        command = (f"d={cache_dir_expr()}; mkdir -p \"$d\" && cat > \"$d/.{LEASE_FILE}.tmp\" "
                   f"&& mv -f \"$d/.{LEASE_FILE}.tmp\" \"$d/{LEASE_FILE}\"")
        # "left": the box's guard counts it from the file's mtime (its own clock), so a
        # box whose clock is off still ends the billing when the laptop's lease says.
        stdin = json.dumps({**lease.to_dict(), "left": lease.left()}).encode()
    result = transport.run(command, stdin=stdin, timeout=timeout)
    if not result.ok:
        err = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise TransportError(f"writing the lease on {transport.label} failed: "
                             f"{err[-1][:200] if err else f'exit {result.rc}'}")


#: ``box``: an open transport (a launch's, a guard's arming), a function that opens one
#: (closed after), or ``None`` (the box is not asked).
BoxDoor = Transport | Callable[[], Transport] | None


@overload
def change_lease(target: str, seconds: float, then: str = ...,
                 box: BoxDoor = ...) -> tuple[Lease, str]: ...
@overload
def change_lease(target: str, seconds: None, then: str = ...,
                 box: BoxDoor = ...) -> tuple[None, str]: ...
def change_lease(target: str, seconds: float | None, then: str = "stop",
                 box: BoxDoor = None) -> tuple[Lease | None, str]:
    """Set ``target``'s lease to ``seconds`` from now (``None``: clear it) on this laptop
    (the watchdog's), then on its box (the guard's) through ``box`` (see
    :data:`BoxDoor`). The lease (``None``: cleared), and why the box was not told, whole
    (``""``: it was; ``"not asked"`` without ``box``; the laptop's lease holds either
    way). This laptop's failures raise (``OSError``, ``ValueError``)."""
    if seconds is None:
        clear_lease(target)
        lease = None
    else:
        lease = set_lease(target, seconds, then)
    if box is None:
        return lease, "not asked"
    try:
        if callable(box):
            opened = box()
            try:
                write_on_box(opened, lease)
            finally:
                opened.close()
        else:
            write_on_box(box, lease)
    except (TransportError, OSError, ValueError) as exc:
        return lease, one_line(exc, WHOLE_ERROR)
    return lease, ""


def told_words(lease: Lease, told: str) -> str:
    """``lease until 14:47 (in 5 h 59 min), then stop``, and why the box was not told
    when it was not (``told`` from :func:`change_lease`)."""
    return f"lease {lease.deadline_words()}" + \
        (f" (the box was not told: {one_line(told, 200)})" if told else "")
