"""``python3 -m trainer push RUN_DIR --repo ORG/NAME [--watch]``: the command line of
``trainer.hub.push`` (one push now) and ``trainer.hub.autopush`` (stay and push the run's
new bests and its end, whatever engine writes it)."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from trainer import runfiles
from trainer.hub import autopush
from trainer.hub.client import HubError, check_repo_id, import_hub, read_token
from trainer.hub.push import DEFAULT_FILES, parse_files, push_run


def build_parser() -> argparse.ArgumentParser:
    """The ``trainer push`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer push",
        description="Push a run's weights to a Hugging Face model repository (created "
        "private when missing) and append the ledger RUN_DIR/hub.json. The token is read "
        "from stdin with --token-stdin, else from HF_TOKEN or the huggingface_hub store.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--repo", required=True, metavar="ORG/NAME")
    p.add_argument("--files", default=",".join(DEFAULT_FILES),
                   help="comma-separated; *.pt are taken from weights/ (default: %(default)s)")
    p.add_argument("--public", action="store_true", help="create the repository public")
    p.add_argument("--token-stdin", action="store_true",
                   help="read the token from the first line of stdin")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--watch", action="store_true",
                   help="stay: push best.pt at every new best, last.pt and the history at "
                   "milestones and everything when the run ends, whatever engine writes "
                   "it (trainer.hub.autopush); --files is ignored")
    p.add_argument("--pid", type=int, default=None,
                   help="with --watch: the run's pid, for a run that has no status.json yet")
    p.add_argument("--poll", type=float, default=2.0, help="with --watch: seconds between "
                   "looks at the run (default %(default)g)")
    p.add_argument("--period", type=int, default=0, metavar="N",
                   help="with --watch: push last.pt and the history every N epochs, so the "
                   "run can resume on another box (default 0: a tenth of the run, at most "
                   "10 epochs)")
    return p


def main(argv: list[str]) -> int:
    """Run ``trainer push``; exit 0 pushed, 1 the push failed, 2 bad input."""
    args = build_parser().parse_args(argv)

    def fail(message: str, code: int) -> int:
        print(f"trainer push: {message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": message}))
        return code

    try:
        files = parse_files(args.files)
        check_repo_id(args.repo)
        if args.period < 0:
            raise ValueError("--period must be 0 (a tenth of the run) or more")
    except ValueError as exc:
        return fail(str(exc), 2)
    token = read_token(args.token_stdin)
    if not token:
        return fail("no Hub token: set HF_TOKEN on the box or send it with --token-stdin", 2)
    if args.watch:
        return autopush.main(args, token)
    if args.json:
        with contextlib.suppress(HubError):
            import_hub(progress_bars=False).utils.logging.set_verbosity_error()
    try:
        result = push_run(Path(args.run_dir), args.repo, token, files, public=args.public,
                          progress_bars=not args.json)
    except ValueError as exc:
        return fail(str(exc), 2)
    except HubError as exc:
        return fail(str(exc), 1)
    if args.json:
        print(runfiles.dumps(result))
    else:
        names = ", ".join(e["file"] for e in result["files"])
        print(f"pushed {names} to {result['repo']} at {result['commit'][:12]}: "
              f"{result['message']}\n{result['commit_url']}")
        if result["skipped"]:
            print(f"not found, skipped: {', '.join(result['skipped'])}")
    return 0
