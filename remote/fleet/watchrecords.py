"""What the off-box watchdog remembers between passes, per instance, in
``STATE/watchdog/``: the episode it last acted on and how that ended, whether an action
is under way (and since when), and when each alarm was last told.

An episode is one reason to end the billing: a lease's deadline, or an idle stretch of
one run of the instance (its last start). Only an ending that the provider confirmed
settles an episode; a failure of any kind leaves it open, so the next pass tries again.

Every file here is changed under a lock: two watchdogs (cron and a loop, two machines
sharing the state directory) never lose each other's records.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote.billing.statefile import locked_json, moment, read_json, state_file
from remote.fields import num
from trainer import runfiles

#: The folder of per-instance locks and records, in the state directory.
RECORDS = "watchdog"
#: When each alarm was last told, in the state directory.
TOLD_FILE = "watchdog-told.json"
#: An alarm that still holds is told again after this many seconds: every pass of a
#: watchdog run every 5 minutes (cron's jitter included), no more often in a fast loop.
ALARM_EVERY = 240.0
#: Two idle episodes whose starts differ by less than this are one (a provider's start
#: time read from an uptime in minutes moves a little from answer to answer).
SAME_START = 120.0


def _path(target: str, suffix: str) -> Path:
    return state_file(RECORDS) / (target.replace(":", "-") + suffix)


@dataclass(frozen=True)
class Record:
    """The last episode acted on: its key, its start (idle: the instance's last start),
    whether the provider confirmed the ending (``settled``), when, and how many passes
    tried it."""

    episode: str
    start: float | None
    settled: bool
    at: float
    tries: int
    message: str = ""

    def same_episode(self, episode: str, start: float | None) -> bool:
        """Whether ``episode`` (started ``start``) is this record's."""
        if episode.split(":", 1)[0] != self.episode.split(":", 1)[0]:
            return False
        if start is not None and self.start is not None:
            return abs(start - self.start) < SAME_START
        return episode == self.episode


def read_record(target: str) -> Record | None:
    """``target``'s record, or ``None`` (none, or unreadable)."""
    data = read_json(_path(target, ".json"))
    episode, at = data.get("episode"), moment(data.get("at_epoch"))
    if not isinstance(episode, str) or at is None:
        return None
    tries, message = data.get("tries"), data.get("message")
    return Record(episode, num(data.get("start")), data.get("settled") is True, at,
                  tries if isinstance(tries, int) and 0 < tries < 1 << 31 else 1,
                  message if isinstance(message, str) else "")


def write_record(target: str, episode: str, start: float | None, settled: bool,
                 decision: dict[str, Any], now: float | None = None) -> Record:
    """Record a pass's decision for ``target``'s episode (tries counted per episode)."""
    now = time.time() if now is None else now
    before = read_record(target)
    tries = before.tries + 1 if before is not None and \
        before.same_episode(episode, start) and not before.settled else 1
    path = _path(target, ".json")
    path.parent.mkdir(parents=True, exist_ok=True)
    runfiles.atomic_write_json(path, {
        **decision, "episode": episode, "start": start, "settled": settled,
        "at_epoch": now, "at": runfiles.utc_now_iso(now), "tries": tries,
        "by": f"{socket.gethostname()}:{os.getpid()}"})
    os.chmod(path, 0o600)
    return Record(episode, start, settled, now, tries, str(decision.get("message") or ""))


@dataclass(frozen=True)
class Busy:
    """An action under way on an instance: since when, by whom."""

    since: float
    by: str


@contextlib.contextmanager
def held(target: str, now: float | None = None) -> Iterator[Busy | None]:
    """``target``'s lock, taken without waiting: ``None`` inside the block when it is
    ours (the busy mark is written for others to read), else what holds it (its mark;
    ``since`` 0 when it left none)."""
    lock = _path(target, ".lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    mark = _path(target, ".busy")
    with open(lock, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            found = read_json(mark)
            by = found.get("by")
            yield Busy(moment(found.get("since")) or 0.0, by if isinstance(by, str) else "?")
            return
        runfiles.atomic_write_json(mark, {"since": time.time() if now is None else now,
                                          "by": f"{socket.gethostname()}:{os.getpid()}"})
        try:
            yield None
        finally:
            with contextlib.suppress(OSError):
                mark.unlink()


def due_to_tell(key: str, now: float | None = None, every: float = ALARM_EVERY) -> bool:
    """Whether the alarm ``key`` should be told now (never told, or not in ``every``
    seconds); saying yes records it as told."""
    now = time.time() if now is None else now
    with locked_json(TOLD_FILE) as told:
        last = num(told.get(key))
        if last is not None and 0 <= now - last < every:
            return False
        told[key] = now
        return True


def forget_told(keys: set[str]) -> None:
    """Drop the told times of alarms that no longer hold (a later one is told at once)."""
    with locked_json(TOLD_FILE) as told:
        for key in [k for k in told if k not in keys]:
            told.pop(key)


#: The last pass of any watchdog that shares this state directory.
PASS_FILE = "watchdog-pass.json"
#: A watchdog run by cron or a timer (``--once``) is taken to pass every this many
#: seconds at most; a record older than twice the period (at least this) is a watchdog
#: no longer seen.
CRON_EVERY = 300.0


@dataclass(frozen=True)
class WatchdogPass:
    """A watchdog's last pass: when, by whom (``host:pid``), how many leases it held to,
    and its loop's period (``None``: one pass, as cron runs it)."""

    at: float
    by: str
    leases: int
    every: float | None

    def seen(self, now: float) -> bool:
        """Whether it still counts as running: its last pass within twice its period."""
        return now - self.at <= 2 * max(self.every or CRON_EVERY, CRON_EVERY)

    def words(self, now: float) -> str:
        """``a watchdog enforces leases: last pass 2 min ago (by host:41) held to 1
        lease``, or that its last pass is too old to count on."""
        ago = now - self.at
        age = f"{int(ago // 60)} min ago" if ago >= 60 else f"{max(0, int(ago))} s ago"
        held = f"held to {self.leases} lease{'s' * (self.leases != 1)}"
        if self.seen(now):
            return f"a watchdog enforces leases: last pass {age} (by {self.by}), {held}"
        return (f"NO watchdog seen lately: the last pass was {age} (by {self.by}); leases "
                "are enforced only by an armed guard on the box (run gpurent watchdog)")


def record_pass(leases: int, every: float | None, now: float | None = None) -> None:
    """Say that a watchdog pass ran now, holding to ``leases`` leases."""
    now = time.time() if now is None else now
    with locked_json(PASS_FILE) as data:
        data.clear()
        data.update({"at_epoch": now, "at": runfiles.utc_now_iso(now), "leases": leases,
                     "every": every, "by": f"{socket.gethostname()}:{os.getpid()}"})


def last_pass() -> WatchdogPass | None:
    """The last pass recorded here (``None``: none, or unreadable)."""
    data = read_json(state_file(PASS_FILE))
    at, leases, by = moment(data.get("at_epoch")), data.get("leases"), data.get("by")
    if at is None or not isinstance(leases, int) or leases < 0:
        return None
    every = num(data.get("every"))
    return WatchdogPass(at, by if isinstance(by, str) else "?", leases,
                        every if every is not None and every > 0 else None)


#: What the fleet says when no watchdog ever passed here.
NO_WATCHDOG = ("no watchdog seen on this laptop: leases are enforced only by an armed "
               "guard on the box (run gpurent watchdog, or put it in cron)")
