"""Typed events a ``remote.watch.watcher.Watcher`` delivers to its callback (the TUI turns
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
    #: The box's clock minus this laptop's, as measured when the follower said hello
    #: (0 when unknown): the status's timestamps are the box's.
    skew: float = 0.0

    def box_time(self, laptop_now: float) -> float:
        """``laptop_now`` (this laptop's clock) on the box's clock, the clock of the
        status's ``updated_at`` and ``started_at``."""
        return laptop_now + self.skew


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
    seconds), ``reconnecting`` (attempt ``attempt``), ``blocked`` (trying again cannot work
    until a person acts: a refused login, a changed or untrusted host key, a setting to
    fix; ``detail`` says what; nothing is tried until ``reconnect_now``), ``polling``
    (SFTP fallback, no python on the box), ``limited`` (a cap on the box's stream
    tripped: said once per cap, see ``remote.watch.caps``) or ``closed``. ``detail`` is
    one line for the user."""

    state: str
    detail: str = ""
    silent_for: float = 0.0
    attempt: int = 0
    #: ``blocked`` by a host key that changed: the name its old key is filed under and
    #: the ``known_hosts`` file (what forgetting the old key takes).
    forget: tuple[str, str] | None = None


@dataclass(frozen=True)
class RunsEvent:
    """The project's runs as the follower listed them (``remote.runs.read.RunInfo`` objects,
    newest first): the whole list each time, after merging the follower's changes."""

    project: str
    runs: list[Any]


@dataclass(frozen=True)
class ChosenEvent:
    """The box chose the run to follow (none was named); ``None``: the project has no run."""

    run_dir: str | None


@dataclass(frozen=True)
class GuardEvent:
    """``guard.json`` or its acknowledgement changed, or the guard process came or went:
    the ``remote.runs.guard.GuardState`` (``None``: no guard was ever armed for the run)."""

    state: Any


@dataclass(frozen=True)
class WeightFile:
    """One ``*.pt`` of the run's ``weights/`` as the box sees it."""

    name: str
    size: int
    mtime_ns: int
    ino: int


@dataclass(frozen=True)
class WeightsEvent:
    """The run's weight files changed (added, removed, rewritten)."""

    files: tuple[WeightFile, ...]


@dataclass(frozen=True)
class HubEvent:
    """The run's ``hub.json`` changed: ``ledger`` is its JSON (``None``: missing or
    unreadable, ``error`` says which)."""

    ledger: Any
    error: str = ""


WatchEvent = (StatusEvent | MetricsEvent | LogEvent | GpuEvent | HostEvent | ConnectionEvent
              | RunsEvent | ChosenEvent | GuardEvent | WeightsEvent | HubEvent)
