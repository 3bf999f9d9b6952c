"""``gpurent stop [HOST:]RUN``: stop a run gracefully (SIGTERM for our trainer, SIGINT
for LibreYOLO), by force after a timeout."""

from __future__ import annotations

import argparse
import json

from remote.commands.errors import fail
from remote.commands.target import add_connection_options, open_transport, parse_target
from remote.runs.stop import stop_run
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``stop`` subcommand."""
    p = sub.add_parser(
        "stop",
        help="stop a run gracefully (SIGTERM, or SIGINT for LibreYOLO), SIGKILL after a "
        "timeout",
        description="Stop the run gracefully, wait up to --timeout seconds for it to exit, "
        "then SIGKILL; prints which happened. Our trainer gets SIGTERM to its process "
        "group: it saves last.pt and writes state 'stopped'. A LibreYOLO run (it writes "
        "train_config.yaml) gets SIGINT, its only graceful stop (SIGTERM would kill it "
        "outright), once no checkpoint is being written; it records 'failed: "
        "KeyboardInterrupt', which gpurent shows as stopped (PROJECT/.gpurent/NAME.stop.json "
        "says who stopped it), and a checkpoint still being written is named as cut short. "
        "The pid is signalled only while it is the process "
        "status.json records (same start time). A stop already in progress (a second "
        "stop: NAME.stop.json names the same pid) is not sent again: gpurent waits up to "
        "--timeout for it and says 'stopping' if the run is still saving (--force kills it "
        "at once instead). RUN is a local run directory or HOST:RUN_DIR. Exit 0 stopped, "
        "killed, stopping or not running; 1 the box could not be reached, or the pid is "
        "stale (not signalled); 2 bad input or an unreadable status.",
    )
    p.add_argument("run", metavar="[HOST:]RUN")
    p.add_argument("--timeout", type=float, default=30.0,
                   help="seconds to wait after the signal before SIGKILL (default 30)")
    p.add_argument("--force", action="store_true",
                   help="when a stop is already in progress (still saving), SIGKILL the "
                   "run at once instead of waiting for it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Stop the run and say how."""
    if args.timeout < 0:
        return fail("stop", "--timeout must be zero or more", 2, args.json)
    target = parse_target(args.run)
    if target.modal is not None:
        from remote.commands import serverless

        return serverless.stop(args, target)
    transport = open_transport(target, args)
    try:
        result = stop_run(transport, target.path, timeout=args.timeout, force=args.force)
    finally:
        transport.close()
    ok = result.outcome != "not-signalled"
    if args.json:
        print(json.dumps({"ok": ok, "outcome": result.outcome, "detail": result.detail,
                          "torn": list(result.torn), "run_dir": target.label}))
    else:
        print(f"{result.outcome}: {clean_text(result.detail)}")
    return 0 if ok else 1
