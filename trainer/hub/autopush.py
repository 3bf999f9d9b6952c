"""``python3 -m trainer push --watch RUN_DIR --repo ORG/NAME [--pid PID]``: push a run's
weights to the Hub from the box while it trains, whatever engine writes it.

``gpurent launch`` starts it beside an engine that cannot push by itself (LibreYOLO; our
trainer pushes from inside with ``hub=``). It polls the run directory:

- each new best (a ``metrics.jsonl`` row with ``is_best``: the engine wrote ``best.pt``
  before the row) pushes ``best.pt`` and ``results.csv``;
- each milestone (every ``--period`` epochs; 0: ``runfiles.milestone_period`` of the
  run's ``total_epochs``, as our trainer's ``hub_period``) pushes ``last.pt`` with the
  history (``status.json``, ``metrics.jsonl``, ``results.csv``, ``train_config.yaml``)
  and ``best.pt``, so that ``trainer restore`` can continue the run on another box. The
  engine writes ``last.pt`` before the epoch's row and status: the snapshot is pushed only
  when ``last.pt`` is older than ``status.json`` and neither moved while it was taken
  (else ``last.pt`` may be a later epoch's than the history's: tried at the next poll);
- when the run ends (a final state, or its pid gone) it pushes once more everything there
  is (``best.pt``, ``last.pt``, ``summary.json``, ``results.csv``, the history), leaving
  out a checkpoint the stop cut short, then exits. That final push goes at once, whatever
  the backoff of an earlier failed push, and a failed one is tried again for up to
  ``FINAL_PATIENCE`` seconds: until it commits, the Hub's copy of the run says an earlier
  epoch, still ``running``.

Each push goes through ``trainer.hub.push`` (a snapshot first, the same ``hub.json``
ledger). A failed push (the Hub's refusal, or a snapshot or ledger that could not be
written) is tried again at later polls. While the watcher lives,
``CACHE/watchers/<run>/<pid>`` says so: the guard waits for its final push
(``trainer.hub.safe.push_in_flight``), and ``trainer safe`` calls an ended run's weights
safe only once that push is in the ledger. The token: ``--token-stdin``, ``HF_TOKEN`` or the
huggingface_hub store. Standard library, plus huggingface_hub for the upload itself.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trainer import engines, runfiles
from trainer.health import local_pid_alive
from trainer.hub.client import HubError, describe_error
from trainer.hub.ledger import LedgerError, latest_entry, read_ledger
from trainer.hub.push import DEFAULT_FILES, consistent_snapshot, local_path, push_snapshot

BEST_FILES = ("best.pt", "results.csv")
#: LibreYOLO's resolved arguments: on the Hub it also says which engine wrote the run.
CONFIG_FILE = engines.TRAIN_CONFIG_FILE
MILESTONE_FILES = ("best.pt", "last.pt", "results.csv", runfiles.STATUS_FILE,
                   runfiles.METRICS_FILE, CONFIG_FILE)
FINAL_FILES = (*DEFAULT_FILES, CONFIG_FILE)
#: Seconds between tries of a push that failed (doubling up to the cap).
RETRY_FIRST, RETRY_CAP = 5.0, 120.0
#: Seconds after the run's end that a failed final push is still tried again (the guard
#: waits as long for it by default: ``trainer guard --push-wait``). A watcher that lives
#: on keeps the box from counting as idle, so it does give up.
FINAL_PATIENCE = 900.0
ENDED = ("completed", "failed", "stopped")

log = logging.getLogger("trainer.hub.autopush")


def live_watchers(run_dir: Path) -> list[int]:
    """Pids of the push watchers of ``run_dir`` that are alive."""
    where = engines.run_cache(run_dir, "watchers")
    pids = []
    with contextlib.suppress(OSError):
        for entry in where.iterdir():
            if entry.name.isdigit() and local_pid_alive(int(entry.name)):
                pids.append(int(entry.name))
    return pids


@contextlib.contextmanager
def registered(run_dir: Path) -> Iterator[None]:
    """Mark this process as a watcher of ``run_dir`` while the block runs."""
    mark = engines.run_cache(run_dir, "watchers") / str(os.getpid())
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.write_text(f"{run_dir}\n", encoding="utf-8")
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            mark.unlink()


def torn_files(run_dir: Path) -> set[str]:
    """Checkpoints not to push: those that end without a zip's end record, and those the
    stop mark names as cut short while they are still the file it judged (not written
    since the mark: the stop writes it once the stopped process is gone, so a later write
    is a resumed run's own checkpoint, and an earlier run's mark says nothing of it)."""
    torn: set[str] = set()
    weights = run_dir / runfiles.WEIGHTS_DIR
    path = Path(engines.beside_path(run_dir, engines.BESIDE_STOP))
    with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
        marked = path.stat().st_mtime_ns
        for name in json.loads(path.read_text()).get("torn") or []:
            with contextlib.suppress(OSError, ValueError):
                if isinstance(name, str) and (weights / name).stat().st_mtime_ns <= marked:
                    torn.add(name)
    for name in ("best.pt", "last.pt"):
        if engines.file_torn(weights / name):
            torn.add(name)
    return torn


class RunWatch:
    """The state of one watched run: where ``metrics.jsonl`` was read to, the newest best
    epoch seen and the one pushed."""

    def __init__(self, run_dir: Path, pid: int | None, period: int = 0) -> None:
        self.run_dir = run_dir
        self.pid = pid
        self.period = period
        self.offset = 0
        self.best_seen: int | None = None
        self.best_pushed = pushed_best_epoch(run_dir)
        self.milestone_pushed = pushed_epoch(run_dir, "last.pt")

    def poll_rows(self) -> None:
        """Read new rows; note the newest ``is_best`` epoch."""
        chunk = runfiles.read_metrics(self.run_dir, self.offset)
        if chunk.reset:
            self.best_seen = None
        self.offset = chunk.next_offset
        for row in chunk.rows:
            epoch = row.get("epoch")
            if row.get("is_best") is True and isinstance(epoch, int):
                self.best_seen = epoch

    def status(self) -> runfiles.StatusRead:
        """This run's status: one that names another pid than ``--pid`` is an earlier
        run's (a resume relaunched into the folder) and reads as missing."""
        read = runfiles.read_status(self.run_dir)
        if self.pid is not None and read.ok and read.get("pid") != self.pid:
            return runfiles.StatusRead(None, "an earlier run's status.json", missing=True)
        return read

    def ended(self) -> str | None:
        """Why the run is over (``None``: it is not)."""
        read = self.status()
        state = read.get("state")
        if state in ENDED:
            return f"state {state}"
        pid = read.get("pid") if read.ok else self.pid
        if isinstance(pid, int) and not isinstance(pid, bool) and not local_pid_alive(pid):
            return f"pid {pid} is gone" + ("" if read.ok else " before it wrote its status")
        return None

    def milestone_due(self) -> int | None:
        """The completed epoch to push as a milestone, when one is due: the status (this
        run's) passed a multiple of the period since the last ``last.pt`` pushed (or,
        first, since the epoch the run started from)."""
        read = self.status()
        done, total = read.get("completed_epochs"), read.get("total_epochs")
        if read.get("state") != "running" or not isinstance(done, int) \
                or not isinstance(total, int) or done <= 0:
            return None
        base = self.milestone_pushed
        if base is None:
            start = read.get("start_epoch")
            base = start - 1 if isinstance(start, int) and start > 0 else 0
        period = runfiles.milestone_period(total, self.period)
        return done if done // period > base // period else None

    @property
    def best_pending(self) -> bool:
        """Whether a best newer than the last pushed one is waiting."""
        return self.best_seen is not None and (self.best_pushed is None
                                               or self.best_seen > self.best_pushed)


def pushed_best_epoch(run_dir: Path) -> int | None:
    """The epoch of the newest ``best.pt`` in the ledger (a watcher started again does not
    push it twice)."""
    return pushed_epoch(run_dir, "best.pt")


def pushed_epoch(run_dir: Path, name: str) -> int | None:
    """The epoch of the newest ``name`` in the ledger."""
    try:
        entry = latest_entry(read_ledger(run_dir), name)
    except LedgerError:
        return None
    epoch = None if entry is None else entry.get("epoch")
    return epoch if isinstance(epoch, int) else None


def push_files(run_dir: Path, repo: str, token: str, names: tuple[str, ...],
               endpoint: str | None) -> dict[str, Any]:
    """Snapshot and push ``names`` (the ones that exist); raises ``HubError``."""
    with consistent_snapshot(run_dir, names) as (snaps, info):
        return push_snapshot(run_dir, repo, token, snaps, info, endpoint=endpoint,
                             progress_bars=False)


def stamps(run_dir: Path) -> tuple[int, int, int] | None:
    """``status.json``'s mtime, ``last.pt``'s mtime and size (ns, bytes); ``None`` when
    one is missing."""
    try:
        status = (run_dir / runfiles.STATUS_FILE).stat()
        last = (run_dir / runfiles.WEIGHTS_DIR / "last.pt").stat()
    except OSError:
        return None
    return status.st_mtime_ns, last.st_mtime_ns, last.st_size


def push_milestone(run_dir: Path, repo: str, token: str, endpoint: str | None
                   ) -> dict[str, Any] | None:
    """Push ``last.pt`` with the history when ``last.pt`` belongs to the epoch of the
    status (older than it, and neither moved while the snapshot was taken); ``None``
    when it may not (an epoch is being saved: try again). Raises ``HubError``."""
    before = stamps(run_dir)
    if before is None or before[1] > before[0] or "last.pt" in torn_files(run_dir):
        return None
    names = tuple(n for n in MILESTONE_FILES if n not in torn_files(run_dir))
    with consistent_snapshot(run_dir, names) as (snaps, info):
        if stamps(run_dir) != before:
            return None
        return push_snapshot(run_dir, repo, token, snaps, info, endpoint=endpoint,
                             progress_bars=False)


def watch(run_dir: Path, repo: str, token: str, *, pid: int | None = None,
          poll: float = 2.0, period: int = 0, endpoint: str | None = None,
          sleep: Callable[[float], None] = time.sleep,
          clock: Callable[[], float] = time.monotonic) -> int:
    """Watch and push until the run ends and its final push is done; the exit code (0:
    the final push was made, 1: it failed for ``FINAL_PATIENCE`` seconds or the run never
    started). ``sleep`` and ``clock`` (monotonic seconds) pace the polls and retries."""
    state = RunWatch(run_dir, pid, period)
    retry_at, delay, ended_at = 0.0, RETRY_FIRST, None
    log.info("watching %s, pushing to %s", run_dir, repo)
    while True:
        state.poll_rows()
        ended = state.ended()
        now = clock()
        if ended is not None:
            state.poll_rows()  # the rows written just before the end
            if not state.status().ok:
                log.error("the run ended (%s): nothing to push", ended)
                return 1
            if ended_at is None:  # the final push goes now, not after a best's backoff
                ended_at, retry_at, delay = now, 0.0, RETRY_FIRST
        milestone = state.milestone_due() if ended is None and now >= retry_at else None
        if milestone is not None:
            try:
                result = push_milestone(run_dir, repo, token, endpoint)
            except (HubError, OSError) as exc:
                log.warning("milestone push failed: %s", describe_error(exc))
                retry_at, delay = now + delay, min(delay * 2, RETRY_CAP)
            else:
                if result is not None:
                    log.info("milestone at epoch %d: pushed %s to %s at %s", milestone,
                             ", ".join(e["file"] for e in result["files"]), repo,
                             result["commit"][:12])
                    state.milestone_pushed = milestone
                    state.best_pushed = state.best_seen or state.best_pushed
                    retry_at, delay = 0.0, RETRY_FIRST
        if now >= retry_at and (ended is not None or state.best_pending):
            names: tuple[str, ...] = FINAL_FILES if ended is not None else BEST_FILES
            names = tuple(n for n in names if n not in torn_files(run_dir))
            if ended is not None and not any(local_path(run_dir, n).is_file() for n in names):
                log.info("the run ended (%s) with nothing to push", ended)
                return 0
            try:
                result = push_files(run_dir, repo, token, names, endpoint)
            except (HubError, OSError) as exc:
                log.warning("push failed: %s", describe_error(exc))
                retry_at, delay = now + delay, min(delay * 2, RETRY_CAP)
                if ended_at is not None and clock() - ended_at >= FINAL_PATIENCE:
                    log.error("giving up the final push %.0f s after the run ended",
                              clock() - ended_at)
                    return 1
            else:
                pushed = ", ".join(e["file"] for e in result["files"])
                log.info("pushed %s to %s at %s: %s", pushed, repo, result["commit"][:12],
                         result["message"])
                state.best_pushed = state.best_seen or state.best_pushed
                retry_at, delay = 0.0, RETRY_FIRST
                if ended is not None:
                    log.info("the run ended (%s): final push done", ended)
                    return 0
        sleep(poll)


def main(args: Any, token: str) -> int:
    """``trainer push --watch`` (arguments parsed by ``trainer.hub.push``)."""
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter(runfiles.LOG_FORMAT, runfiles.LOG_DATEFMT))
    with contextlib.suppress(AttributeError, ValueError):
        sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    with contextlib.suppress(HubError):
        from trainer.hub.client import import_hub

        import_hub(progress_bars=False).utils.logging.set_verbosity_error()
    run_dir = Path(args.run_dir).absolute()
    with registered(run_dir):
        return watch(run_dir, args.repo, token, pid=args.pid, poll=args.poll,
                     period=args.period)
