"""``gpurent watchdog [--once]``: the off-box watchdog (``remote.fleet.watchdog``), for
cron or a systemd timer (``--once``) or as a loop (``--interval``)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any

from remote.billing.accounts import configured_accounts, some_accounts
from remote.billing.providers import ConfigError, notify_config
from remote.commands.errors import fail
from remote.commands.target import identity_files, key_options
from remote.fleet.fleet import FleetOptions
from remote.fleet.idle import IDLE_GPU_PERCENT
from remote.fleet.watchdog import Rules, loop, watch_once
from remote.fleet.watchrecords import ALARM_EVERY
from remote.glance import running_url
from trainer.guard.notify import parse_target
from trainer.guard.state import NOTIFY_FORMATS, GuardError


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``watchdog`` subcommand."""
    p = sub.add_parser(
        "watchdog",
        help="end the billing of instances past their lease or idle rule (off the box)",
        description="Run off the box (this laptop, any always-on machine). Through the "
        "providers' APIs with this laptop's account keys, it stops every instance whose "
        "lease ran out (gpurent lease) or that stayed idle --idle-minutes (no live run, "
        "or GPUs under --idle-gpu %: counted from when the box's GPU ring, which the "
        "guard's polls and every listing add to, saw them go quiet), even when the box "
        "hangs, SSH is gone or its guard died. A destroy happens only when the weights "
        "are confirmed safe off the box (else it stops, and says what keeps billing; "
        "Lambda cannot stop: it alarms). It keeps trying, pass after pass, until the "
        "provider confirms the billing ended; an account it cannot list (a key refused, "
        "a 2FA session expired, an outage) is an alarm of every pass. Webhooks: --notify "
        "or [notify] urls in the config file, as for the guard. Safe to run from two "
        "places at once. Where it runs, `gpurent glance` can serve a read-only page of every "
        "box and run for a phone. Exit 0 nothing failed, 1 an alarm, 2 bad input.",
    )
    p.add_argument("--once", action="store_true", help="one pass, then exit (cron, timers)")
    p.add_argument("--interval", type=float, default=300.0, metavar="S",
                   help="seconds between passes in loop mode (default 300)")
    p.add_argument("--idle-minutes", type=float, metavar="M",
                   help="stop an instance idle this long (default: no idle rule)")
    p.add_argument("--idle-gpu", type=float, default=IDLE_GPU_PERCENT, metavar="PCT",
                   help=f"a GPU under this utilisation is idle (default {IDLE_GPU_PERCENT:g})")
    p.add_argument("--stall-minutes", type=float, metavar="M",
                   help="stop an instance whose run made no progress this long while its "
                   "process lives (a hang that keeps the GPUs busy); with --idle-minutes "
                   "alone such a run is an alarm of every pass (the boxes are reached only "
                   "with one of the two)")
    p.add_argument("--then", choices=("stop", "destroy"), default="stop",
                   help="what the idle and stall rules do (destroy only with safe weights)")
    p.add_argument("--notify", action="append", default=[], metavar="URL",
                   help="a webhook to tell (repeatable); prefer [notify] urls in the config")
    p.add_argument("--notify-format", choices=NOTIFY_FORMATS)
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="limit of each API call and each box's exec (default 20)")
    p.add_argument("--confirm-timeout", type=float, default=180.0, metavar="S",
                   help="how long to poll the API for a stop's outcome (default 180)")
    p.add_argument("--poll", type=float, default=5.0, metavar="S",
                   help="seconds between those polls (default 5)")
    p.add_argument("--alarm-every", type=float, default=ALARM_EVERY, metavar="S",
                   help="tell an alarm that still holds again after S seconds (default "
                   f"{ALARM_EVERY:g}: every pass of a 5-minute cron watchdog)")
    p.add_argument("-i", "--identity", action="append", default=None, metavar="KEY",
                   help="private key file to log in to the boxes with, as `ssh -i` "
                   "(repeatable; a `Host vast:*` block of ~/.ssh/config works too)")
    p.add_argument("--accept-new", action="store_true",
                   help="accept and save an unknown host key (never a changed one)")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per pass, the decisions")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """One pass, or passes until SIGTERM/SIGINT."""
    if not (args.interval > 0 and args.timeout > 0 and args.confirm_timeout > 0):
        return fail("watchdog", "--interval, --timeout and --confirm-timeout must be "
                    "positive", 2, args.json)
    if any(m is not None and m <= 0 for m in (args.idle_minutes, args.stall_minutes)):
        return fail("watchdog", "--idle-minutes and --stall-minutes must be positive", 2,
                    args.json)
    try:
        keys = identity_files(args.identity)
        accounts = some_accounts()
        urls, fmt = notify_config()
        targets = [parse_target(u, args.notify_format or fmt) for u in [*args.notify, *urls]]
    except (ValueError, ConfigError, GuardError) as exc:
        return fail("watchdog", exc, 2, args.json)
    rules = Rules(args.idle_minutes, args.idle_gpu, args.then, args.stall_minutes)
    options = FleetOptions(timeout=args.timeout, accept_new=args.accept_new,
                           ssh_options=key_options(keys), idle_gpu=args.idle_gpu)

    def say(line: str) -> None:
        print(f"gpurent watchdog: {line}", file=sys.stderr)

    common: dict[str, Any] = {"notify": targets, "confirm_timeout": args.confirm_timeout,
                              "interval": args.poll, "progress": say,
                              "alarm_every": args.alarm_every}
    if args.once:
        decisions = watch_once(accounts, rules, options, **common)
        if args.json:
            print(json.dumps({"ok": not any(d.alarm for d in decisions),
                              "decisions": [d.to_dict() for d in decisions]}))
        return 1 if any(d.alarm for d in decisions) else 0
    ended = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_a: ended.set())
    say(f"watching every {args.interval:g} s (SIGTERM or Ctrl-C ends it)")
    # Where the watchdog runs, every box is reached: the glance page can run there too.
    # Its link carries the token, so it is never written here (this may be a log).
    say("a read-only page of every box and run, for a phone: " + (
        "gpurent glance serves one here; `gpurent glance --url` prints its link"
        if running_url() else "`gpurent glance` serves one (README: A glance from a phone)"))
    loop(configured_accounts, rules, options, args.interval, ended.wait, **common)
    return 0
