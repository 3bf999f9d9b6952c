"""``python -m trainer train key=value ...``: check the arguments into a plan, then train.

A bad argument is one line on stderr and exit code 2 before any run directory exists;
otherwise the exit code is the run's: 0 completed or stopped, 1 failed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from trainer.engine.plan import Plan, build_plan, parse_args, usage

EXIT_USAGE = 2
#: Set to ``1`` by the launcher (``remote.runs.launch``) when the first line of stdin is
#: the Hub token for ``hub=``: it then lives in the uploader's memory only, in no
#: process's environment (loader and DDP workers included) for the whole run.
TOKEN_STDIN_ENV = "GPURENT_HUB_TOKEN_STDIN"


def stdin_token() -> str | None:
    """The Hub token from the first line of stdin when ``TOKEN_STDIN_ENV`` says so (stdin
    is then put back to ``/dev/null``); ``None`` otherwise."""
    if os.environ.pop(TOKEN_STDIN_ENV, "") != "1":
        return None
    line = sys.stdin.readline().strip()
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    return line or None


def main(argv: Sequence[str]) -> int:
    """Entry point of ``python -m trainer train``."""
    argv = list(argv)
    if not argv or any(a in ("-h", "--help", "help") for a in argv):
        print(usage())
        return 0 if argv else EXIT_USAGE
    from trainer.engine.stopping import EarlySignals

    token = stdin_token()
    with EarlySignals():  # a stop while the data loads is acted on once training starts
        try:
            args, given = parse_args(argv)
            plan = build_plan(args, given, hub_token=token)
        except ValueError as exc:  # UsageError, DataError, ModelError, CheckpointError...
            print(f"train: {exc}", file=sys.stderr)
            return EXIT_USAGE
        return execute(plan)


def execute(plan: Plan) -> int:
    """Train as planned, in this process or in one worker per device; the exit code."""
    if plan.launch == "spawn":
        from trainer.engine.launcher import spawn
        from trainer.engine.report import open_log

        return spawn(plan, plan.world_size, open_log(plan.run_dir))
    from trainer.engine.collectives import Group
    from trainer.engine.loop import run

    if plan.launch == "torchrun":
        return run(plan, Group.join(plan.world, plan.caps.torch_device))
    return run(plan)
