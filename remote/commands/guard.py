"""``gpurent guard [HOST:]RUN_DIR [show|arm|disarm|ack]``: the box-side guard that stops or
destroys the instance once the run is over, from a script.

``arm`` starts it detached on the box (it keeps watching with the laptop closed). It acts
with the key the provider placed in the instance; the laptop's account key
(``VAST_API_KEY``... or the config file) reaches it only with ``--send-account-key`` (or
``send_account_key = true`` under the provider's section of the config file), for the
instance named by ``--instance``, after a one-line warning. Secrets (that key, the
webhook URLs from ``--notify`` or ``[notify]`` in the config file, which keeps them out
of this laptop's process list) reach it on stdin only. ``ack`` acknowledges its alarm.
"""

from __future__ import annotations

import argparse
import json
import sys

from remote.billing.providers import (
    KEY_ENV,
    ConfigError,
    notify_config,
    resolve_api_key,
    sends_account_key,
)
from remote.commands.errors import fail
from remote.commands.lease import add_lease_option, lease_target, lease_words
from remote.commands.target import add_connection_options, open_transport, parse_target
from remote.fleet.arming import GuardOrder, arm, disarm
from remote.fleet.leases import Lease
from remote.runs.guard import (
    DISARM_WAIT,
    NOTIFY_FORMATS,
    GuardError,
    GuardState,
    account_key_warning,
    acknowledge_alarm,
    notify_lines,
    parse_when,
    read_guard,
)
from trainer.text import clean_text


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a number > 0")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``guard`` subcommand."""
    p = sub.add_parser(
        "guard",
        help="arm, disarm or show the guard that ends the instance's billing",
        description="The guard runs on the box, detached: once the run ends (--when done: "
        "completed, failed, stopped, or dead: its process gone or stalled) or the GPUs "
        "idle (idle=MINUTES), it waits for the final push, then stops or destroys the "
        "instance through the provider's API. It never destroys unsafe weights (it stops "
        "instead), retries a failing API until a hard deadline, and ends in a persistent "
        "ALARM when the billing could not be ended; `ack` acknowledges it. --notify URL "
        "(or [notify] urls in the config file) posts what happened to a webhook (plain "
        "JSON, ntfy, Slack or Discord). arm --lease 6h also gives the instance a deadline "
        "(as `gpurent lease`, ending in --then): the guard acts on it, and so does "
        "`gpurent watchdog` from here. Exit 0 ok, 1 the box could not be reached or the "
        "guard refused, 2 bad input.",
    )
    p.add_argument("run", metavar="[HOST:]RUN_DIR")
    p.add_argument("action", nargs="?", default="show",
                   choices=("show", "arm", "disarm", "ack"))
    p.add_argument("--when", default="done", metavar="done|idle=MINUTES",
                   help="the trigger (default done)")
    p.add_argument("--then", default="stop", choices=("stop", "destroy"),
                   help="what to do with the instance (default stop)")
    p.add_argument("--max-hours", type=_positive, metavar="H",
                   help="hard lifetime: act after H hours whatever the run does")
    p.add_argument("--provider", choices=("vast", "runpod", "lambda"),
                   help="default: detected on the box")
    p.add_argument("--instance", metavar="ID", help="default: detected on the box")
    p.add_argument("--send-account-key", action="store_true",
                   help="hand the guard this laptop's account key (needs --provider and "
                   "--instance). Default: the key the provider put in the instance (Vast, "
                   "RunPod); the host of a marketplace box can read a key sent to it")
    p.add_argument("--base-url", metavar="URL", help="provider API base URL (testing)")
    p.add_argument("--notify", action="append", default=[], metavar="URL",
                   help="a webhook to tell (repeatable); prefer [notify] urls in the "
                   "config file, which keeps the URL out of this laptop's process list")
    p.add_argument("--notify-format", choices=NOTIFY_FORMATS,
                   help="the webhook shape (default: from the URL, else plain JSON)")
    p.add_argument("--poll", type=_positive, metavar="S",
                   help="seconds between looks at the run (default 30)")
    p.add_argument("--stall-minutes", type=_positive, metavar="M",
                   help="a run stalled this long counts as dead (default 30)")
    p.add_argument("--wait", type=_positive, metavar="S", default=DISARM_WAIT,
                   help="disarm: seconds to wait for the guard to say it stood down "
                   f"(default {DISARM_WAIT:g})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_lease_option(p, then=False)
    add_connection_options(p)
    p.set_defaults(func=run)


def _print(args: argparse.Namespace, state: GuardState | None, lease: Lease | None = None
           ) -> int:
    if args.json:
        print(json.dumps({"ok": True, "guard": None if state is None else
                          {**state.to_dict(), "summary": state.summary()},
                          **({"lease": lease.to_dict()} if lease else {})}))
    else:
        print(clean_text(state.summary() if state is not None else
                         "no guard was ever armed for this run"))
    return 0


def _account_key(provider: str | None, instance: str | None) -> str:
    """The laptop's account key to send, or a ``GuardError`` saying what is missing."""
    if not (provider and instance):
        raise GuardError("--send-account-key needs --provider and --instance: a key that "
                         "acts on every instance is not sent for an instance the box names")
    key = resolve_api_key(provider)
    if not key:
        raise GuardError(f"--send-account-key: no account key for {provider} here (set "
                         f"{KEY_ENV.get(provider, 'its key')} or api_key in the config file)")
    return key


def run(args: argparse.Namespace) -> int:
    """Do the action and print the guard's state."""
    target = parse_target(args.run)
    key = leased = lease = None
    send = False
    if args.lease and args.action != "arm":
        return fail("guard", "--lease goes with arm", 2, args.json)
    if args.action == "arm":
        try:
            leased = lease_target(target, args.provider, args.instance) if args.lease \
                else None
            urls, fmt = notify_config()
            send = bool(args.send_account_key or (args.provider and
                                                  sends_account_key(args.provider)))
            if send:
                key = _account_key(args.provider, args.instance)
                print(account_key_warning(args.provider), file=sys.stderr)
            parse_when(args.when)
            notify_lines([*args.notify, *urls], args.notify_format or fmt)
        except (ConfigError, GuardError, ValueError) as exc:
            return fail("guard", exc, 2, args.json)
    order = GuardOrder(args.when, args.then, args.max_hours, send, args.base_url, args.poll,
                       args.stall_minutes)
    # The instance named is recorded with the order, to arm it again where the run moves.
    record = target.instance.text if target.instance is not None else None
    transport = open_transport(target, args, bootstrap=args.action == "arm")
    try:
        if args.action == "arm":
            armed = arm(transport, target.path, order, provider=args.provider,
                        instance=args.instance, key=key, notify=args.notify,
                        notify_format=args.notify_format, record=record,
                        lease=(leased, args.lease) if leased else None,
                        on_lease=lambda given, told: print(
                            clean_text(lease_words(given, told)), file=sys.stderr))
            state: GuardState | None = armed.guard
            lease = armed.lease
        elif args.action == "disarm":
            state = disarm(transport, target.path, record=record, wait=args.wait)
        elif args.action == "ack":
            state = acknowledge_alarm(transport, target.path)
        else:
            state = read_guard(transport, target.path)
    except GuardError as exc:
        return fail("guard", exc, 1, args.json)
    finally:
        transport.close()
    code = _print(args, state, lease)
    if args.action == "disarm" and state is not None and state.watching:
        print(f"the guard has not said it stood down within {args.wait:g} s (guard.json "
              "still says armed and its process runs; it answers within seconds unless "
              "it is busy acting): `gpurent guard RUN show` tells when it has",
              file=sys.stderr)
        return 1
    if state is not None and state.alarm_active and args.action == "show":
        print("the alarm stays until acknowledged: gpurent guard RUN ack", file=sys.stderr)
    return code
