"""``python -m trainer train key=value ...``: check the arguments into a plan, then train.

A bad argument is one line on stderr and exit code 2 before any run directory exists;
otherwise the exit code is the run's: 0 completed or stopped, 1 failed.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from trainer.engine.plan import Plan, build_plan, parse_args, usage

EXIT_USAGE = 2


def main(argv: Sequence[str]) -> int:
    """Entry point of ``python -m trainer train``."""
    argv = list(argv)
    if not argv or any(a in ("-h", "--help", "help") for a in argv):
        print(usage())
        return 0 if argv else EXIT_USAGE
    from trainer.engine.stopping import EarlySignals

    with EarlySignals():  # a stop while the data loads is acted on once training starts
        try:
            args, given = parse_args(argv)
            plan = build_plan(args, given)
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
