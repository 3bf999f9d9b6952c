"""``gpurent push HOST:RUN --repo ORG/NAME`` (or ``HOST RUN``): push a run's weights to
the Hub from the box (not through this laptop), with the token sent on the command's
stdin."""

from __future__ import annotations

import argparse
import json
import sys

from remote.commands.errors import fail
from remote.commands.target import (
    add_connection_options,
    host_target,
    open_transport,
    parse_target,
)
from remote.weights.push import NO_TOKEN, PushFailed, check_push_args, laptop_token, push_from_box
from remote.weights.reach import TokenRefused, reach_warning
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``push`` subcommand."""
    p = sub.add_parser(
        "push",
        help="push a run's weights to the Hugging Face Hub from the box",
        description="Run `trainer push` on the box of HOST:RUN (or HOST RUN; HOST is "
        "user@host, an ~/.ssh/config alias, an instance such as vast:4242, or `local` for "
        "this machine; a plain RUN is a run here): creates the model repository when "
        "missing (private unless --public), uploads, and appends the run's ledger "
        "hub.json. The token comes "
        "from HF_TOKEN or the huggingface_hub token store here and travels on stdin; "
        "a warning says when the Hub tells that it can write more than ORG/NAME (use a "
        "fine-grained token that writes that repository alone), or that it could not "
        "tell. HF_ENDPOINT here (a private Hub or a mirror) is the Hub the box pushes to, "
        "whatever the box's own environment says. "
        "Exit 0 pushed, 1 the push failed or the Hub refused the token, 2 bad input or no "
        "token.",
    )
    p.add_argument("target", metavar="HOST:RUN", help="the run on its box (or HOST, then RUN)")
    p.add_argument("run", metavar="RUN", nargs="?", default=None,
                   help="the run directory on HOST, when HOST is given alone")
    p.add_argument("--repo", required=True, metavar="ORG/NAME")
    p.add_argument("--files", metavar="A,B",
                   help="comma-separated (default: best.pt,last.pt,summary.json,results.csv)")
    p.add_argument("--public", action="store_true", help="create the repository public")
    add_connection_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Push and print the result."""
    files = [f.strip() for f in args.files.split(",") if f.strip()] if args.files else None
    check_push_args(args.repo, files)
    target = parse_target(args.target) if args.run is None else \
        host_target(args.target, args.run)
    token = laptop_token()
    if not token:
        return fail("push", NO_TOKEN, 2, args.json)

    def note(line: str) -> None:
        print(f"gpurent push: {clean_text(line)}", file=sys.stderr)

    try:
        warning = reach_warning(token, args.repo)
    except TokenRefused as exc:  # the box would be refused too: it is not even asked
        return fail("push", exc, 1, args.json)
    if warning:
        note(f"warning: {warning}")
    transport = open_transport(target, args, bootstrap=True, note=note)
    try:
        result = push_from_box(transport, target.path, args.repo, token, files, args.public)
    except PushFailed as exc:
        return fail("push", exc, 2 if exc.rc == 2 else 1, args.json)
    finally:
        transport.close()
    if args.json:
        print(json.dumps(result))
    else:
        names = ", ".join(clean_text(str(f.get("file"))) for f in result.get("files", []))
        print(f"pushed {names} to {clean_text(str(result.get('repo')))} at "
              f"{str(result.get('commit'))[:12]}: {clean_text(str(result.get('message')))}")
        print(clean_text(str(result.get("commit_url"))))
    return 0
