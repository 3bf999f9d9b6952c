"""Typed events a ``remote.watcher.Watcher`` delivers to its callback (the TUI turns
them into Textual messages, ``gpurent follow`` into JSON lines)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.health import Health
from trainer.runfiles import StatusRead


@dataclass(frozen=True)
class StatusEvent:
    """The run's ``status.json`` changed (or its health verdict did)."""

    read: StatusRead
    health: Health
    pid_alive: bool | None
    received_at: float
    #: The end of console.log while the run has no status.json (``""`` otherwise).
    console: str = ""


@dataclass(frozen=True)
class MetricsEvent:
    """New ``metrics.jsonl`` rows. ``reset``: the file was replaced, drop earlier rows."""

    rows: list[dict[str, Any]]
    next_offset: int
    skipped: int = 0
    reset: bool = False


@dataclass(frozen=True)
class LogEvent:
    """Bytes of ``train.log`` starting at byte ``offset``. ``reset``: the log was
    truncated or rotated and these bytes start a new file."""

    data: bytes
    offset: int
    reset: bool = False


@dataclass(frozen=True)
class GpuSample:
    """One GPU's figures from one ``nvidia-smi`` query (``None`` where not reported)."""

    index: int
    name: str
    util_percent: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None


@dataclass(frozen=True)
class GpuEvent:
    """A GPU stats sample for every GPU on the box."""

    gpus: list[GpuSample] = field(default_factory=list)
    received_at: float = 0.0


@dataclass(frozen=True)
class HostEvent:
    """The box's CPU busy % (``None`` until two samples), CPU count and RAM in use, from
    its ``/proc`` (the follower's ``host`` message)."""

    cpu_percent: float | None
    cpus: int | None
    mem_used_mib: float | None
    mem_total_mib: float | None
    received_at: float = 0.0


@dataclass(frozen=True)
class ConnectionEvent:
    """The watcher's link to the box: ``live``, ``stale`` (no data for ``silent_for``
    seconds), ``reconnecting`` (attempt ``attempt``), ``polling`` (SFTP fallback, no python
    on the box), ``limited`` (a cap on the box's stream tripped: said once per cap, see
    ``remote.messages``) or ``closed``. ``detail`` is one line for the user."""

    state: str
    detail: str = ""
    silent_for: float = 0.0
    attempt: int = 0


WatchEvent = (StatusEvent | MetricsEvent | LogEvent | GpuEvent | HostEvent
              | ConnectionEvent)
