"""The laptop's verified copy as the source of a run resumed elsewhere, when it is newer.

A run's last safe checkpoint is on the Hub (its last milestone) or on this laptop: a
``last.pt`` pulled by ``gpurent pull`` and still what was pulled (the pull ledger's
sha256 and identity, ``remote.weights.lastsafe.laptop_run``), whose epoch is read from
the file itself. The laptop's copy is used when its epoch is newer than the Hub's and
the run's history (``metrics.jsonl`` and ``results.csv``) was pulled with it, reaching
the copy's epoch: else the history would miss the epochs between the Hub's milestone and
the copy. The
copy and its history (trimmed to the copy's epoch, here, so the metrics continue with no
duplicate whatever engine resumes) are uploaded over SFTP, and ``last.pt`` is hashed on
the box against the laptop's sha256.
"""

from __future__ import annotations

import json
import posixpath
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from remote.billing.resume import ResumeFailed
from remote.transport.base import Transport
from remote.weights.lastsafe import HubCopy, LaptopRun, laptop_run
from remote.weights.pull import HISTORY_FILES, local_sha256, remote_sha256
from trainer import runfiles


@dataclass(frozen=True)
class Source:
    """Where the checkpoint comes from: the laptop's ``copy`` (``None``: the Hub), and
    why, in words."""

    copy: LaptopRun | None
    why: str


def choose(hub: HubCopy, name: str, project: str = "") -> Source:
    """The laptop's copy of run ``name`` (of ``project`` on the old box) when it is newer
    than ``hub``'s milestone and its history was pulled, else the Hub; with the reason."""
    copy = laptop_run(name, project)
    hub_epoch = hub.epoch if not hub.error else None
    hub_words = f"the Hub's epoch {hub_epoch}" if hub_epoch is not None else \
        f"the Hub ({hub.error or 'its epoch unknown'})"
    if copy is None:
        return Source(None, "this laptop holds no verified pulled last.pt of the run")
    mine = f"the laptop's copy of epoch {copy.epoch}"
    if hub_epoch is not None and copy.epoch <= hub_epoch:
        return Source(None, f"{hub_words} is as new as {mine} or newer")
    missing = [f for f in HISTORY_FILES if f not in copy.history]
    if missing:
        return Source(None, f"{mine} is newer than {hub_words}, but its history was not "
                            f"pulled with it ({', '.join(missing)}: gpurent pull ... --file "
                            f"last.pt --file {' --file '.join(HISTORY_FILES)})")
    if not reaches(copy.history[runfiles.METRICS_FILE], copy.epoch):
        return Source(None, f"{mine} is newer than {hub_words}, but its pulled history "
                            f"ends before epoch {copy.epoch}")
    return Source(copy, f"{mine} is newer than {hub_words}")


def reaches(metrics: str, epoch: int) -> bool:
    """Whether the local ``metrics.jsonl`` at ``metrics`` holds epochs 1..``epoch``."""
    seen = set()
    try:
        with open(metrics, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                try:
                    row = json.loads(line)
                except ValueError:
                    continue
                if isinstance(row, dict) and isinstance(row.get("epoch"), int):
                    seen.add(row["epoch"])
    except OSError:
        return False
    return seen >= set(range(1, epoch + 1))


def upload_copy(transport: Transport, copy: LaptopRun, run_dir: str) -> None:
    """Put ``copy``'s ``last.pt`` and its history, trimmed to its epoch, into
    ``run_dir`` on the box (replacing what is there); ``ResumeFailed`` when the box's
    ``last.pt`` does not hash as the laptop's."""
    weights = posixpath.join(run_dir, runfiles.WEIGHTS_DIR)
    made = transport.run(f"mkdir -p -- {shlex.quote(weights)}", timeout=30.0)
    if not made.ok:
        raise ResumeFailed(f"cannot make {weights} on {transport.label}")
    with tempfile.TemporaryDirectory(prefix="gpurent-history-") as tmp:
        for name, local in copy.history.items():
            shutil.copyfile(local, Path(tmp) / name)
        runfiles.trim_history(Path(tmp), copy.epoch)
        for name in copy.history:
            transport.upload(str(Path(tmp) / name), posixpath.join(run_dir, name))
    target = posixpath.join(weights, "last.pt")
    transport.upload(copy.local_path, target)
    if remote_sha256(transport, target)[0] != local_sha256(copy.local_path):
        raise ResumeFailed(f"{target} on {transport.label} does not hash as the laptop's "
                           "copy")
