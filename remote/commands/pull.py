"""``gpurent pull [HOST:]RUN [DEST]``: copy a run's weights to this machine, verified."""

from __future__ import annotations

import argparse
import json
import sys

from remote.commands.errors import fail
from remote.commands.target import add_connection_options, open_transport, parse_target
from remote.weights.pull import PULL_FOLDER, pull_weights
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``pull`` subcommand."""
    p = sub.add_parser(
        "pull",
        help="copy a run's weights here (resumable, sha256-checked, recorded in the ledger)",
        description="Download weights/best.pt and weights/last.pt (those that exist; or "
        "--file NAME, repeatable) of RUN over SFTP into DEST/<host>/<the run's absolute "
        "path on the box>/ (DEST default ./weights; the TUI's pull: the same layout), "
        "resuming a partial NAME.part, check the sha256 against the "
        "box's and record the pull in the local ledger (pulls.jsonl, absolute paths and "
        "the copy's identity) that the destroy check reads. RUN is HOST:RUN_DIR or a local "
        "run directory. Exit 0 pulled, 1 the box could not be reached or a check failed, "
        "2 bad input.",
    )
    p.add_argument("run", metavar="[HOST:]RUN")
    p.add_argument("dest", metavar="DEST", nargs="?", default=None,
                   help=f"local directory for the files (default ./{PULL_FOLDER})")
    p.add_argument("--file", action="append", dest="files", metavar="NAME",
                   help="file to pull: a name under weights/, metrics.jsonl or "
                   "results.csv (the history, at the run's top; `resume --on` uses them "
                   "with a pulled last.pt), or a path in the run (default best.pt and "
                   "last.pt)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_options(p)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Pull the files and say where they went."""
    target = parse_target(args.run)
    transport = open_transport(target, args)

    def show(name: str, done: int, total: int) -> None:
        if not args.json and sys.stderr.isatty():
            print(f"\r{clean_text(name)} {done / 1e6:.1f}/{total / 1e6:.1f} MB",
                  end="", file=sys.stderr, flush=True)

    try:
        pulled = pull_weights(transport, target.path, args.dest,
                              files=tuple(args.files) if args.files else None,
                              progress=show)
    except OSError as exc:  # writing here: a full disk, a read-only DEST
        return fail("pull", exc, 1, args.json)
    finally:
        transport.close()
    if args.json:
        print(json.dumps({"ok": True, "files": [item.__dict__ for item in pulled]}))
    else:
        if sys.stderr.isatty():
            print(file=sys.stderr)
        for item in pulled:
            print(f"{clean_text(item.local_path)}  {item.size} bytes  sha256 {item.sha256}")
    return 0
