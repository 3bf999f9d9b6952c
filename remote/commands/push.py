"""``gpurent push HOST RUN --repo ORG/NAME``: push a run's weights to the Hub from the
box (not through this laptop), with the token sent on the command's stdin."""

from __future__ import annotations

import argparse
import json
import os
import sys

from remote.push import PushFailed, check_push_args, push_from_box
from remote.text import clean_text
from remote.transport import Transport, TransportError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``push`` subcommand."""
    p = sub.add_parser(
        "push",
        help="push a run's weights to the Hugging Face Hub from the box",
        description="Run `trainer push` on HOST (user@host, an ~/.ssh/config alias, or "
        "`local` for this machine): creates the model repository when missing (private "
        "unless --public), uploads, and appends the run's ledger hub.json. The token comes "
        "from HF_TOKEN or the huggingface_hub token store here and travels on stdin. "
        "Exit 0 pushed, 1 the push failed, 2 bad input or no token.",
    )
    p.add_argument("host", metavar="HOST")
    p.add_argument("run", metavar="RUN", help="the run directory on the box")
    p.add_argument("--repo", required=True, metavar="ORG/NAME")
    p.add_argument("--files", metavar="A,B",
                   help="comma-separated (default: best.pt,last.pt,summary.json,results.csv)")
    p.add_argument("--public", action="store_true", help="create the repository public")
    p.add_argument("-p", "--port", type=int, help="SSH port")
    p.add_argument("--accept-new", action="store_true",
                   help="accept an unknown host key (never a changed one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def laptop_token() -> str | None:
    """HF_TOKEN, else the huggingface_hub token store of this laptop."""
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        return token
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def open_box(host: str, port: int | None, accept_new: bool) -> Transport:
    """A transport to HOST with ``trainer_prefix`` ready (bootstrapped over SSH)."""
    if host == "local":
        from remote.local import LocalTransport

        return LocalTransport()
    from remote.bootstrap import bootstrap
    from remote.ssh import connect

    transport = connect(host, port=port, accept_new=accept_new)
    try:
        bootstrap(transport, preflight=False)
    except BaseException:
        transport.close()
        raise
    return transport


def run(args: argparse.Namespace) -> int:
    """Push and print the result."""
    files = [f.strip() for f in args.files.split(",") if f.strip()] if args.files else None

    def fail(message: str, code: int) -> int:
        message = clean_text(message)
        print(f"gpurent push: {message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": message}))
        return code

    try:
        check_push_args(args.repo, files)
    except ValueError as exc:
        return fail(str(exc), 2)
    token = laptop_token()
    if not token:
        return fail("no Hugging Face token: set HF_TOKEN or log in with `hf auth login`", 2)
    try:
        transport = open_box(args.host, args.port, args.accept_new)
    except TransportError as exc:
        return fail(str(exc), 1)
    try:
        result = push_from_box(transport, args.run, args.repo, token, files, args.public)
    except ValueError as exc:
        return fail(str(exc), 2)
    except PushFailed as exc:
        return fail(str(exc), 2 if exc.rc == 2 else 1)
    except TransportError as exc:
        return fail(str(exc), 1)
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
