"""``gpurent launch [HOST:]PROJECT name=RUN key=value ...``: start a run detached."""

from __future__ import annotations

import argparse
import json
import sys

from remote.billing.intents import RunIntent, want_running
from remote.commands.errors import fail
from remote.commands.lease import add_lease_option, lease_target, lease_words
from remote.commands.target import add_connection_options, open_transport, parse_target
from remote.fleet.leases import change_lease
from remote.runs.launch import ENGINES, RunIsLive, make_spec
from remote.runs.start import START_WAIT, CannotStart, start_run
from remote.weights.push import require_token
from remote.weights.reach import TokenRefused, reach_warning
from trainer.text import clean_text, one_line


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``launch`` subcommand."""
    p = sub.add_parser(
        "launch",
        help="start a training run detached (setsid nohup), print the command and pid",
        description="Start `python3 -m trainer train` (or `libreyolo train`) in PROJECT on "
        "the box, detached so that nothing here can kill it, with the key=value arguments "
        "of `libreyolo train`; name= names the run directory PROJECT/NAME. Prints the "
        "exact command, then the pid. The Hugging Face token (HF_TOKEN or the "
        "huggingface_hub token store) is sent over stdin with --hf-token or hub=; with "
        "hub=ORG/NAME a warning says when the Hub tells that it can write more than that "
        "repository (or that it could not tell), and a token the Hub refuses stops the "
        "launch; HF_ENDPOINT here is the Hub the run pushes to. "
        "With --engine libreyolo: nothing is created in PROJECT/NAME (LibreYOLO would "
        "train into NAME2); its console log and pid go to PROJECT/.gpurent/; hub=ORG/NAME "
        "starts the box-side push watcher (`trainer push --watch`: best.pt at every new "
        "best, everything at the end) instead of reaching LibreYOLO, which has no such "
        "option; resume=True resumes NAME/weights/last.pt (or the model= checkpoint); a "
        "model name on a box that cannot reach huggingface.co needs pretrained=False. "
        "Options go before PROJECT or after the last KEY=VALUE. Before starting, the box "
        "is asked whether its python can train (torch, numpy, pillow, pyyaml; for "
        "--engine libreyolo, whether libreyolo is on PATH); after starting, launch waits "
        "up to --wait seconds for the run's first status, and a run that dies in that "
        "time is reported with the end of its console.log. --lease 6h gives the instance "
        "a deadline as `gpurent lease` does, set before the run starts (so it holds "
        "even when the launch fails). "
        "modal:APP launches on Modal instead (the `modal` extra): a generated app file "
        "under the laptop's state, run with `modal run --detach`; timeout= (e.g. 4h, at "
        "most 24h) is required, gpu= takes Modal's names (default cpu), data= is a path in "
        "a Volume (/cache/...), hub= pushes with the Modal Secret gpurent-hf's HF_TOKEN. "
        "Exit 0 started, 1 refused (a live run, a python without torch, a refused Hub "
        "token) or failed to start, 2 bad input.",
    )
    p.add_argument("project", metavar="[HOST:]PROJECT")
    p.add_argument("args", nargs="*", metavar="KEY=VALUE")
    p.add_argument("--engine", choices=ENGINES, default="trainer")
    p.add_argument("--hf-token", action="store_true",
                   help="give the run the Hugging Face token (over stdin, never argv)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--wait", type=float, default=START_WAIT, metavar="SECONDS",
                   help="wait this long for the run's first status (default %(default)g; "
                   "0: do not wait)")
    add_lease_option(p, then=True)
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
    if target.modal is not None:
        from remote.commands import serverless

        return serverless.launch(args, target, pairs)
    name = pairs.pop("name", "")
    if not name:
        raise ValueError("name=RUN is required (the run directory is PROJECT/RUN)")
    if not 0 <= args.wait <= 600:
        raise ValueError("--wait must be 0 to 600 seconds")
    spec = make_spec(args.engine, target.path, name, pairs)
    leased = lease_target(target) if args.lease else None
    secret = None
    if args.hf_token or pairs.get("hub"):
        secret = require_token().encode("utf-8")

    def note(line: str) -> None:
        print(f"gpurent launch: {clean_text(line)}", file=sys.stderr)

    if secret is not None and pairs.get("hub"):
        try:
            warning = reach_warning(secret.decode("utf-8"), pairs["hub"])
        except TokenRefused as exc:  # every push of the run would be refused
            return fail("launch", exc, 1, args.json)
        if warning:
            note(f"warning: {warning}")
    transport = open_transport(target, args, bootstrap=args.engine == "trainer" or bool(spec.push),
                               note=note)
    lease = None
    try:
        if leased:
            lease, told = change_lease(leased, args.lease, args.lease_then, transport)
            note(lease_words(lease, told))
        started = start_run(transport, spec, stdin=secret, wait=args.wait)
    except (RunIsLive, CannotStart) as exc:
        return fail("launch", exc, 1, args.json)
    finally:
        transport.close()
    result = started.result
    if target.instance is not None and not started.failed:  # a stop now is a surprise
        want_running(target.instance.text, RunIntent(
            name, target.path, pairs.get("hub") or spec.push or ""))
    where = result.run_dir if target.host is None else f"{target.host}:{result.run_dir}"
    health = None if started.run is None else started.run.health.verdict
    if started.failed:
        if args.json:
            print(json.dumps({"ok": False, "error": started.error, "pid": result.pid,
                              "command": result.command, "run_dir": result.run_dir,
                              "target": where, "health": health,
                              "lease": lease and lease.to_dict()}))
        print(f"gpurent launch: {one_line(started.error, 600)}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"ok": True, "pid": result.pid, "command": result.command,
                          "run_dir": result.run_dir, "target": where, "health": health,
                          "lease": lease and lease.to_dict()}))
    else:
        print(f"$ {result.command}")
        print(f"pid {result.pid}  run {clean_text(where)}")
    if health == "starting":
        note(f"still starting after {args.wait:g}s (no status.json yet); watch it with "
             f"gpurent follow {where}")
    return 0
