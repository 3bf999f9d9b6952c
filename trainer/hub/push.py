"""``python3 -m trainer push RUN_DIR --repo ORG/NAME``: send a run's weights to the Hub
from the box itself, and record what left in ``RUN/hub.json``.

The model repository is created when missing (private unless ``--public``). The token
comes from stdin (``--token-stdin``, how ``gpurent push`` sends it) or ``HF_TOKEN`` /
the huggingface_hub token store on the box; never from argv.

Files are snapshotted first: each one is hard-linked into ``RUN/.hub-push-<pid>-*/``.
The trainer replaces checkpoints with ``os.replace``, which gives the new checkpoint a new
inode, so the link keeps the old bytes intact while they are hashed and uploaded; the
ledger's sha256 is exactly what reached the Hub. Where hard links are impossible the
snapshot is a copy. Another engine's run (LibreYOLO) rewrites checkpoints in place, so a
link would change under the upload, and its folder holds no file of ours: its snapshots
are copies under the box's cache directory (``snapshot_parent``), taken again when the
file changed while it was copied. ``--watch`` (``trainer.hub.autopush``) pushes a run as it
trains. Hashing reads 1 MiB at a time and huggingface_hub streams the upload,
so a multi-GB checkpoint is never held in memory.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer import engines, runfiles
from trainer.health import local_pid_alive
from trainer.hub.client import (
    HubError,
    check_repo_id,
    describe_error,
    import_hub,
)
from trainer.hub.ledger import append_entries, file_identity, sha256_file, status_mark

DEFAULT_FILES = ("best.pt", "last.pt", "summary.json", "results.csv", "status.json",
                 "metrics.jsonl")
SNAPSHOT_PREFIX = ".hub-push-"
#: A snapshot directory's name; group 1 is the pid of the push that made it.
SNAPSHOT_RE = re.compile(rf"^{re.escape(SNAPSHOT_PREFIX)}(\d+)-")


def local_path(run_dir: Path, name: str) -> Path:
    """Where a pushable file lives: checkpoints (``*.pt``) in ``weights/``, the rest in
    the run directory. Raises ``ValueError`` for names that are not plain file names."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise ValueError(f"{name!r} is not a file name (expected e.g. best.pt)")
    if name.endswith(".pt"):
        return run_dir / runfiles.WEIGHTS_DIR / name
    return run_dir / name


def parse_files(text: str) -> tuple[str, ...]:
    """``best.pt,last.pt`` -> ``("best.pt", "last.pt")``, validated, duplicates dropped."""
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names:
        raise ValueError("--files is empty")
    for name in names:
        local_path(Path("."), name)
    return names


@dataclass(frozen=True)
class RunInfo:
    """The epochs a push is labelled with, read cheaply from ``status.json``."""

    epoch: int | None = None
    best_epoch: int | None = None
    metric_name: str | None = None
    metric: float | None = None

    def epoch_of(self, name: str) -> int | None:
        """The epoch a file belongs to: ``best.pt`` is the best epoch's, the rest current."""
        return self.best_epoch if name == "best.pt" else self.epoch


def read_run_info(run_dir: Path) -> RunInfo:
    """Epoch, best epoch and best metric from ``status.json`` (all ``None`` if unreadable),
    with what a final LibreYOLO status drops taken from the last metrics row."""
    read = runfiles.read_status(run_dir)
    if read.ok and read.get("state") != "running":
        read = runfiles.StatusRead(engines.fill_from_history(
            read.fields, engines.last_metrics_row(run_dir)))
    return RunInfo(
        epoch=read.get("completed_epochs"),
        best_epoch=read.get("best_epoch"),
        metric_name=read.get("best_metric_name"),
        metric=read.get("best_metric"),
    )


@dataclass
class Snapshot:
    """One file frozen for upload: ``path`` is a hard link (or copy) of the original."""

    name: str
    path: Path
    #: ``file_identity`` of the original at snapshot time; ``None`` when it changed
    #: while being copied (then ``trainer safe`` always hashes).
    identity: dict[str, int] | None
    sha256: str = ""
    #: For ``status.json``: what the ledger keeps of the run's own file
    #: (``ledger.status_mark``), which the snapshot's settled copy may differ from.
    mark: dict[str, Any] | None = None


@dataclass
class SnapshotSet:
    """The snapshot directory of one push and what it holds."""

    directory: Path
    files: list[Snapshot] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    #: Names whose hard link failed when copying was not allowed (see ``complete``).
    deferred: list[tuple[str, Path]] = field(default_factory=list)

    def complete(self) -> None:
        """Copy the files whose hard link failed (slow for big files: call it off the
        training thread)."""
        for name, src in self.deferred:
            snap = _copy_snapshot(name, src, self.directory / name)
            if snap is None:
                self.missing.append(name)
            else:
                self.files.append(snap)
        self.deferred.clear()

    def remove(self) -> None:
        """Delete the snapshot directory (the originals are untouched)."""
        shutil.rmtree(self.directory, ignore_errors=True)


def _copy_snapshot(name: str, src: Path, dst: Path, tries: int = 3) -> Snapshot | None:
    """Copy ``src``; when it changed during the copy (rewritten in place), copy again."""
    for _ in range(tries):
        try:
            before = file_identity(src)
            shutil.copyfile(src, dst)
        except FileNotFoundError:
            return None
        if file_identity(src) == before:
            return Snapshot(name, dst, before)
    return Snapshot(name, dst, None)


def snapshot_parent(run_dir: Path) -> Path:
    """Where the snapshot directories of a run's pushes go: inside our own run (hard
    links need the same filesystem), under the cache directory for another engine's."""
    if not engines.is_libreyolo_run(run_dir):
        return run_dir
    parent = engines.run_cache(run_dir, "push")
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def take_snapshot(run_dir: Path, names: Sequence[str], *, copy: bool = True) -> SnapshotSet:
    """Freeze ``names`` of ``run_dir`` into a fresh snapshot directory (``snapshot_parent``).
    Missing files are listed, not fatal. Files other than checkpoints (the history, which
    grows in place) are always copied at once. Where a hard link is impossible (or useless:
    another engine rewrites in place) the file is copied, or with ``copy=False`` left in
    ``deferred`` so that this call stays a few metadata operations."""
    parent = snapshot_parent(run_dir)
    directory = Path(tempfile.mkdtemp(prefix=f"{SNAPSHOT_PREFIX}{os.getpid()}-", dir=parent))
    snaps = SnapshotSet(directory)
    for name in names:
        src, dst = local_path(run_dir, name), directory / name
        if not name.endswith(".pt"):  # small, and appended to in place: copied now
            snap = _copy_snapshot(name, src, dst)
            if snap is None:
                snaps.missing.append(name)
            else:
                snaps.files.append(snap)
            continue
        if parent != run_dir:  # copied by complete()
            if src.is_file():
                snaps.deferred.append((name, src))
            else:
                snaps.missing.append(name)
            continue
        try:
            os.link(src, dst)
        except FileNotFoundError:
            snaps.missing.append(name)
            continue
        except OSError:  # no hard links here (some network filesystems)
            snaps.deferred.append((name, src))
            continue
        snaps.files.append(Snapshot(name, dst, file_identity(dst)))
    settle_status(snaps, run_dir)
    if copy:
        snaps.complete()
    return snaps


def settle_status(snaps: SnapshotSet, run_dir: Path) -> None:
    """Make the snapshot's ``status.json`` of an ended run count the run's epochs, not
    its last invocation's (LibreYOLO's final status after a resume counts only its own:
    ``engines.fill_from_history``), from the snapshot's ``metrics.jsonl`` (else the
    run's): the Hub's copy is what a resume elsewhere and the fleet read. The ledger
    keeps the mark of the run's own file, which ``trainer safe`` compares with it."""
    snap = next((f for f in snaps.files if f.name == runfiles.STATUS_FILE), None)
    read = runfiles.read_status(snap.path) if snap is not None else None
    if snap is None or read is None or not read.ok:
        return
    snap.mark = status_mark(read.fields)
    if read.get("state") == "running":
        return
    row = engines.last_metrics_row(snaps.directory) or engines.last_metrics_row(run_dir)
    settled = engines.fill_from_history(read.fields, row)
    if settled != read.fields:
        snap.path.write_text(runfiles.dumps(settled), encoding="utf-8")


def clean_stale_snapshots(run_dir: Path) -> None:
    """Remove snapshot directories left by pushes whose process is gone (killed)."""
    for entry in snapshot_parent(run_dir).glob(f"{SNAPSHOT_PREFIX}*"):
        match = SNAPSHOT_RE.match(entry.name)
        if match and entry.is_dir() and not local_pid_alive(int(match.group(1))):
            shutil.rmtree(entry, ignore_errors=True)


@contextlib.contextmanager
def consistent_snapshot(run_dir: Path, names: Sequence[str],
                        tries: int = 3) -> Iterator[tuple[SnapshotSet, RunInfo]]:
    """A snapshot and the status it belongs to: retaken when ``status.json`` moved on
    while the links were made (a new best landed in between)."""
    for attempt in range(tries):
        before = read_run_info(run_dir)
        snaps = take_snapshot(run_dir, names)
        if read_run_info(run_dir) == before or attempt == tries - 1:
            break
        snaps.remove()
    try:
        yield snaps, before
    finally:
        snaps.remove()


def commit_message(run_name: str, info: RunInfo, names: Sequence[str]) -> str:
    """``run1: epoch 12, best mAP50-95 0.4321 at epoch 10 (best.pt, last.pt)``."""
    parts = [f"{run_name}:"]
    parts.append(f"epoch {info.epoch}," if info.epoch is not None else "weights,")
    if info.metric is not None:
        parts.append(f"best {info.metric_name or 'metric'} {info.metric:.4g}"
                     f" at epoch {info.best_epoch}")
    elif info.best_epoch is not None:
        parts.append(f"best at epoch {info.best_epoch}")
    text = " ".join(parts).rstrip(",")
    return f"{text} ({', '.join(names)})"


def upload(files: Sequence[Snapshot], repo: str, token: str | None, *, message: str,
           public: bool = False, endpoint: str | None = None,
           progress_bars: bool = True) -> tuple[str, str]:
    """Create ``repo`` if missing and commit ``files`` (already hashed) in one commit;
    return ``(commit id, commit url)``. Raises ``HubError``."""
    hub = import_hub(progress_bars)
    try:
        api = hub.HfApi(endpoint=endpoint, token=token)
        api.create_repo(repo, private=not public, exist_ok=True)
        ops = []
        for snap in files:
            op = hub.CommitOperationAdd(path_in_repo=snap.name, path_or_fileobj=str(snap.path))
            op.upload_info.sha256 = bytes.fromhex(snap.sha256)  # spare the client a re-read
            ops.append(op)
        info = api.create_commit(repo, ops, commit_message=message)
    except Exception as exc:  # the client raises many types; all become one line
        cause = exc.__cause__ if isinstance(exc, RuntimeError) and exc.__cause__ else exc
        raise HubError(f"push to {repo} failed: {describe_error(cause, endpoint)}") from exc
    return str(info.oid), str(info.commit_url)


def push_snapshot(run_dir: Path, repo: str, token: str | None, snaps: SnapshotSet,
                  info: RunInfo, *, public: bool = False, endpoint: str | None = None,
                  progress_bars: bool = True) -> dict[str, Any]:
    """Hash, upload and record one snapshot; return the result object of ``--json``."""
    if not snaps.files:
        raise HubError(f"nothing to push: none of {', '.join(snaps.missing)} exists in "
                       f"{run_dir}")
    for snap in snaps.files:
        snap.sha256 = sha256_file(snap.path)
    names = [s.name for s in snaps.files]
    message = commit_message(run_dir.name, info, names)
    commit, url = upload(snaps.files, repo, token, message=message, public=public,
                         endpoint=endpoint, progress_bars=progress_bars)
    now = runfiles.utc_now_iso()
    entries = [{
        "file": snap.name, "path_in_repo": snap.name, "sha256": snap.sha256,
        "size": snap.path.stat().st_size, "repo": repo, "commit": commit,
        "epoch": info.epoch_of(snap.name), "time": now, **(snap.identity or {}),
        **({"status": snap.mark if snap.mark is not None else
            status_mark(runfiles.read_status(snap.path).fields)}
           if snap.name == runfiles.STATUS_FILE else {}),
    } for snap in snaps.files]
    append_entries(run_dir, entries)
    return {"ok": True, "repo": repo, "commit": commit, "commit_url": url,
            "epoch": info.epoch, "best_epoch": info.best_epoch, "message": message,
            "files": entries, "skipped": snaps.missing}


def push_run(run_dir: Path, repo: str, token: str | None,
             files: Sequence[str] = DEFAULT_FILES, *, public: bool = False,
             endpoint: str | None = None, progress_bars: bool = True) -> dict[str, Any]:
    """Push ``files`` of ``run_dir`` to ``repo`` and append the ledger. Raises
    ``ValueError`` for bad input and ``HubError`` when the push fails."""
    check_repo_id(repo)
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir} is not a directory")
    for name in files:
        local_path(run_dir, name)
    clean_stale_snapshots(run_dir)
    with consistent_snapshot(run_dir, files) as (snaps, info):
        return push_snapshot(run_dir, repo, token, snaps, info, public=public,
                             endpoint=endpoint, progress_bars=progress_bars)
