"""The runs of one reached box, read for the glance page on one SSH connection: each
run's status and health in one exec (``remote.runs.status.quick_read``, as ``gpurent
status`` reads it), the end of its ``metrics.jsonl`` and of its ``train.log`` (ranged
reads, capped: ``remote.glance.shape``). A file whose size and mtime did not change
since the last pass is not read again."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field
from typing import Any

from remote.glance.shape import MAX_LOG_BYTES, MAX_METRICS_BYTES, flat_object, metrics_table
from remote.runs.status import quick_read
from remote.transport.base import Transport, TransportError
from trainer import runfiles
from trainer.text import one_line

#: A file's identity between passes: (size, mtime).
Signature = tuple[int, float]


@dataclass(frozen=True)
class RunSeen:
    """One run as last read from its box: its status (bounded), health, history table
    and log tail; ``read_at`` on this laptop's clock."""

    run_dir: str
    status: dict[str, Any]
    health: str
    reason: str
    pid_alive: bool | None
    read_at: float
    metrics: dict[str, Any] = field(default_factory=lambda: metrics_table([]))
    metrics_sig: Signature | None = None
    log: bytes = b""
    log_sig: Signature | None = None


def _tail(transport: Transport, path: str, cap: int) -> tuple[bytes, Signature | None,
                                                                 bool]:
    """The last ``cap`` bytes of ``path`` (``b""`` when missing), its signature, and
    whether the start was cut (the first, partial line is then dropped)."""
    st = transport.stat(path)
    if st is None:
        return b"", None, False
    start = max(0, st.size - cap)
    data = transport.read(path, start, cap)
    if start:
        data = data[data.find(b"\n") + 1:]
    return data, (st.size, st.mtime), bool(start)


def read_one(transport: Transport, run_dir: str, before: RunSeen | None,
             now: float) -> RunSeen:
    """``run_dir`` on ``transport``'s box now (``TransportError``, one line, when it
    cannot be read there). The history and the log are read before the status, so the
    status is never behind the chart."""
    metrics_path = posixpath.join(run_dir, runfiles.METRICS_FILE)
    st = transport.stat(metrics_path)
    sig = None if st is None else (st.size, st.mtime)
    if before is not None and sig is not None and before.metrics_sig == sig:
        table = before.metrics
    elif sig is None:
        table = metrics_table([])
    else:
        data, sig, _cut = _tail(transport, metrics_path, MAX_METRICS_BYTES)
        chunk = runfiles.parse_metrics(data)
        table = metrics_table(chunk.rows, chunk.skipped)
    log_path = posixpath.join(run_dir, runfiles.LOG_FILE)
    st = transport.stat(log_path)
    log_sig = None if st is None else (st.size, st.mtime)
    if before is not None and log_sig is not None and before.log_sig == log_sig:
        log = before.log
    else:
        log, log_sig, _cut = _tail(transport, log_path, MAX_LOG_BYTES)
    run, _guard, _extras = quick_read(transport, run_dir)
    status = flat_object(run.read.fields) if run.read.ok and run.read.fields else {}
    return RunSeen(run_dir, status, run.health.verdict, one_line(run.health.reason, 300),
                   run.pid_alive, now, table, sig, log, log_sig)


def read_runs(transport: Transport, run_dirs: list[str], before: dict[str, RunSeen],
              now: float) -> dict[str, RunSeen | str]:
    """Each of ``run_dirs`` read (``read_one``), or why it could not be."""
    out: dict[str, RunSeen | str] = {}
    for run_dir in run_dirs:
        try:
            out[run_dir] = read_one(transport, run_dir, before.get(run_dir), now)
        except (TransportError, OSError) as exc:
            out[run_dir] = one_line(exc, 300)
    return out
