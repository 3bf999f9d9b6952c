"""``python3 -m trainer safe RUN_DIR --json``: is the current ``weights/best.pt`` on the
Hub? Standard library only.

The answer compares the sha256 of ``best.pt`` with the ledger ``RUN/hub.json``. Hashing a
multi-GB checkpoint on every question would be slow, so the file's identity (size, inode,
mtime) is matched first: against the ledger (a pushed file is recorded with the identity
it had) and against a one-entry cache ``RUN/.hub-hash-cache.json``.

Output (one JSON object)::

    {"safe": bool, "best_sha256": str | None, "epoch": int | None, "repo", "commit",
     "pushed_at", "stale_seconds": float | None, "reason": str, "best_epoch": int | None}

``epoch``/``repo``/``commit``/``pushed_at`` describe the matching push when safe, else the
newest push of ``best.pt`` (an older best). ``stale_seconds`` is 0 when safe, else the age
of that newest push, or (never pushed) how long the current ``best.pt`` has existed.
No ``best.pt`` at all counts as safe: there is nothing to lose.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from trainer import runfiles
from trainer.hub.ledger import (
    LedgerError,
    file_identity,
    latest_entry,
    read_ledger,
    sha256_file,
)
from trainer.text import format_duration

BEST = "best.pt"
HASH_CACHE = ".hub-hash-cache.json"
_IDENTITY_KEYS = ("size", "inode", "mtime_ns")


def _same_file(record: dict[str, Any], identity: dict[str, int]) -> bool:
    return all(record.get(k) == identity[k] for k in _IDENTITY_KEYS)


def best_sha256(run_dir: Path, entries: list[dict[str, Any]]) -> str:
    """The sha256 of ``weights/best.pt``, hashed only when no record knows the file."""
    path = run_dir / runfiles.WEIGHTS_DIR / BEST
    identity = file_identity(path)
    for entry in reversed(entries):
        if entry.get("file") == BEST and isinstance(entry.get("sha256"), str) \
                and _same_file(entry, identity):
            return entry["sha256"]
    cache = run_dir / HASH_CACHE
    with contextlib.suppress(OSError, ValueError):
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if isinstance(cached, dict) and isinstance(cached.get("sha256"), str) \
                and _same_file(cached, identity):
            return cached["sha256"]
    digest = sha256_file(path)
    if file_identity(path) == identity:  # not replaced while we read it
        with contextlib.suppress(OSError):
            runfiles.atomic_write_json(cache, {"file": BEST, **identity, "sha256": digest})
    return digest


def _ago(seconds: float) -> str:
    return f"{format_duration(max(0.0, seconds))} ago"


def safety(run_dir: Path, now: float | None = None) -> dict[str, Any]:
    """The ``--json`` object for ``run_dir`` (see the module docstring)."""
    now = time.time() if now is None else now
    best_epoch = runfiles.read_status(run_dir).get("best_epoch")
    answer: dict[str, Any] = {"safe": False, "best_sha256": None, "epoch": None,
                              "repo": None, "commit": None, "pushed_at": None,
                              "stale_seconds": None, "reason": "", "best_epoch": best_epoch}
    path = run_dir / runfiles.WEIGHTS_DIR / BEST
    try:
        entries = read_ledger(run_dir)
    except LedgerError as exc:
        entries, answer["reason"] = [], f"{exc}; "
    try:
        sha = best_sha256(run_dir, entries)
        mtime = path.stat().st_mtime
    except FileNotFoundError:
        answer.update(safe=True, reason=answer["reason"] + f"no {runfiles.WEIGHTS_DIR}/{BEST} "
                                                           "yet: nothing to lose")
        return answer
    answer["best_sha256"] = sha
    hit = latest_entry(entries, BEST, sha)
    shown = hit or latest_entry(entries, BEST)
    if shown is not None:
        answer.update(epoch=shown.get("epoch"), repo=shown.get("repo"),
                      commit=shown.get("commit"), pushed_at=shown.get("time"))
    label = f"{BEST} (epoch {best_epoch})" if best_epoch is not None else BEST
    if hit is not None:
        pushed = runfiles.parse_iso(str(hit.get("time") or ""))
        when = f", pushed {_ago(now - pushed)}" if pushed is not None else ""
        answer.update(safe=True, stale_seconds=0.0)
        answer["reason"] += (f"{label} is on the Hub: {hit.get('repo')} at "
                             f"{str(hit.get('commit'))[:12]}{when}")
        return answer
    pushed = runfiles.parse_iso(str(shown.get("time") or "")) if shown else None
    if shown is not None and pushed is not None:
        answer["stale_seconds"] = max(0.0, now - pushed)
        answer["reason"] += (f"{label} is not on the Hub; the last push holds epoch "
                             f"{shown.get('epoch')}, {_ago(now - pushed)}")
    else:
        answer["stale_seconds"] = max(0.0, now - mtime)
        answer["reason"] += f"{label} was never pushed (written {_ago(now - mtime)})"
    return answer


def push_in_flight(run_dir: Path) -> bool:
    """Whether a push of this run is under way: a snapshot directory of
    ``trainer.hub.push`` whose process is alive (a killed push leaves a stale one)."""
    from trainer.hub.push import SNAPSHOT_PREFIX, SNAPSHOT_RE

    for entry in Path(run_dir).glob(f"{SNAPSHOT_PREFIX}*"):
        match = SNAPSHOT_RE.match(entry.name)
        if match and entry.is_dir() and runfiles.local_pid_alive(int(match.group(1))):
            return True
    return False


def main(argv: list[str]) -> int:
    """Run ``trainer safe``; exit 0 with an answer (safe or not), 2 for a bad RUN_DIR."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer safe",
        description="Say whether the current weights/best.pt is on the Hub, by sha256, "
        "according to the ledger RUN_DIR/hub.json.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"trainer safe: {run_dir} is not a directory", file=sys.stderr)
        return 2
    try:
        answer = safety(run_dir)
    except OSError as exc:
        print(f"trainer safe: cannot read {run_dir}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if args.json:
        print(runfiles.dumps(answer))
    else:
        print(f"{'safe' if answer['safe'] else 'NOT SAFE'}: {answer['reason']}")
    return 0
