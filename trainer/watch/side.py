"""The run's side files for the follower: ``hub.json`` (what left for the Hub),
``guard.json`` with its acknowledgement and whether the guard process still runs, and the
identity of each weight file (name, size, mtime, inode). Each is sent when it changes, so
the laptop's badges follow them without asking over another connection. Looked at once a
``interval`` (a second), not at every poll. Standard library only."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from trainer import runfiles
from trainer.guard.state import GUARD_ACK, GUARD_FILE, read_guard

#: A side file larger than this is not sent (its message says so).
MAX_SIDE_BYTES = 1 << 20


def _key(path: Path) -> str:
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def read_json(path: Path) -> tuple[Any, str | None]:
    """``(value, None)`` or ``(None, why)``; a missing file is ``(None, None)``."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_SIDE_BYTES + 1)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"cannot read {path.name}: {exc.strerror or exc}"
    if len(data) > MAX_SIDE_BYTES:
        return None, f"{path.name} is over {MAX_SIDE_BYTES} bytes"
    try:
        return runfiles.finite_json(json.loads(data.decode("utf-8"))), None
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, f"{path.name} is not valid JSON"


def weight_files(weights: Path) -> list[dict[str, Any]]:
    """Every ``*.pt`` in ``weights/`` with its size, mtime (ns) and inode, by name."""
    found = []
    try:
        entries = list(os.scandir(weights))
    except OSError:
        return []
    for entry in entries:
        if not entry.name.endswith(".pt"):
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        found.append({"name": entry.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                      "ino": st.st_ino})
    return sorted(found, key=lambda f: f["name"])


class SideFiles:
    """Produces ``hub``, ``guard`` and ``weights`` messages for one run directory."""

    def __init__(self, run_dir: Path, interval: float = 1.0) -> None:
        self.run_dir = run_dir
        self.interval = interval
        self._next = 0.0
        self._hub: str | None = None
        self._guard: tuple[str, str, bool] | None = None
        self._weights: list[dict[str, Any]] | None = None

    def poll(self, now: float) -> Iterator[dict[str, Any]]:
        """The messages for what changed, at most once per ``interval``."""
        if now < self._next:
            return
        self._next = now + self.interval
        key = _key(self.run_dir / runfiles.HUB_FILE)
        if key != self._hub:
            self._hub = key
            value, why = read_json(self.run_dir / runfiles.HUB_FILE)
            message = {"t": "hub", "key": key, "hub": value}
            yield {**message, "error": why} if why else message
        yield from self._guard_message()
        files = weight_files(self.run_dir / runfiles.WEIGHTS_DIR)
        if files != self._weights:
            self._weights = files
            yield {"t": "weights", "files": files}

    def _guard_message(self) -> Iterator[dict[str, Any]]:
        key = _key(self.run_dir / GUARD_FILE)
        ack_key = _key(self.run_dir / GUARD_ACK)
        guard = read_guard(self.run_dir) if key != "missing" else None
        alive = bool(guard and guard.pop("alive", False))
        if (key, ack_key, alive) == self._guard:
            return
        self._guard = (key, ack_key, alive)
        ack = read_json(self.run_dir / GUARD_ACK)[0] if guard else None
        yield {"t": "guard", "key": key, "guard": runfiles.finite_json(guard),
               "alive": alive, "ack": ack if isinstance(ack, dict) else None}
