"""``gpurent resume TARGET RUN``: back after a stop in one step (see ``remote.billing.resume``)."""

from __future__ import annotations

import argparse
import json
import sys

from remote.billing.providers import ConfigError, provider_for, resolve_instance
from remote.billing.resume import Step, resume_run
from remote.commands.errors import fail
from remote.commands.follow import Printer, follow
from remote.commands.target import add_connection_options, connector, host_target
from remote.runs.launch import ENGINES
from trainer.providers import ProviderError
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``resume`` subcommand."""
    p = sub.add_parser(
        "resume",
        help="start a stopped instance and resume its interrupted run, then follow it",
        description="Start the instance through the provider's API and wait until it runs, "
        "find its (new) SSH address, wait for SSH, relaunch RUN with resume=True and "
        "follow it as `gpurent follow` does (--detach: return once it is launched). Each "
        "step is printed with its time and the $/h billed from then on. TARGET is an "
        "instance (vast:ID, runpod:POD_ID) or a host with --provider/--instance or "
        "[hosts.\"HOST\"] in the config. RUN is the run directory on the box. Exit 0 "
        "resumed (and, when followed, completed or stopped), 1 failed, 2 bad input.",
    )
    p.add_argument("target", metavar="TARGET", help="vast:ID, runpod:POD_ID, or a host")
    p.add_argument("run", metavar="RUN", help="the run directory on the box")
    p.add_argument("--provider", choices=("vast", "runpod", "lambda"),
                   help="for a TARGET that is a host: its provider")
    p.add_argument("--instance", metavar="ID", help="for a TARGET that is a host")
    p.add_argument("--engine", choices=ENGINES, default="trainer")
    p.add_argument("--detach", action="store_true",
                   help="return once the run is relaunched instead of following it")
    p.add_argument("--start-timeout", type=float, default=600.0, metavar="S",
                   help="how long the instance may take to run (default 600)")
    p.add_argument("--ssh-timeout", type=float, default=300.0, metavar="S",
                   help="how long its SSH server may take to answer (default 300)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="seconds between polls of the provider's API (default 5)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per line: the steps, then the follow events")
    add_connection_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Resume and (unless --detach) follow."""
    if not (args.start_timeout > 0 and args.ssh_timeout > 0 and args.interval > 0):
        return fail("resume", "--start-timeout, --ssh-timeout and --interval must be "
                              "positive", 2, args.json)
    target = host_target(args.target, args.run)
    if target.host is None:
        raise ValueError("TARGET is a box (vast:ID, runpod:POD_ID or a host), not local")
    try:
        ref = resolve_instance(target.host, provider=args.provider, instance=args.instance)
        provider = provider_for(ref.provider)
    except ConfigError as exc:
        return fail("resume", exc, 2, args.json)
    except ProviderError as exc:
        return fail("resume", exc, 2 if exc.kind in ("bad_input", "auth") else 1, args.json)
    connect = connector(target, args, bootstrap=args.engine == "trainer", note=Printer.note)

    def say(step: Step) -> None:
        if args.json:
            print(json.dumps({"event": "resume", **step.to_dict()}), flush=True)
        else:
            print(step.line(), flush=True)

    try:
        resumed = resume_run(provider, ref.instance, connect, target.path, engine=args.engine,
                             say=say, start_timeout=args.start_timeout,
                             ssh_timeout=args.ssh_timeout, interval=args.interval)
    except ProviderError as exc:
        return fail("resume", exc, 1, args.json)
    resumed.transport.close()
    if args.detach:
        if not args.json:
            print(f"run {clean_text(target.host)}:{clean_text(resumed.run_dir)}",
                  file=sys.stderr)
        return 0
    return follow(connect, resumed.run_dir, as_json=args.json)
