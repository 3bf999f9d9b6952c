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

from remote.billing.statefile import finite, locked_json, moment, read_json, state_file
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
    return Record(episode, finite(data.get("start")), data.get("settled") is True, at,
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
        last = finite(told.get(key))
        if last is not None and 0 <= now - last < every:
            return False
        told[key] = now
        return True


def forget_told(keys: set[str]) -> None:
    """Drop the told times of alarms that no longer hold (a later one is told at once)."""
    with locked_json(TOLD_FILE) as told:
        for key in [k for k in told if k not in keys]:
            told.pop(key)
