"""The laptop's verified copy as the source of a run resumed elsewhere, when it is newer.

A run's last safe checkpoint is on the Hub (its last milestone) or on this laptop: a
``last.pt`` pulled by ``gpurent pull`` and still what was pulled (the pull ledger's
sha256 and identity, ``remote.weights.lastsafe.laptop_run``), whose epoch is read from
the file itself. The laptop's copy is used when its epoch is newer than the Hub's (or the
Hub offers no epoch of the run: it cannot be asked, or its ``last.pt`` is another run's,
``remote.weights.lastsafe.hub_copy``) and the run's history (``metrics.jsonl`` and
``results.csv``) was pulled with it, reaching the copy's epoch: else the history would
miss the epochs between the Hub's milestone and the copy. The copy and its history
(trimmed to the copy's epoch, here, so the metrics continue with no duplicate whatever
engine resumes) are uploaded over SFTP, and ``last.pt`` is hashed on the box against the
laptop's sha256.
"""

from __future__ import annotations

import os
import posixpath
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from remote.resume.resume import ResumeFailed
from remote.transport.base import Transport
from remote.weights.lastsafe import HubCopy, LaptopRun, laptop_run
from remote.weights.pull import HISTORY_FILES, local_sha256, remote_sha256
from trainer import runfiles
from trainer.text import one_line

#: A pulled ``metrics.jsonl`` or ``results.csv`` larger than this is refused: a real one
#: is about a kilobyte an epoch.
MAX_HISTORY_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Source:
    """Where the checkpoint comes from: the laptop's ``copy`` (``None``: the Hub), and
    why, in words."""

    copy: LaptopRun | None
    why: str


def choose(hub: HubCopy, name: str, project: str = "") -> Source:
    """The laptop's copy of run ``name`` (of ``project`` on the old box) when it is newer
    than ``hub``'s milestone of the run (or the Hub offers no epoch of the run) and its
    history was pulled, else the Hub; with the reason."""
    unreadable: list[str] = []
    copy = laptop_run(name, project, unreadable)
    hub_epoch = hub.epoch if not hub.error else None
    if copy is None:
        return Source(None, f"this laptop's pulled last.pt of the run cannot be read: "
                            f"{unreadable[0]}" if unreadable else
                            "this laptop holds no verified pulled last.pt of the run")
    mine = f"the laptop's copy of epoch {copy.epoch}"
    if hub_epoch is not None and copy.epoch <= hub_epoch:
        return Source(None, f"the Hub's epoch {hub_epoch} is as new as {mine} or newer")
    unknown = hub.error or "the status pushed with the Hub's last.pt names no epoch"
    newer = f"{mine} is newer than the Hub's epoch {hub_epoch}" if hub_epoch is not None \
        else f"{mine} has no Hub epoch of the run to compare with ({unknown})"
    missing = [f for f in HISTORY_FILES if f not in copy.history]
    if missing:
        return Source(None, f"{newer}, but its history was not pulled with it "
                            f"({', '.join(missing)}: gpurent pull ... --file last.pt --file "
                            f"{' --file '.join(HISTORY_FILES)})")
    problem = history_problem(copy.history, copy.epoch)
    if problem:
        return Source(None, f"{newer}, but {problem}")
    return Source(copy, newer)


def history_problem(history: dict[str, str], epoch: int) -> str:
    """Why the pulled ``history`` (file name -> local path) cannot go with a checkpoint
    of ``epoch``, as ``its pulled ...``; ``""`` when it can. Each file is checked under
    ``MAX_HISTORY_BYTES`` first, which bounds what reading it may take."""
    for name, path in history.items():
        try:
            size = os.stat(path).st_size
        except OSError as exc:
            return f"its pulled {name} cannot be read: {one_line(exc.strerror or exc, 120)}"
        if size > MAX_HISTORY_BYTES:
            return f"its pulled {name} is {size} bytes, over the {MAX_HISTORY_BYTES} byte cap"
    if not reaches(history[runfiles.METRICS_FILE], epoch):
        return f"its pulled history ends before epoch {epoch}"
    why = runfiles.results_problem(Path(history[runfiles.RESULTS_FILE]))
    return f"its pulled {runfiles.RESULTS_FILE} cannot be read: {why}" if why else ""


def reaches(metrics: str, epoch: int) -> bool:
    """Whether the local ``metrics.jsonl`` at ``metrics`` holds epochs 1..``epoch`` (a
    line that is not a row, nested too deep included, counts for none)."""
    seen: set[int] = set()
    try:
        with open(metrics, "rb") as fh:
            for line in fh:
                row_epoch = runfiles.row_epoch(line)
                if row_epoch is not None and 1 <= row_epoch <= epoch:
                    seen.add(row_epoch)
    except OSError:
        return False
    return len(seen) == epoch


def upload_copy(transport: Transport, copy: LaptopRun, run_dir: str) -> None:
    """Put ``copy``'s ``last.pt`` and its history, trimmed to its epoch, into
    ``run_dir`` on the box (replacing what is there); ``ResumeFailed`` when the history
    cannot be read or the box's ``last.pt`` does not hash as the laptop's."""
    weights = posixpath.join(run_dir, runfiles.WEIGHTS_DIR)
    made = transport.run(f"mkdir -p -- {shlex.quote(weights)}", timeout=30.0)
    if not made.ok:
        raise ResumeFailed(f"cannot make {weights} on {transport.label}")
    with tempfile.TemporaryDirectory(prefix="gpurent-history-") as tmp:
        for name, local in copy.history.items():
            shutil.copyfile(local, Path(tmp) / name)
        try:
            runfiles.trim_history(Path(tmp), copy.epoch)
        except ValueError as exc:
            raise ResumeFailed(f"the laptop's pulled history: {exc}") from None
        for name in copy.history:
            transport.upload(str(Path(tmp) / name), posixpath.join(run_dir, name))
    target = posixpath.join(weights, "last.pt")
    transport.upload(copy.local_path, target)
    if remote_sha256(transport, target)[0] != local_sha256(copy.local_path):
        raise ResumeFailed(f"{target} on {transport.label} does not hash as the laptop's "
                           "copy")
