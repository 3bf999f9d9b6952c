"""``gpurent status [HOST:]RUN_DIR``: one run's state and health, for people or scripts."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from remote.commands.target import Target, add_connection_options, open_transport, parse_target
from remote.runs.guard import read_guard
from remote.runs.read import read_run, run_extras
from remote.runs.status import quick_read
from remote.transport.base import Transport, TransportError
from remote.transport.local import LocalTransport
from trainer.text import clean_text, format_duration


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


def summarise(transport: Transport, run_dir: str) -> dict[str, Any]:
    """Read and judge a run on ``transport``'s machine; the ``--json`` object, with the
    guard's state (``None`` when no guard was ever armed for the run)."""
    return _with_guard(read_run(transport, run_dir).summary(), run_extras(transport, run_dir),
                       read_guard(transport, run_dir))


def _with_guard(summary: dict[str, Any], extras: dict[str, Any],
                guard: Any) -> dict[str, Any]:
    summary["extras"] = extras
    summary["guard"] = None if guard is None else {
        **guard.to_dict(), "summary": guard.summary(), "alarm_active": guard.alarm_active}
    return summary


def format_summary(s: dict[str, Any]) -> str:
    """The human-readable lines for a summary object."""
    rows = [("run", s["run_dir"]), ("state", f"{s['state'] or '-'}  health: {s['health']}"),
            ("why", s["reason"])]
    if s["total_epochs"]:
        pct = f"  ({100 * s['progress']:.0f}%)" if s["progress"] is not None else ""
        rows.append(("epoch", f"{s['epoch'] or 0}/{s['total_epochs']}{pct}"))
    if s["eta_seconds"] and s["state"] == "running":
        rows.append(("eta", format_duration(s["eta_seconds"])))
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
    guard = s.get("guard")
    if guard:
        rows.append(("guard", guard["summary"]))
        if guard.get("alarm_active"):  # first, where nobody can miss it
            rows.insert(0, ("ALARM", f"{guard['alarm'].get('message')} (acknowledge: "
                                     "gpurent guard RUN ack)"))
    rows += extras_rows(s.get("extras") or {})
    lines = [f"{k:<6} {clean_text(str(v))}" for k, v in rows]
    args = (s.get("extras") or {}).get("args") or {}
    if args:
        text = " ".join(f"{clean_text(str(k))}={clean_text(str(v))}" for k, v in args.items())
        lines += textwrap.wrap(text, 100, initial_indent="args   ", subsequent_indent="       ",
                               break_on_hyphens=False)
    if s.get("console"):
        lines.append("console.log (last lines; no status.json yet):")
        lines += [f"  {clean_text(line)}" for line in str(s["console"]).splitlines()]
    return "\n".join(lines)


def extras_rows(extras: dict[str, Any]) -> list[tuple[str, str]]:
    """Rows for what else the run directory holds (weights, results, plots)."""
    rows = []
    if extras.get("weights"):
        rows.append(("ckpt", ", ".join(extras["weights"])))
    files = list(extras.get("files") or [])
    if extras.get("plots"):
        files.append(f"val/plots/ ({extras['plots']} files)")
    if files:
        rows.append(("files", ", ".join(files)))
    return rows


def remote_summary(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    """Read and judge a run on a box over SSH (``HOST:RUN_DIR``), in one exec."""
    transport = open_transport(target, args)
    try:
        run, guard, extras = quick_read(transport, target.path)  # one exec, no bootstrap
    finally:
        transport.close()
    summary = _with_guard(run.summary(), extras, guard)
    summary["run_dir"] = target.label
    return summary


def run(args: argparse.Namespace) -> int:
    """Print the status of ``args.run``."""
    try:
        target = parse_target(args.run)
    except ValueError as exc:
        print(f"gpurent status: {clean_text(str(exc))}", file=sys.stderr)
        return 2
    if target.modal is not None:
        from remote.commands import serverless

        summary = serverless.status(args, target)
        if args.json or summary["health"] == "unreadable":
            return _print(args, summary)
        print("\n".join([format_summary(summary), *serverless.status_lines(summary)]))
        return 0
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
    return _print(args, summarise(LocalTransport(), str(run_dir)))


def _print(args: argparse.Namespace, summary: dict[str, Any]) -> int:
    if summary["health"] == "unreadable":
        print(f"gpurent status: {clean_text(summary['reason'])}", file=sys.stderr)
        if args.json:
            print(json.dumps(summary))
        return 2
    print(json.dumps(summary) if args.json else format_summary(summary))
    return 0
