"""The record of the glance page running on this laptop (``STATE/glance.json``, mode
0600: its URL with the token, its pid), which ``gpurent glance --url``, the TUI's key and
the watchdog read. Standard library and ``remote.config`` only: reading it costs a
process nothing else."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from remote.config import state_path
from trainer.health import local_pid_alive

#: The record's name, beside the laptop's other state.
RECORD = "glance.json"


def record_path() -> Path:
    """``STATE/glance.json``."""
    return state_path().parent / RECORD


def write_private(path: Path, data: dict[str, object]) -> None:
    """``data`` as JSON at ``path``, created mode 0600 and moved into place whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
    os.replace(temp, path)


def _alive(pid: object) -> bool:
    """Whether ``pid`` is a live ``gpurent glance`` on this machine (a pid reused by
    another program is not)."""
    if not isinstance(pid, int) or isinstance(pid, bool) or not local_pid_alive(pid):
        return False
    with contextlib.suppress(OSError):
        return b"glance" in Path(f"/proc/{pid}/cmdline").read_bytes()
    return True


def running_url() -> str | None:
    """The URL (with its token) of the glance server running on this laptop, or
    ``None`` when none runs."""
    try:
        data = json.loads(record_path().read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("url"), str):
        return None
    return data["url"] if _alive(data.get("pid")) else None


