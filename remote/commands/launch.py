"""``gpurent launch [HOST:]PROJECT name=RUN key=value ...``: start a run detached."""

from __future__ import annotations

import argparse
import json
import sys

from remote.commands.errors import fail
from remote.launch import ENGINES, LaunchSpec, RunIsLive, launch
from remote.push import require_token
from remote.target import add_connection_options, open_transport, parse_target
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``launch`` subcommand."""
    p = sub.add_parser(
        "launch",
        help="start a training run detached (setsid nohup), print the command and pid",
        description="Start `python3 -m trainer train` (or `libreyolo train`) in PROJECT on "
        "the box, detached so that nothing here can kill it, with the key=value arguments "
        "of `libreyolo train`; name= names the run directory PROJECT/NAME. Prints the "
        "exact command, then the pid. The Hugging Face token (HF_TOKEN or the "
        "huggingface_hub token store) is sent over stdin with --hf-token or hub=. "
        "Options go before PROJECT or after the last KEY=VALUE. "
        "Exit 0 started, 1 refused (a live run) or failed, 2 bad input.",
    )
    p.add_argument("project", metavar="[HOST:]PROJECT")
    p.add_argument("args", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--engine", choices=ENGINES, default="trainer")
    p.add_argument("--hf-token", action="store_true",
                   help="give the run the Hugging Face token (over stdin, never argv)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_options(p)
    p.set_defaults(func=run)


def parse_pairs(words: list[str]) -> dict[str, str]:
    """``key=value`` words as a dict; ``ValueError`` for a word without ``=``."""
    pairs: dict[str, str] = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep:
            raise ValueError(f"{word!r} is not key=value")
        pairs[key] = value
    return pairs


def run(args: argparse.Namespace) -> int:
    """Launch and print the command and the pid."""
    target = parse_target(args.project)
    pairs = parse_pairs(args.args)
    name = pairs.pop("name", "")
    if not name:
        raise ValueError("name=RUN is required (the run directory is PROJECT/RUN)")
    spec = LaunchSpec(args.engine, target.path, name, pairs)
    secret = None
    if args.hf_token or pairs.get("hub"):
        secret = require_token().encode("utf-8")

    def note(line: str) -> None:
        print(f"gpurent launch: {clean_text(line)}", file=sys.stderr)

    transport = open_transport(target, args, bootstrap=args.engine == "trainer", note=note)
    try:
        result = launch(transport, spec, stdin=secret)
    except RunIsLive as exc:
        return fail("launch", exc, 1, args.json)
    finally:
        transport.close()
    where = result.run_dir if target.host is None else f"{target.host}:{result.run_dir}"
    if args.json:
        print(json.dumps({"ok": True, "pid": result.pid, "command": result.command,
                          "run_dir": result.run_dir, "target": where}))
    else:
        print(f"$ {result.command}")
        print(f"pid {result.pid}  run {clean_text(where)}")
    return 0
