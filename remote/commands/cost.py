"""``gpurent cost``: what the run costs, what a stopped instance keeps costing, and when
stopping beats destroying."""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from remote.billing.cost import cost_report, format_report
from remote.billing.providers import ConfigError, provider_for
from trainer import runfiles
from trainer.providers import ProviderError
from trainer.text import clean_text


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number >= 0")
    return value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``cost`` subcommand."""
    p = sub.add_parser(
        "cost",
        help="the money: run cost, stopped $/h, stop-versus-destroy break-even",
        description="Money figures: spent so far, $/epoch and the projected cost to finish "
        "(from RUN_DIR's status.json and the price), what a stopped instance keeps paying "
        "for its disk (GB x $/GB/month / 720 h), and the pause length beyond which "
        "destroying and rebuilding is cheaper than stopping. Prices come from the flags, "
        "else the provider's API (--provider/--instance), else defaults ($0.20/GB/month "
        "storage, $1.00 rebuild). Exit 0, or 2 for bad input.",
    )
    p.add_argument("run", nargs="?", metavar="RUN_DIR",
                   help="a run directory on this machine (for the run's figures)")
    p.add_argument("--price", type=_non_negative, metavar="USD_PER_H",
                   help="running price in $/h")
    p.add_argument("--disk-gb", type=_non_negative, metavar="GB", help="allocated disk")
    p.add_argument("--storage-per-gb-month", type=_non_negative, metavar="USD",
                   help="storage price in $/GB/month (default 0.20)")
    p.add_argument("--rebuild-usd", type=_non_negative, metavar="USD",
                   help="cost to re-rent and restage after a destroy (default 1.00)")
    p.add_argument("--provider", choices=("vast", "runpod", "lambda"),
                   help="the provider (Lambda cannot stop: no stop figures); with "
                   "--instance, price and disk are read from its API")
    p.add_argument("--instance", metavar="ID", help="the instance, read through --provider")
    p.add_argument("--base-url", metavar="URL", help="provider API base URL (testing)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the money figures."""

    def fail(message: str) -> int:
        print(f"gpurent cost: {clean_text(message)}", file=sys.stderr)
        return 2

    status = None
    if args.run:
        read = runfiles.read_status(Path(args.run))
        if not read.ok:
            return fail(read.reason)
        status = read.fields
    instance = None
    if args.instance:
        if not args.provider:
            return fail("--instance needs --provider")
        try:
            instance = provider_for(args.provider, base_url=args.base_url) \
                .get_instance(args.instance)
        except (ProviderError, ConfigError) as exc:
            return fail(str(exc))
    report = cost_report(price_per_hour=args.price, disk_gb=args.disk_gb,
                         storage_per_gb_month=args.storage_per_gb_month,
                         rebuild_usd=args.rebuild_usd, status=status, instance=instance,
                         provider=args.provider)
    if args.json:
        print(json.dumps(report.to_dict()))
    else:
        print("\n".join(format_report(report)))
    return 0
