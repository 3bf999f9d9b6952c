"""Milestone pushes during training: a background uploader that never blocks or kills
the training loop.

The engine calls ``on_epoch_end`` after it has saved the epoch's checkpoints. A milestone
(every ``period`` epochs, and every new best) is snapshotted right there, in the caller's
thread, by hard-linking the files into ``RUN/.hub-push-*`` (a few metadata operations):
the trainer replaces checkpoints with ``os.replace``, so the link pins exactly the bytes
of this epoch even if the next epoch replaces ``best.pt`` while the upload runs. The
snapshot then waits in a one-slot queue: a newer milestone replaces a pending one (latest
wins; the replaced snapshot is deleted) and one worker thread pushes whatever is newest.
Where hard links are impossible the worker copies the files instead (the copy is then of
whatever the file holds when the worker gets to it).

Failures are logged and kept for ``status.json``'s ``hub`` key; the next milestone simply
tries again. ``finish`` pushes everything (best, last, summary, results) a last time.
"""

from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import runfiles
from trainer.hub.client import HubError, check_repo_id, import_hub, read_token
from trainer.hub.push import (
    DEFAULT_FILES,
    RunInfo,
    SnapshotSet,
    clean_stale_snapshots,
    push_snapshot,
    read_run_info,
    take_snapshot,
)

MILESTONE_FILES = ("best.pt", "results.csv")
#: What a periodic milestone sends: enough for the run to resume on another box
#: (``last.pt`` holds the optimizer, scheduler, EMA and RNG state) with its history.
PERIOD_FILES = ("best.pt", "last.pt", "results.csv", "status.json", "metrics.jsonl")


@dataclass
class _Milestone:
    epoch: int | None
    info: RunInfo
    snaps: SnapshotSet


class MilestoneUploader:
    """Push ``run_dir``'s weights to ``repo`` at milestones from a background thread.

    ``period``: push every ``period`` epochs (0 or less: only on a new best and at the
    end). The token is ``HF_TOKEN`` from the environment (or the huggingface_hub token
    store); ``token`` and ``endpoint`` exist for callers that hold them explicitly."""

    def __init__(self, run_dir: Path, repo: str, period: int, logger: logging.Logger, *,
                 token: str | None = None, endpoint: str | None = None,
                 public: bool = False) -> None:
        self.run_dir = Path(run_dir)
        self.repo = check_repo_id(repo)
        self.period = period
        self.logger = logger
        self._token = token if token is not None else os.environ.get("HF_TOKEN") or None
        self._endpoint = endpoint
        self._public = public
        self._cond = threading.Condition()
        self._pending: _Milestone | None = None
        self._closed = False
        self._state: dict[str, Any] | None = None
        self._thread: threading.Thread | None = None
        self._best: tuple[int, str | None, float | None] | None = None
        self._last_epoch: int | None = None
        clean_stale_snapshots(self.run_dir)

    # ------------------------------------------------------------------ engine side
    def on_epoch_end(self, epoch: int, is_best: bool, metric_name: str | None,
                     metric: float | None) -> None:
        """Queue a push when ``epoch`` is a milestone. Never blocks on the network and
        never raises: a failure only shows in ``state()`` and the log."""
        self._last_epoch = epoch
        if is_best:
            self._best = (epoch, metric_name, metric)
        periodic = self.period > 0 and epoch % self.period == 0
        if not (is_best or periodic):
            return
        try:
            files = PERIOD_FILES if periodic else MILESTONE_FILES
            self._enqueue(epoch, files, copy=False)
        except Exception as exc:  # never let the Hub take training down
            self._record_error(epoch, f"could not snapshot epoch {epoch}: {exc}")

    def state(self) -> dict[str, Any] | None:
        """The last outcome for ``status.json``'s ``hub`` key: ``{"epoch", "commit",
        "time", "repo"}`` after a push, ``{"error", "time", "epoch"}`` after a failure,
        ``None`` before the first attempt."""
        with self._cond:
            return dict(self._state) if self._state is not None else None

    def finish(self, timeout: float | None = 120.0) -> dict[str, Any] | None:
        """Push every file once more (the final push) and wait up to ``timeout`` seconds
        for the uploads to end; return ``state()``. A push still running after the
        timeout is abandoned with the process (the worker is a daemon thread)."""
        try:
            if self._last_epoch is not None:
                self._enqueue(self._last_epoch, DEFAULT_FILES, copy=True)
        except Exception as exc:
            self._record_error(self._last_epoch, f"could not snapshot the final push: {exc}")
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
            if thread.is_alive():
                self.logger.warning("hub: the final push to %s is still running after %ss; "
                                    "not waiting for it", self.repo, timeout)
        return self.state()

    # ------------------------------------------------------------------ internals
    def _run_info(self, epoch: int | None) -> RunInfo:
        if self._best is not None:
            best_epoch, name, value = self._best
            return RunInfo(epoch=epoch, best_epoch=best_epoch, metric_name=name, metric=value)
        status = read_run_info(self.run_dir)  # resumed run: no best seen in this process
        return RunInfo(epoch=epoch, best_epoch=status.best_epoch,
                       metric_name=status.metric_name, metric=status.metric)

    def _enqueue(self, epoch: int | None, files: tuple[str, ...], *, copy: bool) -> None:
        milestone = _Milestone(epoch, self._run_info(epoch),
                               take_snapshot(self.run_dir, files, copy=copy))
        with self._cond:
            if self._closed:
                milestone.snaps.remove()
                return
            if self._pending is not None:
                self._pending.snaps.remove()  # latest wins
            self._pending = milestone
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="hub-uploader",
                                                daemon=True)
                self._thread.start()
            self._cond.notify_all()

    def _work(self) -> None:
        while True:
            with self._cond:
                while self._pending is None and not self._closed:
                    self._cond.wait()
                milestone, self._pending = self._pending, None
            if milestone is None:
                return
            try:
                self._push(milestone)
            except Exception as exc:  # never let the Hub take training down
                self._record_error(milestone.epoch, str(exc) or type(exc).__name__)
            finally:
                milestone.snaps.remove()

    def _push(self, milestone: _Milestone) -> None:
        hub = import_hub(progress_bars=False)
        hub.utils.logging.set_verbosity_error()
        token = self._token or read_token(use_stdin=False)
        if not token:
            raise HubError("no Hub token: HF_TOKEN is not set in the trainer's environment")
        milestone.snaps.complete()
        result = push_snapshot(self.run_dir, self.repo, token, milestone.snaps, milestone.info,
                               public=self._public, endpoint=self._endpoint,
                               progress_bars=False)
        names = ", ".join(f["file"] for f in result["files"])
        self.logger.info("hub: pushed %s (epoch %s) to %s at %s", names, milestone.epoch,
                         self.repo, result["commit"][:12])
        with self._cond:
            self._state = {"epoch": milestone.epoch, "commit": result["commit"],
                           "time": runfiles.utc_now_iso(), "repo": self.repo}

    def _record_error(self, epoch: int | None, message: str) -> None:
        message = " ".join(message.split())
        self.logger.warning("hub: push of epoch %s failed: %s", epoch, message)
        with self._cond:
            self._state = {"error": message, "time": runfiles.utc_now_iso(), "epoch": epoch}
