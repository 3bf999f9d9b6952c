"""What the engine tells the run directory: ``train.log`` (the run's logger),
``status.json``, ``metrics.jsonl`` / ``results.csv`` rows and ``summary.json``, through
:class:`trainer.runfiles.RunWriter`.

Status fields carry over from one write to the next, so the final status still holds
the last metrics. Writing is telemetry: an ``OSError`` is logged and training goes on
(checkpoints, which matter, fail loudly elsewhere). The time spent writing is measured,
for the benchmark that keeps it under 1 % of an epoch.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

from trainer.runfiles import LOG_DATEFMT, LOG_FORMAT, RunWriter, train_log_handler, utc_now_iso


def open_log(run_dir: Any, rank: int = 0) -> logging.Logger:
    """The run's logger: ``train.log`` in the run directory and the console. The other
    ranks of a multi-process run log warnings and errors to the console only."""
    log = logging.getLogger("trainer.run")
    log.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    log.propagate = False
    close_log(log)
    console = logging.StreamHandler(sys.stdout)
    if rank == 0:
        log.addHandler(train_log_handler(run_dir))
        console.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
    else:
        console.setFormatter(logging.Formatter(f"rank {rank} | {LOG_FORMAT}", LOG_DATEFMT))
    log.addHandler(console)
    return log


def close_log(log: logging.Logger) -> None:
    """Flush and detach the run's log handlers."""
    for handler in list(log.handlers):
        handler.close()
        log.removeHandler(handler)


def error_message(exc: BaseException, limit: int = 500) -> str:
    """An exception's message on one line. A loader worker's error carries the worker's
    traceback in its message; its last line is the original message."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[-1] if lines else type(exc).__name__
    if len(lines) > 1:  # the traceback's last line repeats the type: "pkg.Error: message"
        for prefix in (f"{type(exc).__module__}.{type(exc).__qualname__}: ",
                       f"{type(exc).__qualname__}: "):
            text = text.removeprefix(prefix)
    return text[:limit]


class RunReport:
    """Keeps ``status.json`` up to date and appends the per-epoch history. Without a
    writer (the other ranks of a multi-process run) it keeps the fields and writes
    nothing."""

    def __init__(self, writer: RunWriter | None, base: Mapping[str, Any], log: logging.Logger,
                 hub_state: Callable[[], dict[str, Any] | None] = lambda: None) -> None:
        self.writer = writer
        self.log = log
        self.hub_state = hub_state
        self.started = time.time()
        self.fields: dict[str, Any] = {**base, "started_at": utc_now_iso(self.started)}
        self.epoch_seconds: list[float] = []
        self.write_seconds = 0.0

    def _timed(self, what: str, action: Callable[[], None]) -> None:
        if self.writer is None:
            return
        t0 = time.perf_counter()
        try:
            action()
        except OSError as exc:
            self.log.warning("could not write %s: %s", what, exc)
        finally:
            self.write_seconds += time.perf_counter() - t0

    def status(self, **fields: Any) -> None:
        """Update fields and rewrite ``status.json`` (progress and times derived here)."""
        self.fields.update(fields)
        total = self.fields.get("total_epochs") or 0
        done = self.fields.get("completed_epochs") or 0
        self.fields["progress"] = min(1.0, done / total) if total else 0.0
        self.fields["elapsed_seconds"] = round(time.time() - self.started, 3)
        self.fields["hub"] = self.hub_state()
        self._timed("status.json", lambda: self.writer.write_status(self.fields))

    def epoch_end(self, row: Mapping[str, Any], *, epoch: int, metrics: Mapping[str, float],
                  train_loss: float | None) -> None:
        """Append the epoch's row and write the running status."""
        seconds = float(row["time"])
        self.epoch_seconds.append(seconds)
        mean = sum(self.epoch_seconds) / len(self.epoch_seconds)
        remaining = max(0, (self.fields.get("total_epochs") or 0) - epoch)
        self._timed("metrics", lambda: self.writer.append_metrics(row))
        self.status(state="running", current_epoch=epoch, completed_epochs=epoch,
                    epoch_seconds=seconds, mean_epoch_seconds=mean,
                    eta_seconds=mean * remaining, train_loss=train_loss,
                    metrics=dict(metrics), validated=row["validated"],
                    current_metric=row["current_metric"],
                    current_metric_name=row["current_metric_name"],
                    best_metric=row["best_metric"], best_metric_name=row["best_metric_name"],
                    best_epoch=row["best_epoch"])

    def ending(self, state: str, *, checkpoints: Mapping[str, str | None],
               error: Mapping[str, str] | None = None) -> None:
        """The final status: ``completed``, ``stopped`` or ``failed``."""
        extra: dict[str, Any] = {"eta_seconds": 0.0} if state == "completed" else {}
        if error is not None:
            extra["error"] = dict(error)
        self.status(state=state, total_seconds=round(time.time() - self.started, 3),
                    checkpoints=dict(checkpoints), **extra)

    def summary(self, body: Mapping[str, Any]) -> None:
        """Write ``summary.json``."""
        self._timed("summary.json", lambda: self.writer.write_summary(body))
