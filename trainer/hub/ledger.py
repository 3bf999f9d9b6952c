"""The Hub ledger of a run, ``RUN/hub.json`` (beside a LibreYOLO run: ``ledger_path``):
which file left the box, when, and where.

Standard library only (``trainer safe`` must answer on a box without huggingface_hub).
The ledger is one JSON object ``{"schema_version": 1, "entries": [...]}``; each entry
describes one file of one push::

    {"file": "best.pt", "path_in_repo": "best.pt", "sha256": "...", "size": 123,
     "repo": "org/name", "commit": "<40 hex>", "epoch": 12, "time": "<ISO-8601 UTC>",
     "inode": 1234, "mtime_ns": 1722420000000000000, "ctime_ns": 1722420000000000000}

The entry of a ``status.json`` also keeps ``status``: the ``state``, ``pid`` and
``completed_epochs`` of the status it pushed (``status_mark``), by which ``trainer safe``
knows a run's final push (the status of its end, written once by the process that ran).

``size``, ``inode``, ``mtime_ns`` and ``ctime_ns`` identify the on-disk file that was
pushed, so ``trainer safe`` can tell that ``weights/best.pt`` is still that very file
without hashing gigabytes. The ctime is what gives away a file rewritten in place with
its mtime put back (``cp -p``, ``rsync -t --inplace``): no one can set it. (A snapshot
hard link changes the original's ctime when it is made and again when it is removed, so
the entry of a linked push never matches and the file is hashed once more, then cached.)
Appends are serialised with an advisory lock (the milestone uploader inside the trainer
and a manual ``trainer push`` may finish at the same moment) and written atomically.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from trainer import engines, runfiles

LEDGER_SCHEMA = 1
LOCK_FILE = ".hub.json.lock"
#: The fields of a pushed ``status.json`` its ledger entry keeps (``status``).
STATUS_MARK = ("state", "pid", "completed_epochs")
#: Bytes read at a time when hashing; a multi-GB checkpoint is never held in memory.
HASH_CHUNK = 1 << 20


class LedgerError(Exception):
    """The ledger exists but cannot be read; the message is one line."""


def sha256_file(path: str | os.PathLike[str], chunk: int = HASH_CHUNK) -> str:
    """The hex sha256 of a file, read ``chunk`` bytes at a time."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def file_identity(path: str | os.PathLike[str]) -> dict[str, int]:
    """``{"size", "inode", "mtime_ns", "ctime_ns"}`` of a file: equal identities mean the
    same bytes (the trainer replaces checkpoints with ``os.replace``, which makes a new
    inode; a write in place moves the ctime, whatever is done to the mtime after)."""
    st = os.stat(path)
    return {"size": st.st_size, "inode": st.st_ino, "mtime_ns": st.st_mtime_ns,
            "ctime_ns": st.st_ctime_ns}


def ledger_path(run_dir: str | os.PathLike[str]) -> Path:
    """``RUN/hub.json``; for a run of another engine (LibreYOLO), whose folder holds no
    file of ours, ``PROJECT/.gpurent/NAME.hub.json`` beside it."""
    inside = Path(run_dir) / runfiles.HUB_FILE
    if inside.exists() or not engines.is_libreyolo_run(run_dir):
        return inside
    return Path(engines.beside_path(run_dir, runfiles.HUB_FILE))


def _lock_path(run_dir: Path) -> Path:
    path = ledger_path(run_dir)
    return run_dir / LOCK_FILE if path.parent == run_dir else Path(f"{path}.lock")


def read_ledger(run_dir: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The ledger's entries, oldest first (``[]`` when there is no ledger yet).

    Raises ``LedgerError`` when the file exists but is not a ledger."""
    path = ledger_path(run_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise LedgerError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise LedgerError(f"{path} is not valid JSON") from exc
    entries = value.get("entries") if isinstance(value, dict) else None
    if not isinstance(entries, list):
        raise LedgerError(f"{path} has no 'entries' list")
    return [e for e in entries if isinstance(e, dict)]


@contextlib.contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    lock_path = _lock_path(run_dir)
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_path, "a+b") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def append_entries(run_dir: str | os.PathLike[str], entries: Sequence[dict[str, Any]]) -> Path:
    """Append ``entries`` to ``RUN/hub.json`` atomically and return its path.

    A ledger that cannot be parsed is kept aside as ``hub.json.corrupt`` rather than
    overwritten, so no history is silently lost."""
    run = Path(run_dir)
    path = ledger_path(run)
    with _locked(run):
        try:
            existing = read_ledger(run)
        except LedgerError:
            os.replace(path, path.with_name(path.name + ".corrupt"))
            existing = []
        runfiles.atomic_write_json(
            path, {"schema_version": LEDGER_SCHEMA, "entries": [*existing, *entries]}
        )
    return path


def status_mark(status: Mapping[str, Any] | None) -> dict[str, Any]:
    """What a ledger entry keeps of a pushed ``status.json``'s fields (``STATUS_MARK``);
    ``{}`` for an unreadable one."""
    return {key: status.get(key) for key in STATUS_MARK} if status else {}


def latest_entry(entries: Sequence[dict[str, Any]], file: str,
                 sha256: str | None = None) -> dict[str, Any] | None:
    """The newest entry for ``file`` (with content ``sha256`` when given), or ``None``."""
    for entry in reversed(entries):
        if entry.get("file") == file and (sha256 is None or entry.get("sha256") == sha256):
            return entry
    return None
