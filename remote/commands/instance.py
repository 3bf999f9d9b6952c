"""``gpurent instance HOST info|stop|start|destroy``: the instance through the provider's
API, with the destroy check (destroy is refused while any weight file on the box is not
safe off it; stop, start and destroy are refused when the instance is not the box HOST,
and an id the box reported is acted on only when the provider ties it to HOST).

HOST is the box (``user@host``, an ``~/.ssh/config`` alias, or ``local``); it is reached
only when needed: to detect the instance (no ``--provider``/``--instance`` and nothing in
the config) and to check the weights of ``--run``/``--project`` before a destroy.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from remote.billing import teardown
from remote.billing.cost import cost_report, format_report, rate
from remote.billing.identity import WrongInstance, box_address, check_instance
from remote.billing.providers import (
    ConfigError,
    provider_for,
    resolve_instance,
    split_instance_target,
)
from remote.commands.target import add_connection_options, host_target, open_transport
from remote.fleet.leases import lease_for
from remote.transport.base import Transport, TransportError
from trainer.providers import Instance, NotFoundError, ProviderError
from trainer.providers.confirm import StillBilling
from trainer.text import clean_text

#: Exit codes: done; refused or failed (or an alarm); bad input.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``instance`` subcommand."""
    p = sub.add_parser(
        "instance",
        help="show, stop, start or destroy the rented instance (provider API)",
        description="Act on the instance behind HOST through the provider's API (Vast.ai, "
        "RunPod, Lambda Cloud; `manual` prints what to do in the console). Outcomes are "
        "confirmed by polling the API; an instance still there after a destroy is an "
        "ALARM. destroy is refused while any weight file of the box's runs (--run, its "
        "project, --project, and every run launched through gpurent) that must be kept "
        "(best.pt, and last.pt when newer) is neither confirmed on the Hub nor pulled to "
        "this laptop and intact, unless --override-unsafe and the instance id is typed "
        "back; the weights are checked again just before the destroy. stop, start and "
        "destroy are refused when the provider's SSH address for the instance is not "
        "HOST's; an instance id detected on the box is a claim, acted on only when the "
        "provider's address for it is HOST's (a stopped instance has none: name it with "
        "--instance). "
        "API keys: VAST_API_KEY, RUNPOD_API_KEY, LAMBDA_API_KEY or "
        "~/.config/gpurent/config.toml (mode 600). "
        "Exit 0 done, 1 refused/failed/alarm, 2 bad input.",
    )
    p.add_argument("host", metavar="HOST", help="user@host, an ssh alias, or local")
    p.add_argument("action", choices=("info", "stop", "start", "destroy"))
    p.add_argument("--provider", choices=("vast", "runpod", "lambda", "manual"),
                   help="default: [hosts.\"HOST\"] in the config, else detected on the box")
    p.add_argument("--instance", metavar="ID", help="default: as for --provider")
    p.add_argument("--run", metavar="RUN", help="a run directory on the box; it and the "
                   "other runs of its project must have their weights safe before a destroy")
    p.add_argument("--project", action="append", default=[], metavar="DIR",
                   help="also check every run directly under DIR on the box (repeatable)")
    p.add_argument("--hub-repo", action="append", default=[], metavar="ORG/NAME",
                   help="a Hub repository of yours whose copies make weights safe, besides "
                   "those you pushed to or launched with from this laptop and [hub] repos "
                   "in the config file (repeatable); a repository the box's hub.json names "
                   "counts only when it is one of these")
    p.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    p.add_argument("--override-unsafe", action="store_true",
                   help="destroy although the weights are not safe (the instance id must "
                   "still be typed: at the prompt, or as the first line of stdin)")
    p.add_argument("--base-url", metavar="URL", help="provider API base URL (testing)")
    p.add_argument("--timeout", type=float, default=180.0, metavar="S",
                   help="how long to poll the API for the outcome (default 180)")
    p.add_argument("--interval", type=float, default=5.0, metavar="S",
                   help="seconds between polls (default 5)")
    p.add_argument("--keep-waiting", action="store_true",
                   help="start: leave a start that waits for GPUs pending (it bills from "
                   "whenever they free up: needs a lease); default: cancel it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_options(p)
    p.set_defaults(func=run)


class _Box:
    """Opens the transport once, only when something needs it."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.transport: Transport | None = None

    def get(self) -> Transport:
        if self.transport is None:
            host = self.args.host
            target = host_target(host, self.args.run or ".")
            self.transport = open_transport(target, self.args, bootstrap=True)
        return self.transport

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


def _ask(prompt: str) -> str:
    """A line from the person at the terminal, or the next line of stdin in a script."""
    if sys.stdin.isatty():
        try:
            return input(prompt)
        except EOFError:
            return ""
    print(prompt.rstrip(), file=sys.stderr)
    return sys.stdin.readline().strip()


#: Where the instance id came from, as the line before an action says it.
_SOURCES = {"target": "named by HOST", "flags": "given by --instance",
            "config": "from [hosts] in the config file",
            "box": "reported by the box, tied to it by the provider's address"}


def _instance_lines(inst: Instance) -> list[str]:
    rows = [("instance", f"{inst.provider} {inst.id}"),
            ("state", f"{inst.state} ({clean_text(inst.raw_state or '-')})"),
            ("gpu", clean_text(inst.gpu or "unknown"))]
    if inst.ssh_host:
        rows.append(("ssh", f"{clean_text(inst.ssh_host)}:{inst.ssh_port or 22}"))
    now = inst.billing_per_hour
    rows.append(("billing", "unknown" if now is None else f"{rate(now)} now"))
    return [f"{k:<12} {v}" for k, v in rows]


def run(args: argparse.Namespace) -> int:
    """Do the action and print what happened."""
    out: dict[str, Any] = {"ok": False, "action": args.action}

    def finish(code: int, message: str | None = None, more: list[str] | None = None) -> int:
        if message:
            print(f"gpurent instance: {clean_text(message)}", file=sys.stderr)
            for line in more or ():
                print(f"  {clean_text(line)}", file=sys.stderr)
            out.setdefault("error", clean_text(message))
        out["ok"] = code == EXIT_OK
        if args.json:
            print(json.dumps(out))
        return code

    def say(line: str) -> None:
        if not args.json:
            print(line)

    if not (args.timeout > 0 and args.interval >= 0):
        return finish(EXIT_USAGE, "--timeout must be positive and --interval not negative")
    box = _Box(args)
    try:
        return _run(args, box, out, say, finish)
    except (ConfigError, TransportError) as exc:
        return finish(EXIT_USAGE if isinstance(exc, ConfigError) else EXIT_FAILED, str(exc))
    except ProviderError as exc:
        code = EXIT_USAGE if exc.kind in ("bad_input", "auth") else EXIT_FAILED
        return finish(code, str(exc))
    except WrongInstance as exc:
        return finish(EXIT_FAILED, str(exc))
    finally:
        box.close()


def _refused(args: argparse.Namespace, decision: teardown.DestroyDecision,
             out: dict[str, Any], finish: Any) -> int:
    """A refused destroy, said in short lines: why, each file that is not safe and each
    check that could not be made (once), then what to do here."""
    out["gate"] = decision.to_dict()
    if not decision.details:  # a mistyped id: one line says it
        return finish(EXIT_FAILED, decision.reason)
    if decision.runs:
        where = f"{args.host}:{decision.runs[0] if len(decision.runs) == 1 else 'RUN'}"
        fix = (f"to destroy it: push (gpurent push {where} --repo ORG/NAME) or pull "
               f"(gpurent pull {where})" + (" each run above" if len(decision.runs) > 1
                                            else "") + " first, ")
    elif args.run or args.project:
        fix = "to destroy it: check again once the weights can be checked, "
    else:
        fix = "to destroy it: name the run (--run RUN, or --project DIR) to check, "
    return finish(EXIT_FAILED, decision.reason, [
        *decision.details, f"{fix}or add --override-unsafe and type the instance id"])


def _run(args: argparse.Namespace, box: _Box, out: dict[str, Any], say: Any,
         finish: Any) -> int:
    try:  # flags or the config first: the box is reached only when they do not say
        ref = resolve_instance(args.host, provider=args.provider, instance=args.instance)
    except ProviderError:
        ref = resolve_instance(args.host, provider=args.provider, instance=args.instance,
                               transport=box.get())
    out.update(provider=ref.provider, instance=ref.instance, source=ref.source)
    target = f"{ref.provider}:{ref.instance}"
    if args.keep_waiting and (args.action != "start" or lease_for(target) is None):
        return finish(EXIT_USAGE, "--keep-waiting goes with start and a lease: a start "
                      "that waits for GPUs can begin billing hours later, unseen; give it "
                      f"one first (gpurent lease {target} 6h)")
    provider = provider_for(ref.provider, base_url=args.base_url)
    try:
        inst = provider.get_instance(ref.instance)
    except NotFoundError as exc:
        return finish(EXIT_FAILED, str(exc))
    out["instance_state"] = inst.to_dict()
    if args.action == "info":
        report = cost_report(instance=inst)
        out["cost"] = report.to_dict()
        for line in _instance_lines(inst) + format_report(report):
            say(line)
        return finish(EXIT_OK)

    # An instance target names the instance itself, and the box is reached at the
    # address its API gives: there is no other box to mistake it for. An id the box
    # reported is a claim, refused here, before its weights are looked at, unless the
    # provider ties it to the box (and checked again at the moment of acting).
    named = split_instance_target(args.host) if args.host else None
    address = None if named is not None else box_address(args.host, args.port, box.transport)
    from_box = ref.source == "box"
    if address is not None:
        check_instance(provider, inst, address, args.action, from_box=from_box)
    warning = teardown.warning_for(args.action, provider, inst)
    out["warning"] = warning
    say(f"{provider.title} instance {ref.instance} ({_SOURCES[ref.source]}) is "
        f"{inst.state}: {warning}")
    override, typed = False, None
    source: Any = None
    if args.action == "destroy":
        if args.run or args.project:
            source = teardown.run_safety(box.get(), args.run, args.project, args.hub_repo)
        safety = teardown.resolve_safety(source)
        decision = teardown.check_destroy(safety, ref.instance)
        if not decision.safe:
            if not args.override_unsafe:
                return _refused(args, decision, out, finish)
            say("WARNING: the weights are not safe off the box:")
            for line in decision.details:
                say(f"  {clean_text(line)}")
            override = True
            typed = _ask(f"type the instance id ({ref.instance}) to destroy it with the "
                         "unsaved weights: ")
            decision = teardown.check_destroy(safety, ref.instance, override=True,
                                              typed_id=typed)
            out["gate"] = decision.to_dict()
            if not decision.allowed:
                return finish(EXIT_FAILED, decision.reason)
        else:
            out["gate"] = decision.to_dict()
            say(decision.reason)
    if not args.yes and not (args.action == "destroy" and override):
        if not sys.stdin.isatty():
            return finish(EXIT_USAGE, f"{args.action} needs confirmation: pass --yes")
        if _ask(f"{args.action} {provider.title} instance {ref.instance}? [y/N] ") \
                .strip().lower() not in ("y", "yes"):
            return finish(EXIT_FAILED, "cancelled; nothing changed")
    try:  # the weights and the instance are checked again now, after any prompt
        outcome = teardown.run_teardown(provider, ref.instance, args.action, safety=source,
                                        override=override, typed_id=typed, box=address,
                                        from_box=from_box, timeout=args.timeout,
                                        interval=args.interval,
                                        keep_waiting=args.keep_waiting)
    except teardown.DestroyRefused as exc:
        return _refused(args, exc.decision, out, finish)
    except StillBilling as exc:
        out["outcome"] = exc.outcome.to_dict()
        return finish(EXIT_FAILED, str(exc))
    out["outcome"] = outcome.to_dict()
    say(outcome.message)
    return finish(EXIT_OK if outcome.confirmed else EXIT_FAILED)
