"""Small JSON files in the laptop's state directory (beside ``boxes.json``), read and
replaced under an exclusive ``flock`` so that two commands (two watchdogs, a lease set
while the watchdog runs) never lose each other's writes.

A state file may be damaged (a hand edit, a disk that filled, another tool): what cannot
be read is nothing recorded, said once per file on stderr, never a traceback. A file
that cannot be read at all is kept aside (``NAME.unreadable``) before it is replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from remote.config import state_path
from remote.fields import num
from trainer import runfiles

#: The largest state file read (a damaged one can be any size).
MAX_STATE_BYTES = 8 << 20
#: Deeper values than this are not the laptop's own (and the JSON encoder would fail on
#: a deep enough one when the file is written back).
MAX_DEPTH = 16
#: The last moment a state file may name: 9999-12-31 (a date can still show it).
LAST_MOMENT = 253402300799.0
T = TypeVar("T")
_told: set[str] = set()
#: What the last read of each file could not read (files read whole are absent).
_damage: dict[str, str] = {}


def state_file(name: str) -> Path:
    """``STATE/name`` (``remote.config.state_path``'s directory)."""
    return state_path().parent / name


def say_unreadable(path: Path, why: str) -> None:
    """Tell on stderr, once per file in this process, that part of ``path`` could not
    be read (``why``) and counts as nothing recorded."""
    if str(path) in _told:
        return
    _told.add(str(path))
    print(f"gpurent: {path}: {why}; read as nothing recorded", file=sys.stderr)


def damage(path: Path) -> str:
    """What the last read of ``path`` in this process could not read ("" when it read
    the file whole, or never read it)."""
    return _damage.get(str(path), "")


def _note(path: Path, why: str) -> None:
    """Remember (and say, once) what this read of ``path`` could not read."""
    if why:
        _damage[str(path)] = why
        say_unreadable(path, why)
    else:
        _damage.pop(str(path), None)


def moment(value: Any) -> float | None:
    """A JSON number as epoch seconds from 1970 to :data:`LAST_MOMENT`; ``None`` for
    anything else."""
    number = num(value)
    return number if number is not None and 0 <= number <= LAST_MOMENT else None


def _shallow(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` nests no deeper than ``limit`` (counted without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, (dict, list)):
            if depth > limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _load(path: Path) -> tuple[dict[str, Any], str]:
    """The file's object without its too-deep entries, and what could not be read
    (``""``: all of it; a missing file is nothing recorded, not a fault)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_STATE_BYTES + 1)
    except FileNotFoundError:
        return {}, ""
    except OSError as exc:
        return {}, f"unreadable ({exc.strerror or type(exc).__name__})"
    if len(raw) > MAX_STATE_BYTES:
        return {}, f"larger than {MAX_STATE_BYTES >> 20} MiB"
    try:
        data = json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        return {}, "not JSON"
    if not isinstance(data, dict):
        return {}, "not a JSON object"
    deep = [key for key, value in data.items() if not _shallow(value)]
    for key in deep:
        data.pop(key)
    return data, f"{_entries(len(deep))} nested too deep" if deep else ""


def read_json(path: Path) -> dict[str, Any]:
    """The file's object, ``{}`` when it is missing or not a JSON object (said once)."""
    data, why = _load(path)
    _note(path, why)
    return data


def read_entries(path: Path, parse: Callable[[str, Any], T | None]) -> dict[str, T]:
    """Each entry of the file's object that ``parse(key, value)`` reads (``None``: it
    cannot), by key; what could not be read is said once, in one line."""
    data, why = _load(path)
    found: dict[str, T] = {}
    bad: list[str] = []
    for key, value in data.items():
        try:
            entry = parse(key, value)
        except (TypeError, ValueError, OverflowError):  # a parser's miss: never fatal
            entry = None
        if entry is None:
            bad.append(key)
        else:
            found[key] = entry
    if bad:
        why = "; ".join(filter(None, [why, f"{_entries(len(bad))} unreadable ("
                                           f"{', '.join(repr(k[:40]) for k in bad[:3])}"
                                           f"{', ...' if len(bad) > 3 else ''})"]))
    _note(path, why)
    return found


def _entries(count: int) -> str:
    return f"{count} entr{'y' if count == 1 else 'ies'}"


@contextlib.contextmanager
def locked_json(name: str) -> Iterator[dict[str, Any]]:
    """``STATE/name``'s object under an exclusive lock; what the block leaves in the dict
    is written back atomically (mode 600) when it changed. A file that could not be read
    as a whole is first kept aside as ``NAME.unreadable``."""
    path = state_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data, why = _load(path)
        if why:
            say_unreadable(path, why)
        before = json.dumps(data, sort_keys=True)
        yield data
        if json.dumps(data, sort_keys=True) != before:
            if why:
                with contextlib.suppress(OSError):
                    os.replace(path, path.with_name(f"{name}.unreadable"))
            runfiles.atomic_write_json(path, data)
            os.chmod(path, 0o600)
