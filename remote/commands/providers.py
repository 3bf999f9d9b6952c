"""``gpurent providers check``: the read-only canary of every configured account
(``remote.billing.canary``)."""

from __future__ import annotations

import argparse
import json
from functools import partial

from remote.billing.accounts import some_accounts
from remote.billing.canary import check_account
from remote.commands.errors import fail
from remote.config import ConfigError
from remote.fleet.fleet import all_at_once
from trainer.version import __version__


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``providers`` subcommand."""
    p = sub.add_parser(
        "providers",
        help="check that each provider account answers as gpurent reads it (read-only)",
        description="check: for every configured account (VAST_API_KEY..., [[accounts]] "
        "in the config file), list the instances, read one twice, and compare every "
        "field gpurent relies on with the type it expects; say which API version "
        "answered and how the rate limit behaved. Nothing is changed. The report holds no "
        "key and no field's value: paste it into a bug report. Run it once per account, "
        "and again when a provider changes its API. Exit 0 all as expected, 1 something "
        "differs or failed, 2 bad input.",
    )
    p.add_argument("what", choices=("check",))
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="limit of each API call (default 20)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check every account at once; print the report."""
    try:
        accounts = some_accounts()
    except ConfigError as exc:
        return fail("providers", exc, 2, args.json)
    found = all_at_once({a.name: partial(check_account, a, args.timeout)
                         for a in accounts}, args.timeout * 6 + 10)
    checks = []
    for account in accounts:
        answer = found[account.name]
        if isinstance(answer, BaseException):
            return fail("providers", f"{account.name}: {answer}", 1, args.json)
        checks.append(answer)
    ok = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ok": ok, "version": __version__,
                          "accounts": [c.to_dict() for c in checks]}))
    else:
        print(f"gpurent {__version__} providers check")
        for check in checks:
            print("\n".join(check.lines()))
    return 0 if ok else 1
