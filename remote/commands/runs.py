"""``gpurent runs [HOST:]PROJECT``: the runs under a project directory, newest first."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os

from remote.commands.target import add_connection_options, connector, parse_target
from remote.runs.listing import box_runs
from remote.runs.read import list_runs
from remote.transport.local import LocalTransport
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``runs`` subcommand."""
    p = sub.add_parser(
        "runs",
        help="list the runs under a project directory with their health",
        description="List the run directories (those holding status.json, or launch.pid / "
        "console.log before it) under PROJECT, newest first, with state and health. PROJECT "
        "is a local path or HOST:PATH on a box over SSH (one exec of `trainer runs` there, "
        "uploading the trainer first when the box lacks it). Exit 0 listed (even none), "
        "1 the box could not be reached, 2 bad input or no such directory.",
    )
    p.add_argument("project", metavar="[HOST:]PROJECT")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    add_connection_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """List the runs."""
    target = parse_target(args.project)
    if target.modal is not None:
        from remote.commands import serverless

        runs = serverless.runs(args, target)
    elif target.host is None:
        if not os.path.isdir(target.path):
            raise ValueError(f"{target.path}: no such directory")
        runs = list_runs(LocalTransport(), target.path)
    else:
        gate = connector(target, args, bootstrap=True)
        gate.lazy = True  # `trainer runs` through the gate: one exec, any number of runs
        transport = gate.open()
        try:
            runs = box_runs(transport, target.path, gate)
        finally:
            transport.close()
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in runs]))
        return 0
    if not runs:
        print(f"no runs under {clean_text(target.label)}")
        return 0
    rows = [("NAME", "STATE", "HEALTH", "EPOCH", "BEST", "UPDATED")]
    for r in runs:
        epoch = f"{r.epoch or 0}/{r.total_epochs}" if r.total_epochs else "-"
        best = (f"{r.best_metric_name or 'metric'} {r.best_metric:.4g}"
                if isinstance(r.best_metric, int | float) else "-")
        rows.append((r.name, str(r.state), r.health, epoch, best, r.updated_at or "-"))
    widths = [max(len(clean_text(row[i])) for row in rows) for i in range(5)]
    for row in rows:
        cells = [clean_text(c).ljust(w) for c, w in zip(row, widths, strict=False)]
        print("  ".join([*cells, clean_text(row[5])]))
    return 0
