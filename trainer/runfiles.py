"""The run-directory contract (schema_version 1), shared with LibreYOLO.

Standard library only: this module runs on a box that has nothing but ``python3`` (to
watch a run written by ``libreyolo train``) and on the laptop. One run is one directory;
see ``shared/DESIGN.md`` for the table of files. The writer half is used by our trainer,
the reader half by the follower, the headless CLI and the TUI. Readers never raise on
bad input: they return an ``unreadable`` result with a one-line reason.
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer.text import one_line

SCHEMA_VERSION = 1

STATUS_FILE = "status.json"
METRICS_FILE = "metrics.jsonl"
RESULTS_FILE = "results.csv"
SUMMARY_FILE = "summary.json"
LOG_FILE = "train.log"
HUB_FILE = "hub.json"
WEIGHTS_DIR = "weights"
#: Written by the launcher beside the run's own files: the pid it started (first word,
#: then its start time), and the run's stdout and stderr, where an error before
#: status.json ends up.
LAUNCH_PID_FILE = "launch.pid"
CONSOLE_FILE = "console.log"
#: Runs launched through gpurent, one absolute path a line, under the box's home.
RUN_REGISTRY = ".cache/gpurent/runs.txt"
RUN_REGISTRY_ENV = "GPURENT_RUN_REGISTRY"
#: The registry's path as a shell expression (for the scripts that read it on the box).
REGISTRY_SHELL = f'"${{{RUN_REGISTRY_ENV}:-$HOME/{RUN_REGISTRY}}}"'

#: A status.json larger than this is refused: the real one is a few hundred bytes.
MAX_STATUS_BYTES = 4 * 1024 * 1024
#: The most epochs a run can have here: a larger count read from a file is a lie (and
#: one of 10**12 would exhaust memory, or overflow a float, in what counts them).
MAX_EPOCHS = 10**6

LOG_FORMAT = "%(asctime)s | %(levelname)-8s | %(message)s"
LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"

_INT = (int,)
_NUM = (int, float)
_STR = (str,)
_OBJ = (dict,)

#: Expected JSON types of the status keys we read. ``None`` is always accepted.
STATUS_TYPES: dict[str, tuple[type, ...]] = {
    "schema_version": _INT,
    "state": _STR,
    "pid": _INT,
    "model_family": _STR,
    "model_size": _STR,
    "task": _STR,
    "save_dir": _STR,
    "total_epochs": _INT,
    "start_epoch": _INT,
    "started_at": _STR,
    "updated_at": _STR,
    "completed_epochs": _INT,
    "current_epoch": _INT,
    "progress": _NUM,
    "elapsed_seconds": _NUM,
    "epoch_seconds": _NUM,
    "mean_epoch_seconds": _NUM,
    "eta_seconds": _NUM,
    "train_loss": _NUM,
    "metrics": _OBJ,
    "validated": (bool,),
    "current_metric": _NUM,
    "current_metric_name": _STR,
    "best_metric": _NUM,
    "best_metric_name": _STR,
    "best_epoch": _INT,
    "total_seconds": _NUM,
    "checkpoints": _OBJ,
    "error": (dict, str),
    # Our additions; readers tolerate their absence.
    "pid_start": _INT,
    "boot_id": _STR,
    "host": (dict, str),
    "batch": _INT,
    "imgsz": (int, list),
    "world_size": _INT,
    "hub": _OBJ,
}


# --------------------------------------------------------------------------- writing


def milestone_period(epochs: int, hub_period: int = 0) -> int:
    """Epochs between the Hub pushes that let a run resume on another box: ``hub_period``,
    or when it is 0 a tenth of the run and at most 10 epochs, so an interruption loses at
    most about a tenth of the run, and at most 10 epochs, of work."""
    if hub_period > 0:
        return hub_period
    return max(1, min(10, math.ceil(epochs / 10)))


def trim_history(run_dir: Path, last_epoch: int) -> int:
    """Drop ``metrics.jsonl`` and ``results.csv`` rows after ``last_epoch`` (written after
    the checkpoint a resume starts from), so the history has one row per epoch. Returns
    the number of metrics rows dropped. Files are replaced atomically, and neither when
    ``results.csv`` cannot be read: ``ValueError`` (one line) then."""
    results = run_dir / RESULTS_FILE
    rows = []
    if results.exists():
        try:
            rows = list(csv.reader(io.StringIO(results.read_text(encoding="utf-8"))))
        except (UnicodeDecodeError, csv.Error) as exc:
            raise ValueError(f"{RESULTS_FILE} cannot be read: {one_line(exc, 200)}") from None
    dropped = 0
    metrics = run_dir / METRICS_FILE
    if metrics.exists():
        kept = []
        for line in metrics.read_bytes().splitlines(keepends=True):
            epoch = row_epoch(line)
            if epoch is not None and epoch > last_epoch:
                dropped += 1
            elif line.endswith(b"\n"):  # a torn last line (crash mid-write) goes too
                kept.append(line)
        if dropped or sum(map(len, kept)) != metrics.stat().st_size:
            atomic_write_bytes(metrics, b"".join(kept))
    if rows:
        header, body = rows[0], rows[1:]
        col = header.index("epoch") if "epoch" in header else None
        keep = [r for r in body if col is None or not _after(r, col, last_epoch)]
        if len(keep) != len(body):
            buf = io.StringIO()
            csv.writer(buf, lineterminator="\n").writerows([header, *keep])
            atomic_write_bytes(results, buf.getvalue().encode("utf-8"))
    return dropped


def row_epoch(line: bytes) -> int | None:
    """The ``epoch`` of one ``metrics.jsonl`` line; ``None`` when it is not a row (nested
    too deep included) or has no integer epoch."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    epoch = row.get("epoch") if isinstance(row, dict) else None
    return epoch if isinstance(epoch, int) else None


def results_problem(path: Path) -> str:
    """Why ``results.csv`` at ``path`` cannot be read as rows (a field over ``csv``'s
    limit, not UTF-8); ``""`` when it can."""
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            for _row in csv.reader(fh):
                pass
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        return one_line(exc, 200)
    return ""


def _after(row: list[str], col: int, last_epoch: int) -> bool:
    try:
        return int(row[col]) > last_epoch
    except (IndexError, ValueError):
        return False


def utc_now_iso(now: float | None = None) -> str:
    """Return ``now`` (default: the current time) as ISO-8601 UTC with a ``Z`` suffix."""
    moment = datetime.fromtimestamp(time.time() if now is None else now, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_iso(text: str) -> float | None:
    """Parse an ISO-8601 timestamp (``Z`` or an offset; naive means UTC) to epoch seconds."""
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.timestamp()


def finite_json(value: Any) -> Any:
    """Return ``value`` with every non-finite float (NaN, inf) replaced by ``None``."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): finite_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_json(v) for v in value]
    return value


def dumps(value: Any) -> str:
    """Serialise to strict JSON (no NaN tokens), non-finite floats as null."""
    return json.dumps(finite_json(value), allow_nan=False, ensure_ascii=False, default=str)


def atomic_save(path: str | os.PathLike[str], save: Callable[[str], None]) -> None:
    """Write a file atomically: ``save(tmp_path)`` writes a temp file, which then replaces
    ``path``. A reader sees the old file or the new one, never half of either. The temp
    file sits in the same directory so that ``os.replace`` never crosses filesystems."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    try:
        save(tmp)
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Atomically replace ``path`` with ``data``."""

    def save(tmp: str) -> None:
        with open(tmp, "wb") as fh:
            fh.write(data)

    atomic_save(path, save)


def atomic_write_json(path: str | os.PathLike[str], value: Any) -> None:
    """Atomically replace ``path`` with ``value`` as strict JSON (non-finite floats as null)."""
    atomic_write_bytes(path, (dumps(value) + "\n").encode("utf-8"))


def train_log_handler(run_dir: str | os.PathLike[str]) -> logging.Handler:
    """A handler that appends to ``RUN/train.log`` as ``YYYY-MM-DD HH:MM:SS | LEVEL    | msg``."""
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(Path(run_dir) / LOG_FILE, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(LOG_FORMAT, LOG_DATEFMT))
    return handler


class RunWriter:
    """Writes the files of one run directory. Every method is cheap and crash-safe:
    status and summary are replaced atomically, rows are appended whole and flushed."""

    def __init__(self, run_dir: str | os.PathLike[str]) -> None:
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / WEIGHTS_DIR).mkdir(exist_ok=True)
        self._csv_columns: list[str] | None = None

    @property
    def weights_dir(self) -> Path:
        """The ``weights/`` directory of this run."""
        return self.run_dir / WEIGHTS_DIR

    def write_status(self, status: Mapping[str, Any]) -> None:
        """Replace ``status.json``; ``schema_version`` and ``updated_at`` are filled in."""
        body = {"schema_version": SCHEMA_VERSION, **status, "updated_at": utc_now_iso()}
        atomic_write_json(self.run_dir / STATUS_FILE, body)

    def append_metrics(self, row: Mapping[str, Any]) -> None:
        """Append one epoch row to ``metrics.jsonl`` and ``results.csv``."""
        line = (dumps(row) + "\n").encode("utf-8")
        with open(self.run_dir / METRICS_FILE, "ab") as fh:
            fh.write(line)
            fh.flush()
        self._append_csv(row)

    def _append_csv(self, row: Mapping[str, Any]) -> None:
        path = self.run_dir / RESULTS_FILE
        columns = self._csv_columns
        if columns is None:
            columns = _existing_csv_columns(path)
        new_file = columns is None
        if columns is None:
            keys = [k for k in row if not isinstance(row[k], (dict, list))]
            columns = ["epoch", *[k for k in keys if k != "epoch"]]
        self._csv_columns = columns
        buf = io.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        if new_file:
            writer.writerow(columns)
        writer.writerow([_csv_cell(row.get(col)) for col in columns])
        with open(path, "a", encoding="utf-8", newline="") as fh:
            fh.write(buf.getvalue())

    def write_summary(self, summary: Mapping[str, Any]) -> None:
        """Replace ``summary.json``."""
        atomic_write_json(self.run_dir / SUMMARY_FILE, summary)


def _existing_csv_columns(path: Path) -> list[str] | None:
    try:
        with open(path, encoding="utf-8", newline="") as fh:
            header = next(csv.reader(fh), None)
    except (OSError, UnicodeDecodeError):
        return None
    return header or None


def _csv_cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else ""
    return str(value)


# --------------------------------------------------------------------------- reading


@dataclass(frozen=True)
class StatusRead:
    """The outcome of reading ``status.json``: the object, or ``None`` and a reason."""

    fields: dict[str, Any] | None
    reason: str = ""
    #: No status.json at all (as opposed to one that cannot be read).
    missing: bool = False

    @property
    def ok(self) -> bool:
        """Whether a usable status object was read."""
        return self.fields is not None

    def get(self, key: str, default: Any = None) -> Any:
        """A key of the status object, or ``default`` when unreadable or missing."""
        return default if self.fields is None else self.fields.get(key, default)


def epoch_count(value: Any) -> int | None:
    """``value`` when it is a believable epoch count (an int in 0..``MAX_EPOCHS``)."""
    fits = isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_EPOCHS
    return value if fits else None


def _reject_constant(token: str) -> Any:
    raise ValueError(f"holds {token}, which is not JSON")


def parse_status(data: bytes) -> StatusRead:
    """Validate the bytes of a ``status.json``. Never raises."""
    if len(data) > MAX_STATUS_BYTES:
        return StatusRead(None, f"status.json is {len(data)} bytes, over the "
                                f"{MAX_STATUS_BYTES} byte limit")
    if not data.strip():
        return StatusRead(None, "status.json is empty")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return StatusRead(None, f"status.json is not UTF-8 (byte {exc.start})")
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:
        return StatusRead(None, f"status.json is not valid JSON: {one_line(exc, 200)}")
    except RecursionError:
        return StatusRead(None, "status.json is nested too deeply")
    if not isinstance(value, dict):
        return StatusRead(None, f"status.json holds a {type(value).__name__}, not an object")
    for key, types in STATUS_TYPES.items():
        item = value.get(key)
        if item is None:
            continue
        if (isinstance(item, bool) and bool not in types) or not isinstance(item, types):
            wanted = " or ".join(sorted({_json_type(t) for t in types}))
            return StatusRead(None, f"status.json: {key!r} should be {wanted}, "
                                    f"got {_json_type(type(item))}")
    return StatusRead(value)


def read_status(run_dir: str | os.PathLike[str]) -> StatusRead:
    """Read ``RUN/status.json`` (or a path to the file itself). Never raises."""
    path = Path(run_dir)
    if path.is_dir():
        path = path / STATUS_FILE
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_STATUS_BYTES + 1)
    except FileNotFoundError:
        return StatusRead(None, f"no status.json in {path.parent}", missing=True)
    except OSError as exc:
        return StatusRead(None, f"cannot read {path}: {exc.strerror or exc}")
    return parse_status(data)


def _json_type(t: type) -> str:
    return {int: "an integer", float: "a number", str: "a string", dict: "an object",
            list: "a list", bool: "true/false", type(None): "null"}.get(t, t.__name__)


@dataclass
class MetricsChunk:
    """Rows parsed from ``metrics.jsonl`` and where to resume reading."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    next_offset: int = 0
    skipped: int = 0
    reset: bool = False


def parse_metrics(data: bytes, offset: int = 0) -> MetricsChunk:
    """Parse whole lines of ``metrics.jsonl`` bytes that start at byte ``offset``.

    A trailing line without its newline is left for the next read (``next_offset``
    stops before it). Lines that are not a JSON object are skipped and counted."""
    end = data.rfind(b"\n") + 1
    chunk = MetricsChunk(next_offset=offset + end)
    for raw in data[:end].splitlines():
        if not raw.strip():
            continue
        try:
            row = json.loads(raw.decode("utf-8"), parse_constant=lambda _t: None)
        except (ValueError, UnicodeDecodeError, RecursionError):
            chunk.skipped += 1
            continue
        if isinstance(row, dict):
            chunk.rows.append(row)
        else:
            chunk.skipped += 1
    return chunk


def read_metrics(run_dir: str | os.PathLike[str], offset: int = 0,
                 max_bytes: int = 16 * 1024 * 1024) -> MetricsChunk:
    """Read new rows of ``RUN/metrics.jsonl`` from byte ``offset``. Never raises.

    When the file shrank below ``offset`` (truncated or replaced), reading restarts at 0
    and ``reset`` is set so the caller can drop what it had."""
    path = Path(run_dir) / METRICS_FILE
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            reset = size < offset
            start = 0 if reset else offset
            fh.seek(start)
            data = fh.read(max_bytes)
    except OSError:
        return MetricsChunk(next_offset=offset)
    chunk = parse_metrics(data, start)
    chunk.reset = reset
    return chunk


# --------------------------------------------------------------------------- health
