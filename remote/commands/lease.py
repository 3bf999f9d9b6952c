"""``gpurent lease TARGET [DURATION|show|clear]``: a deadline for an instance, kept on
this laptop (the watchdog's) and, when the box answers, on the box (the guard's); see
``remote.fleet.leases``."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable

from remote.billing.providers import parse_instance_target
from remote.commands.errors import fail
from remote.commands.target import Target, add_connection_options, host_target, open_transport
from remote.fleet.leases import THEN, Lease, change_lease, lease_for, parse_duration
from remote.transport.base import Transport
from trainer.text import one_line


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``lease`` subcommand."""
    p = sub.add_parser(
        "lease",
        help="give an instance a deadline after which its billing is ended",
        description="TARGET is an instance (vast:ID, runpod:POD_ID, lambda:ID). A "
        "DURATION (6h, 90m, 1h30m, 2d) sets its lease: kept on this laptop, where "
        "`gpurent watchdog` ends the billing through the provider's API once it runs out "
        "(even when the box is gone), and written on the box when it answers, where an "
        "armed guard acts on it too. `show` (default) and `clear`. Exit 0 done, 1 the "
        "box could not be told (the laptop's lease still holds), 2 bad input.",
    )
    p.add_argument("target", metavar="TARGET")
    p.add_argument("what", nargs="?", default="show", metavar="DURATION|show|clear")
    p.add_argument("--then", choices=THEN, default="stop",
                   help="stop (default), or destroy when the weights are safe off the box "
                   "(else it stops)")
    p.add_argument("--laptop-only", action="store_true",
                   help="do not reach the box; only the watchdog will enforce it")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_connection_options(p)
    p.set_defaults(func=run)


def _box(args: argparse.Namespace) -> Callable[[], Transport] | None:
    """How the box is reached to be told (``None``: ``--laptop-only``)."""
    if args.laptop_only:
        return None
    return lambda: open_transport(host_target(args.target), args)


def add_lease_option(p: argparse.ArgumentParser, then: bool) -> None:
    """``--lease DURATION`` (and, with ``then``, ``--lease-then``) for launch and arm."""
    p.add_argument("--lease", type=_duration, metavar="DURATION",
                   help="also give the instance a lease (6h, 90m, 1h30m, 2d), as `gpurent "
                   "lease`: kept here for `gpurent watchdog` and written on the box for "
                   "its guard. The instance must be named: a vast:ID (runpod:, lambda:) "
                   "target, or --provider and --instance")
    if then:
        p.add_argument("--lease-then", choices=THEN, default="stop",
                       help="what the lease does when it runs out (default stop; destroy "
                       "only when the weights are safe off the box, else stop)")


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lease_target(target: Target, provider: str | None = None,
                 instance: str | None = None) -> str:
    """The instance a ``--lease`` is for: the target's own (``vast:4242``), else
    ``--provider`` and ``--instance``; never one the box names (a lease ends the billing
    of the instance it names). ``ValueError`` (one line) when none is named."""
    if target.instance is not None:
        return target.instance.text
    if provider and instance:
        named = parse_instance_target(f"{provider}:{instance}")
        if named is not None:
            return named.text
    raise ValueError("--lease needs the instance named: open the box as vast:ID "
                     "(runpod:POD_ID, lambda:ID), or give --provider and --instance")


def lease_words(lease: Lease, box: str) -> str:
    """``vast:4242: lease until ..., then stop; written on the box`` (or why not)."""
    told = "written on the box" if not box else f"the box was not told ({one_line(box, 200)})"
    return f"{lease.target}: {_describe(lease)}; {told}"


def _describe(lease: Lease | None) -> str:
    if lease is None:
        return "no lease"
    return f"lease until {lease.until_at} ({lease.left_words(time.time())}), then {lease.then}"


def run(args: argparse.Namespace) -> int:
    """Show, set or clear the lease."""
    named = parse_instance_target(args.target)
    if named is None:
        return fail("lease", f"{args.target!r} is not an instance: name it as vast:ID, "
                    "runpod:POD_ID or lambda:ID", 2, args.json)
    target = named.text
    box = ""
    if args.what == "show":
        lease = lease_for(target)
    else:
        seconds = None if args.what == "clear" else parse_duration(args.what)
        lease, box = change_lease(target, seconds, args.then, _box(args))
        if args.laptop_only:
            box = "not asked (--laptop-only)"
    if args.json:
        print(json.dumps({"ok": not box or args.laptop_only, "target": target,
                          "lease": None if lease is None else lease.to_dict(),
                          "box": box or ("told" if args.what != "show" else None)}))
    else:
        print(f"{target}: {_describe(lease)}")
        if box and args.what != "show" and not args.laptop_only:
            print(f"the box was not told ({box}); the watchdog enforces the lease from "
                  "this laptop's record", file=sys.stderr)
    return 1 if box and not args.laptop_only else 0
