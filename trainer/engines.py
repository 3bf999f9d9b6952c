"""What differs between the engines that write runs (our trainer, ``libreyolo train``)
and where gpurent keeps its own files for a run it did not write.

Standard library only (the box's follower and push watcher use it; so does the laptop).

- **Beside the run, not in it.** LibreYOLO names its run folder itself: an existing
  ``PROJECT/NAME`` makes it train into ``NAME2``. So for a LibreYOLO run the launcher
  creates nothing inside ``PROJECT/NAME``; its own files sit beside it in
  ``PROJECT/.gpurent/``: ``NAME.launch.pid``, ``NAME.console.log`` and, after a stop,
  ``NAME.stop.json``. Readers look inside the run first (our trainer's layout), then
  beside it.
- **What LibreYOLO drops.** Its final ``status.json`` (completed, or failed on SIGINT)
  drops ``best_metric_name``, ``metrics``, ``mean_epoch_seconds`` and, when failed,
  ``completed_epochs`` and ``best_*``: :func:`fill_from_history` takes them from the last
  ``metrics.jsonl`` row.
- **Its checkpoints are written in place** (``torch.save`` to the final name): a SIGINT
  or a reader can meet a partial file. A torch checkpoint is a zip, whose end record is
  written last: :func:`checkpoint_torn` tells a cut one from its first and last bytes.
- **Caches of ours** go under the box's cache directory (:func:`cache_dir`), never into a
  run directory.
"""

from __future__ import annotations

import hashlib
import json
import os
import posixpath
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainer import runfiles

ENGINES = ("trainer", "libreyolo")
#: The ``model_family`` our trainer writes in status.json (LibreYOLO writes its model's,
#: e.g. ``yolox``): how a reader tells the engine of a run from its status alone.
OUR_FAMILY = "gpdet"


def engine_of(status: Mapping[str, Any]) -> str | None:
    """``trainer`` or ``libreyolo`` for a run's status.json, ``None`` when it does not
    say (no ``model_family``)."""
    family = status.get("model_family")
    if not isinstance(family, str) or not family:
        return None
    return "trainer" if family == OUR_FAMILY else "libreyolo"
#: The folder beside the runs of a project that holds the launcher's files for runs of
#: engines that name their run folder themselves.
BESIDE_DIR = ".gpurent"
#: Suffixes of the files kept there for run ``NAME``: ``NAME.<suffix>``.
BESIDE_PID = runfiles.LAUNCH_PID_FILE
BESIDE_CONSOLE = runfiles.CONSOLE_FILE
BESIDE_STOP = "stop.json"
#: The most of ``NAME.stop.json`` read (it lists every checkpoint's size and mtime).
MAX_MARK_BYTES = 1 << 20
#: LibreYOLO's record of the resolved training arguments.
TRAIN_CONFIG_FILE = "train_config.yaml"
#: Engines that rename an existing run folder (their launch files go beside it).
RENAMING = ("libreyolo",)
#: Our caches on the box: ``$GPURENT_CACHE_DIR`` or ``~/.cache/gpurent``.
CACHE_ENV = "GPURENT_CACHE_DIR"
#: ``cache_dir()`` as a shell expression (for the scripts that read it on the box).
CACHE_DIR_SHELL = f'"${{{CACHE_ENV}:-$HOME/.cache/gpurent}}"'
#: Bytes at the end of a zip that hold its end-of-central-directory record (no comment).
ZIP_END_BYTES = 22
_ZIP_START, _ZIP_END = b"PK\x03\x04", b"PK\x05\x06"


def beside_path(run_dir: str | os.PathLike[str], suffix: str) -> str:
    """``PROJECT/.gpurent/NAME.<suffix>`` for the run directory ``PROJECT/NAME``."""
    parent, name = posixpath.split(os.fspath(run_dir).rstrip("/") or "/")
    return posixpath.join(parent, BESIDE_DIR, f"{name}.{suffix}")


def launch_files(run_dir: str | os.PathLike[str]) -> list[tuple[str, str]]:
    """Where a launched run's ``(launch.pid, console.log)`` may be, in the order to look:
    inside the run (our trainer), then beside it (engines that rename)."""
    inside = os.fspath(run_dir)
    return [(posixpath.join(inside, runfiles.LAUNCH_PID_FILE),
             posixpath.join(inside, runfiles.CONSOLE_FILE)),
            (beside_path(inside, BESIDE_PID), beside_path(inside, BESIDE_CONSOLE))]


def local_launch_files(run_dir: str | os.PathLike[str]) -> tuple[str, str]:
    """The pair of :func:`launch_files` that exists on this machine (default: inside)."""
    pairs = launch_files(run_dir)
    for pair in pairs:
        if os.path.exists(pair[0]) or os.path.exists(pair[1]):
            return pair
    return pairs[0]


def read_stop_mark(run_dir: str | os.PathLike[str]) -> int | None:
    """The pid in the run's ``NAME.stop.json`` on this machine (``None``: none)."""
    try:
        with open(beside_path(run_dir, BESIDE_STOP), "rb") as fh:
            return parse_stop(fh.read(MAX_MARK_BYTES))
    except OSError:
        return None


def stop_mark_key(run_dir: str | os.PathLike[str]) -> str:
    """A string that changes when ``gpurent stop`` marks the run (for a change key)."""
    try:
        st = os.stat(beside_path(run_dir, BESIDE_STOP))
    except OSError:
        return ""
    return f":stop:{st.st_mtime_ns}:{st.st_size}"


def cache_dir() -> Path:
    """The box's cache directory for gpurent (created by whoever writes into it)."""
    override = os.environ.get(CACHE_ENV)
    return Path(override) if override else Path.home() / ".cache" / "gpurent"


def run_key(run_dir: str | os.PathLike[str]) -> str:
    """A file name for one run directory in our caches: its resolved path, hashed, after
    its name (for people who look)."""
    path = Path(run_dir).resolve()
    digest = hashlib.sha256(str(path).encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{path.name[:40]}-{digest}"


def run_cache(run_dir: str | os.PathLike[str], kind: str) -> Path:
    """``CACHE/<kind>/<run key>``: where a cache of ours for this run lives."""
    return cache_dir() / kind / run_key(run_dir)


# ------------------------------------------------------------------ LibreYOLO's files


def is_libreyolo_run(run_dir: str | os.PathLike[str]) -> bool:
    """Whether a run directory on this machine was written by LibreYOLO (it writes
    ``train_config.yaml`` before anything else; our trainer never does)."""
    return (Path(run_dir) / TRAIN_CONFIG_FILE).is_file()


def _typed(key: str, value: Any) -> bool:
    types = runfiles.STATUS_TYPES.get(key)
    return (value is not None and types is not None and isinstance(value, types)
            and not (isinstance(value, bool) and bool not in types))


def fill_from_history(fields: Mapping[str, Any] | None,
                      row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``status.json``'s fields with what LibreYOLO drops at the end (``completed_epochs``
    and the ``progress`` it gives, ``best_metric``, ``best_metric_name``, ``best_epoch``,
    ``metrics``) taken from the last ``metrics.jsonl`` row; other keys the status has are
    kept as they are, and a row value of the wrong type is ignored."""
    if fields is None:
        return None
    out = dict(fields)
    if not isinstance(row, Mapping):
        return out
    # JSON values, their types checked by _typed before use.
    done: Any = out.get("completed_epochs")
    epoch: Any = row.get("epoch")
    # LibreYOLO's final status drops completed_epochs on SIGINT, and after a resume
    # counts only that invocation's epochs; the history's last epoch is the run's.
    if _typed("completed_epochs", epoch) and (done is None or (
            isinstance(done, int) and epoch > done and out.get("state") != "running")):
        out["completed_epochs"] = epoch
        total: Any = out.get("total_epochs")
        if _typed("total_epochs", total) and total > 0:
            out["progress"] = min(1.0, row["epoch"] / total)
    for key in ("best_metric", "best_metric_name", "best_epoch"):
        if out.get(key) is None and _typed(key, row.get(key)):
            out[key] = row[key]
    if not out.get("metrics"):
        metrics = {k.removeprefix("metrics/"): v for k, v in row.items()
                   if isinstance(k, str) and k.startswith("metrics/")}
        if metrics:
            out["metrics"] = metrics
    return out


def last_metrics_row(run_dir: str | os.PathLike[str],
                     tail: int = 65536) -> dict[str, Any] | None:
    """The last whole row of ``RUN/metrics.jsonl`` on this machine (``None``: none)."""
    try:
        with open(Path(run_dir) / runfiles.METRICS_FILE, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - tail))
            data = fh.read(tail)
    except OSError:
        return None
    if size > tail:
        data = data[data.find(b"\n") + 1:]
    rows = runfiles.parse_metrics(data).rows
    return rows[-1] if rows else None


def parse_stop(data: bytes) -> int | None:
    """The pid in ``NAME.stop.json`` (written by ``gpurent stop`` before it signals)."""
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    pid = value.get("pid") if isinstance(value, dict) else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 else None


def checkpoint_torn(head: bytes, tail: bytes) -> bool:
    """Whether a checkpoint was cut short: it starts as a zip (torch's format since 1.6)
    but its last bytes are not the zip's end record. A file of another format is not
    judged (``False``)."""
    if not head.startswith(_ZIP_START):
        return False
    return not (len(tail) >= ZIP_END_BYTES and tail[-ZIP_END_BYTES:].startswith(_ZIP_END))


def file_torn(path: str | os.PathLike[str]) -> bool:
    """:func:`checkpoint_torn` for a file on this machine (``False`` when unreadable)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
            size = os.fstat(fh.fileno()).st_size
            fh.seek(max(0, size - ZIP_END_BYTES))
            tail = fh.read(ZIP_END_BYTES)
    except OSError:
        return False
    return checkpoint_torn(head, tail)


def parse_train_config(text: str, limit: int = 200) -> dict[str, str]:
    """The top-level ``key: value`` pairs of ``train_config.yaml`` (``yaml.dump`` output;
    the box may have no PyYAML): a block list becomes ``[a, b]``. At most ``limit`` keys."""
    out: dict[str, str] = {}
    items: dict[str, list[str]] = {}
    last = None
    for line in text.splitlines():
        if line.startswith("- ") and last is not None:
            items.setdefault(last, []).append(line[2:].strip())
        elif line[:1].strip() and not line.startswith("#") and ":" in line:
            if len(out) >= limit:
                break
            key, _, value = line.partition(":")
            last = key.strip()
            out[last] = value.strip()
    for key, values in items.items():
        out[key] = f"[{', '.join(values)}]"
    return out
