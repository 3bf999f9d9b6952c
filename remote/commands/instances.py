"""``gpurent instances``: every instance on every configured account, priced, with what
each reachable box is doing and the idle ones flagged (``remote.fleet.fleet``)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from remote.billing.accounts import NoAccounts, some_accounts
from remote.billing.providers import ConfigError
from remote.commands.errors import fail
from remote.commands.target import identity_files, key_options
from remote.fleet.boxweights import WEIGHTS_TIMEOUT
from remote.fleet.fleet import Fleet, FleetOptions, FleetRow, list_fleet
from remote.fleet.fleetrows import provider_state
from remote.fleet.idle import IDLE_GPU_PERCENT
from trainer.text import clean_text, money, rate


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``instances`` subcommand."""
    p = sub.add_parser(
        "instances",
        help="every instance on every account: state, price, idle time and dollars",
        description="List every instance of every configured provider account (each "
        "provider's key, and [[accounts]] in the config file), all accounts at once. For "
        "each running instance with an SSH address, one exec on its box (all at once) "
        "reads the GPUs now and over the last hour (the box's GPU ring, which every "
        "listing and the guard add to), the runs launched through gpurent and their "
        "health, a guard and a lease, and on that connection the destroy check says "
        "whether every weight file of those runs is safe off the box (a Hub copy in your "
        "repositories, confirmed with your token, or an intact pulled copy; 'weights: ?' "
        "when the check could not run or end in time, never safe); an idle one (no live "
        "run, or GPUs under --idle-gpu %) is flagged with how long (from when the ring "
        "saw the GPUs go quiet, else from when this laptop first saw it) and how many "
        "dollars so far. Each box is reached by its name (vast:ID): a `Host vast:*` block "
        "of ~/.ssh/config gives its User, IdentityFile, ProxyJump..., else the provider's "
        "default user (root; Lambda: ubuntu) logs in. An unknown host key is not accepted "
        "unless --accept-new: the box is then shown unreachable with the reason. Exit 0 "
        "listed (a failing account says so in its row), 1 every account failed, 2 no "
        "account, a bad config file or an -i KEY that is not there.",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--no-ssh", dest="ssh", action="store_false",
                   help="ask the providers only; do not reach the boxes")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="limit of each API call and each box's exec (default 20)")
    p.add_argument("--idle-gpu", type=float, default=IDLE_GPU_PERCENT, metavar="PCT",
                   help=f"a GPU under this utilisation is idle (default {IDLE_GPU_PERCENT:g})")
    p.add_argument("--no-weights", dest="weights", action="store_false",
                   help="do not ask whether each box's weights are safe off it (the "
                   "destroy check's verdict: the box hashes them, the Hub confirms)")
    p.add_argument("--weights-timeout", type=float, default=WEIGHTS_TIMEOUT, metavar="S",
                   help="limit of each box's weights check; one that does not end in "
                   f"time says 'weights: ?' (default {WEIGHTS_TIMEOUT:g})")
    p.add_argument("-i", "--identity", action="append", default=None, metavar="KEY",
                   help="private key file to log in to the boxes with, as `ssh -i` "
                   "(repeatable; tried before the ssh config's)")
    p.add_argument("--accept-new", action="store_true",
                   help="accept and save an unknown host key (never a changed one)")
    p.set_defaults(func=run)


def modal_apps() -> list[dict[str, Any]] | None:
    """The running Modal apps launched from here, each with its timeout left and dollars
    (``None`` when none was ever launched; ``[]`` with an error row when Modal could not
    be asked)."""
    from remote.serverless import modal_records

    if not modal_records():
        return None
    from remote.serverless import fleet_rows
    from remote.transport.base import TransportError

    try:
        return fleet_rows()
    except TransportError as exc:
        return [{"target": "modal", "error": str(exc)}]


def modal_line(app: dict[str, Any]) -> str:
    """One line for a Modal app of :func:`modal_apps`."""
    if "error" in app:
        return clean_text(f"{'modal':<16} {app['error']}")
    return clean_text(f"{'modal':<16} {app['target']:<22} {app['words']}; {app['money']}; "
                      f"{app['bill']}")


def _box_words(row: FleetRow) -> list[str]:
    box = row.box
    if box is None:
        return []
    said = box.gpu_words()
    if box.gpus is None and box.gpu_error:
        said.append(f"nvidia-smi: {box.gpu_error}")
    live = len(box.live_runs)
    said.append(f"{len(box.runs)} run{'s' * (len(box.runs) != 1)}, {live} live"
                if box.runs else "no runs")
    said.append("guard watching" if box.guard_watching else "no guard")
    return said


def row_line(row: FleetRow, now: float) -> str:
    """One line per instance (or failed account)."""
    inst = row.instance
    if inst is None:
        return clean_text(f"{row.account:<16} {row.words(now)[0]}")
    state = provider_state(inst)
    bill = "billing" if row.full_price else "not billing GPUs"
    spent = row.spent(now)
    up = "" if spent is None else f", {money(spent)} since start"
    ssh = f" ssh {inst.ssh_host}:{inst.ssh_port}" if inst.ssh_host else ""
    notes = "; ".join([*row.words(now), *_box_words(row)])
    return clean_text(f"{row.account:<16} {row.target:<22} {state}, {bill} "
                      f"{rate(inst.billing_per_hour)} (running {rate(inst.price_per_hour)})"
                      f"{up}; {inst.gpu or 'GPU unknown'}{ssh}" + (f" | {notes}" if notes
                                                                    else ""))


def print_fleet(fleet: Fleet) -> None:
    """The human listing, and a total of what bills now."""
    for row in fleet.rows:
        print(row_line(row, fleet.now))
    print(f"{fleet.billing_words()}; listed in {fleet.seconds:.1f} s")


def run(args: argparse.Namespace) -> int:
    """List the fleet."""
    if not (args.timeout > 0 and args.weights_timeout > 0):
        return fail("instances", "--timeout and --weights-timeout must be positive", 2,
                    args.json)
    apps = modal_apps()
    try:
        keys = identity_files(args.identity)
        accounts = some_accounts()
    except NoAccounts as exc:
        if apps is None:
            return fail("instances", exc, 2, args.json)
        accounts = []
    except (ValueError, ConfigError) as exc:
        return fail("instances", exc, 2, args.json)
    if not accounts:  # Modal apps launched from here, and no provider account
        apps = apps or []  # NoAccounts came with Modal apps to show
        print(json.dumps({"ok": True, "rows": [], "modal": apps}) if args.json else
              "\n".join(modal_line(a) for a in apps) or "no running Modal app")
        return 0
    say = None if args.json else (lambda line: print(line, file=sys.stderr))
    fleet = list_fleet(accounts, FleetOptions(timeout=args.timeout, ssh=args.ssh,
                                              accept_new=args.accept_new,
                                              ssh_options=key_options(keys),
                                              idle_gpu=args.idle_gpu, weights=args.weights,
                                              weights_timeout=args.weights_timeout),
                       progress=say)
    failed = all(row.instance is None for row in fleet.rows) and \
        any(row.error for row in fleet.rows)
    if args.json:
        print(json.dumps({"ok": not failed, **fleet.to_dict(), "modal": apps or []}))
    else:
        print_fleet(fleet)
        for app in apps or []:
            print(modal_line(app))
    return 1 if failed else 0
