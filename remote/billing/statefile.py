"""Small JSON files in the laptop's state directory (beside ``boxes.json``), read and
replaced under an exclusive ``flock`` so that two commands (two watchdogs, a lease set
while the watchdog runs) never lose each other's writes."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from remote.config import state_path
from trainer import runfiles


def state_file(name: str) -> Path:
    """``STATE/name`` (``remote.config.state_path``'s directory)."""
    return state_path().parent / name


def read_json(path: Path) -> dict[str, Any]:
    """The file's object, ``{}`` when it is missing or not a JSON object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


@contextlib.contextmanager
def locked_json(name: str) -> Iterator[dict[str, Any]]:
    """``STATE/name``'s object under an exclusive lock; what the block leaves in the dict
    is written back atomically (mode 600) when it changed."""
    path = state_file(name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        data = read_json(path)
        before = json.dumps(data, sort_keys=True)
        yield data
        if json.dumps(data, sort_keys=True) != before:
            runfiles.atomic_write_json(path, data)
            os.chmod(path, 0o600)
