"""``gpurent status [HOST:]RUN_DIR``: one run's state and health, for people or scripts."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from remote.target import Target, add_connection_options, open_transport, parse_target
from remote.text import clean_text
from remote.transport import TransportError
from trainer import runfiles


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``status`` subcommand."""
    p = sub.add_parser(
        "status",
        help="show a run's state and health",
        description="Read a run directory's status.json and judge whether the run is "
        "live, slow, stalled, dead, completed, failed or stopped. Exit 0 when readable, "
        "1 when the box cannot be reached, 2 when the directory or its status is missing or "
        "unreadable. HOST:RUN_DIR reads a run on a box over SSH.",
    )
    p.add_argument("run", metavar="RUN_DIR",
                   help="the run directory (holds status.json), or HOST:RUN_DIR on a box")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_options(p)
    p.set_defaults(func=run)


def local_summary(run_dir: Path, now: float | None = None) -> dict[str, Any]:
    """Read and judge a run directory on this machine; the ``--json`` object."""
    read = runfiles.read_status(run_dir)
    now = time.time() if now is None else now
    pid = read.get("pid")
    alive = runfiles.local_pid_alive(pid) if isinstance(pid, int) else None
    log = run_dir / runfiles.LOG_FILE
    history = [(now, log.stat().st_size)] if log.exists() else []
    health = runfiles.judge_health(
        read, now=now, pid_alive=runfiles.local_pid_alive, log_history=history
    )
    summary = runfiles.status_summary(read, health, alive)
    summary["run_dir"] = str(run_dir)
    return summary


def format_summary(s: dict[str, Any]) -> str:
    """The human-readable lines for a summary object."""
    rows = [("run", s["run_dir"]), ("state", f"{s['state']}  health: {s['health']}"),
            ("why", s["reason"])]
    if s["total_epochs"]:
        pct = f"  ({100 * s['progress']:.0f}%)" if s["progress"] is not None else ""
        rows.append(("epoch", f"{s['epoch'] or 0}/{s['total_epochs']}{pct}"))
    if s["eta_seconds"] and s["state"] == "running":
        rows.append(("eta", runfiles._dur(s["eta_seconds"])))
    if s["best_metric"] is not None:
        rows.append(("best", f"{s['best_metric_name'] or 'metric'} {s['best_metric']:.4g} "
                             f"at epoch {s['best_epoch']}"))
    if s["train_loss"] is not None:
        rows.append(("loss", f"{s['train_loss']:.4g}"))
    if s["pid"] is not None:
        alive = {True: "alive", False: "gone", None: "unknown"}[s["pid_alive"]]
        rows.append(("pid", f"{s['pid']} ({alive})"))
    if isinstance(s["error"], dict):
        rows.append(("error", f"{s['error'].get('type')}: {s['error'].get('message')}"))
    return "\n".join(f"{k:<6} {clean_text(str(v))}" for k, v in rows)


def remote_summary(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    """Read and judge a run on a box over SSH (``HOST:RUN_DIR``)."""
    from remote.runs import read_run

    transport = open_transport(target, args)
    try:
        summary = read_run(transport, target.path).summary()
    finally:
        transport.close()
    summary["run_dir"] = target.label
    return summary


def run(args: argparse.Namespace) -> int:
    """Print the status of ``args.run``."""
    try:
        target = parse_target(args.run)
    except ValueError as exc:
        print(f"gpurent status: {clean_text(str(exc))}", file=sys.stderr)
        return 2
    if target.host is not None:
        try:
            summary = remote_summary(args, target)
        except TransportError as exc:
            print(f"gpurent status: {clean_text(str(exc))}", file=sys.stderr)
            return 1
        return _print(args, summary)
    run_dir = Path(target.path)
    if not run_dir.is_dir():
        print(f"gpurent status: {clean_text(str(run_dir))} is not a directory", file=sys.stderr)
        return 2
    return _print(args, local_summary(run_dir))


def _print(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    if summary["health"] == "unreadable":
        print(f"gpurent status: {clean_text(summary['reason'])}", file=sys.stderr)
        if args.json:
            print(json.dumps(summary))
        return 2
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0
