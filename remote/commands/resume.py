"""``gpurent resume TARGET RUN``: back after a stop in one step (see
``remote.resume.resume``); ``gpurent resume ORG/REPO:NAME --on TARGET``: the run goes on
on another box from its last push to the Hub (see ``remote.resume.move``)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from remote.billing.providers import ConfigError, provider_for, resolve_instance
from remote.commands.errors import fail
from remote.commands.follow import Printer, follow
from remote.commands.target import add_connection_options, connector, host_target
from remote.link.connector import Connector
from remote.resume.move import (
    DEFAULT_PROJECT,
    Moving,
    launched_here,
    move_run,
    new_box_rate,
    parse_run,
)
from remote.resume.resume import Resumed, Step, resume_run
from remote.runs.launch import ENGINES
from remote.weights.push import require_token
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
        "[hosts.\"HOST\"] in the config. RUN is the run directory on the box. "
        "With --on TARGET the one argument is the run as ORG/REPO:NAME (its Hub repository "
        "and name) or as PROVIDER:ID:RUN_DIR, its path on the old instance (one launched "
        "from this laptop with hub=: the laptop's intents know its repository; "
        "PROVIDER:ID alone when one such run was launched there, else the runs to choose "
        "from are listed and nothing is done): the box "
        "TARGET is checked (preflight), the dataset found (--data) or "
        "staged (--stage), the last checkpoint and the history put there from the Hub "
        "(token on stdin), or uploaded from this laptop's verified pulled copy when its "
        "epoch is newer than the Hub's last.pt of the run (the Hub's is another run's in "
        "a repository shared with it: none then) and its history was pulled with it "
        "(`gpurent pull "
        "HOST:RUN DEST --file last.pt --file metrics.jsonl --file results.csv`; the step "
        "says which source and why), and the run relaunched as PROJECT/NAME with "
        "resume=True and the same hub=. Exit 0 resumed (and, when followed, completed or "
        "stopped), 1 failed, 2 bad input.",
    )
    p.add_argument("target", metavar="TARGET", help="vast:ID, runpod:POD_ID, or a host "
                   "(with --on: the run, ORG/REPO:NAME or PROVIDER:ID:RUN_DIR)")
    p.add_argument("run", metavar="RUN", nargs="?", help="the run directory on the box")
    p.add_argument("--on", metavar="TARGET", help="resume on this box, from the Hub or "
                   "this laptop's newer copy")
    p.add_argument("--project", default=DEFAULT_PROJECT, metavar="DIR",
                   help="with --on: where the run goes on the box (default "
                   f"{DEFAULT_PROJECT}, the project gpurent-tui BOX shows)")
    p.add_argument("--data", metavar="PATH", help="with --on: the dataset's data.yaml there")
    p.add_argument("--stage", metavar="REPO:FILE", help="with --on: a Hub dataset tar to "
                   "stage (into --stage-dest) when --data is not on the box")
    p.add_argument("--stage-dest", default="datasets", metavar="DIR")
    p.add_argument("--old-price", type=float, metavar="$/H",
                   help="with --on: what the old box cost, for the money of it")
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
    if args.on is not None:
        return run_elsewhere(args)
    if args.run is None:
        runs = launched_here(args.target)
        return fail("resume", "RUN is missing: name the run directory on the box" +
                    (f", one of the runs launched there from here: {', '.join(runs)}"
                     if runs else "") + " (or resume ORG/REPO:NAME --on TARGET)", 2,
                    args.json)
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

    say = sayer(args.json)
    try:
        resumed = resume_run(provider, ref.instance, connect, target.path, engine=args.engine,
                             say=say, start_timeout=args.start_timeout,
                             ssh_timeout=args.ssh_timeout, interval=args.interval)
    except ProviderError as exc:
        return fail("resume", exc, 1, args.json)
    return finish(args, connect, target.host, resumed)


def sayer(as_json: bool) -> Callable[[Step], None]:
    """Print each step as a line, or as a JSON object."""
    def say(step: Step) -> None:
        if as_json:
            print(json.dumps({"event": "resume", **step.to_dict()}), flush=True)
        else:
            print(step.line(), flush=True)
    return say


def finish(args: argparse.Namespace, connect: Connector, host: str,
           resumed: Resumed) -> int:
    """Close the resume's connection; follow the run unless ``--detach``."""
    resumed.transport.close()
    if args.detach:
        if not args.json:
            print(f"run {clean_text(host)}:{clean_text(resumed.run_dir)}", file=sys.stderr)
        return 0
    return follow(connect, resumed.run_dir, as_json=args.json)


def run_elsewhere(args: argparse.Namespace) -> int:
    """``gpurent resume ORG/REPO:NAME --on TARGET``."""
    try:
        repo, name = parse_run(args.target)
        if args.run is not None:
            raise ValueError("with --on, give the run once, as ORG/REPO:NAME or "
                             "PROVIDER:ID:RUN_DIR")
        stage = None
        if args.stage is not None:
            stage_repo, _, stage_file = args.stage.partition(":")
            if not stage_file:
                raise ValueError("--stage is REPO:FILE, e.g. me/shapes:shapes.tar")
            stage = (stage_repo, stage_file)
        token = require_token()
        target = host_target(args.on, args.project)
        if target.host is None:
            raise ValueError("--on names a box (vast:ID, runpod:POD_ID or a host)")
    except ValueError as exc:
        return fail("resume", exc, 2, args.json)
    moving = Moving(repo, name, args.project, args.data, stage, args.stage_dest,
                    args.old_price, new_box_rate(target.host))
    connect = connector(target, args, bootstrap=True, note=Printer.note)
    instance = None if target.instance is None else \
        (target.instance.provider, target.instance.instance)
    resumed = move_run(connect, moving, token, target=target.host, instance=instance,
                       say=sayer(args.json))
    return finish(args, connect, target.host, resumed)
