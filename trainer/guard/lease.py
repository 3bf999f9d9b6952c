"""The lease the laptop left on the box (``gpurent lease TARGET 6h`` writes
``CACHE/lease.json``, ``CACHE`` being ``$GPURENT_CACHE_DIR`` or ``~/.cache/gpurent``): a
deadline after which the guard ends the instance's billing, as the off-box watchdog
does from the laptop. The deadline is the laptop's, moved onto this box's clock: the
seconds it had left when written, from the file's mtime. Standard library only (Python
3.9)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from trainer import engines

#: The lease file's name in the box's cache directory (the laptop writes it there).
LEASE_FILE = "lease.json"
#: What a lease does when it runs out.
THEN = ("stop", "destroy")


def parse_lease(data: Any) -> dict[str, Any] | None:
    """The lease in ``data`` (a parsed ``lease.json``, or an entry of the laptop's
    ``leases.json``): the object when its ``until`` (epoch seconds) is a finite number
    and its ``then`` (default ``stop``) one of :data:`THEN`, else ``None``. The one
    reader of a lease's JSON, on the box and on the laptop."""
    if not isinstance(data, dict) or data.get("then", "stop") not in THEN:
        return None
    until = data.get("until")
    if isinstance(until, bool) or not isinstance(until, (int, float)):
        return None
    try:
        return data if math.isfinite(float(until)) else None
    except OverflowError:
        return None


def read_lease(path: Path | None = None) -> dict[str, Any] | None:
    """The lease object, or ``None`` when there is none (or it is not readable). Its
    ``deadline`` is on this box's clock: the laptop's ``left`` (seconds, when it was
    written) counted from the file's mtime, else ``until`` (the laptop's clock)."""
    where = path or engines.cache_dir() / LEASE_FILE
    try:
        data = parse_lease(json.loads(where.read_text(encoding="utf-8")[:4096]))
        written = where.stat().st_mtime
    except (OSError, ValueError):
        return None
    if data is None:
        return None
    left = data.get("left")
    data["deadline"] = written + left if isinstance(left, (int, float)) and \
        not isinstance(left, bool) else float(data["until"])
    return data


def lease_passed(provider: str | None, instance: str | None,
                 now: float | None = None,
                 path: Path | None = None) -> str | None:
    """Why the lease says to act now (its deadline passed), else ``None``. A lease
    written for another instance (a copied home) is not this box's."""
    lease = read_lease(path)
    if lease is None:
        return None
    target = lease.get("target")
    if provider and instance and isinstance(target, str) and target != f"{provider}:{instance}":
        return None
    now = time.time() if now is None else now
    if now < lease["deadline"]:
        return None
    return f"the lease ran out at {lease.get('until_at') or lease['until']}"
