"""``gpurent glance``: a read-only web page of every instance and run, for a phone
(``remote.glance``)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from remote.billing.accounts import NO_ACCOUNTS, configured_accounts
from remote.billing.providers import ConfigError
from remote.commands.errors import fail
from remote.commands.target import identity_files, key_options
from remote.fleet.boxweights import WEIGHTS_TIMEOUT
from remote.fleet.fleet import FleetOptions
from remote.glance import EVERY, LISTEN, MIN_EVERY, PORT, is_loopback, open_glance, running_url


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``glance`` subcommand."""
    p = sub.add_parser(
        "glance",
        help="a read-only web page of every box and run, for a phone (behind a token)",
        description="Serve one read-only page (standard library HTTP, GET only: no "
        "action of any kind) with every instance of every configured account (state, "
        "what it bills, idle, weights verdict, lease) and every run this laptop knows "
        "(the runs on each reached box and those launched from here: state and health, "
        "epoch and ETA, last metric, cost so far and projected, when last seen), and "
        "each run's metric chart and log tail. A background pass gathers it all every "
        "--every seconds (the fleet listing, then one SSH connection per reached box); "
        "requests are answered from that pass, never by asking a provider or a box. "
        "Every data request needs the token printed once at start, in the URL's "
        "fragment (#t=...), on 127.0.0.1 as well. It listens on 127.0.0.1 unless "
        "--listen says otherwise; reach it from a phone over Tailscale or an SSH tunnel "
        "(see the README), never a public port. Runs until Ctrl-C or SIGTERM. Exit 0 "
        "stopped, 1 the address could not be bound, 2 bad input.",
    )
    p.add_argument("--listen", default=LISTEN, metavar="ADDR",
                   help=f"address to listen on (default {LISTEN}: this machine only)")
    p.add_argument("--port", type=int, default=PORT, metavar="P",
                   help=f"port (default {PORT}; 0 picks a free one)")
    p.add_argument("--every", type=float, default=EVERY, metavar="S",
                   help=f"seconds between passes (default {EVERY:g}, at least {MIN_EVERY:g})")
    p.add_argument("--url", action="store_true",
                   help="print the link (with its token) of the glance running on this "
                   "laptop, and exit (1 when none runs)")
    p.add_argument("--timeout", type=float, default=20.0, metavar="S",
                   help="limit of each API call and each box's exec (default 20)")
    p.add_argument("--no-weights", dest="weights", action="store_false",
                   help="do not ask whether each box's weights are safe off it")
    p.add_argument("-i", "--identity", action="append", default=None, metavar="KEY",
                   help="private key file to log in to the boxes with, as `ssh -i` "
                   "(repeatable; a `Host vast:*` block of ~/.ssh/config works too)")
    p.add_argument("--accept-new", action="store_true",
                   help="accept and save an unknown host key (never a changed one)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Serve until SIGTERM/SIGINT (or print the running one's link)."""
    if args.url:
        url = running_url()
        if url is None:
            print("gpurent glance: none runs on this laptop (start one: gpurent glance)",
                  file=sys.stderr)
            return 1
        print(url)
        return 0
    if not (args.every >= MIN_EVERY and args.timeout > 0 and 0 <= args.port <= 65535):
        return fail("glance", f"--every must be at least {MIN_EVERY:g}, --timeout positive "
                    "and --port 0..65535", 2, False)
    try:
        keys = identity_files(args.identity)
        accounts = configured_accounts()
    except (ValueError, ConfigError) as exc:
        return fail("glance", exc, 2, False)
    options = FleetOptions(timeout=args.timeout, accept_new=args.accept_new,
                           ssh_options=key_options(keys), weights=args.weights,
                           weights_timeout=WEIGHTS_TIMEOUT)
    try:
        glance = open_glance(options, listen=args.listen, port=args.port, every=args.every)
    except OSError as exc:
        return fail("glance", f"cannot listen on {args.listen}:{args.port}: "
                    f"{exc.strerror or exc}", 1, False)
    ended = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_a: ended.set())
    glance.start()
    print(f"gpurent glance: open {glance.url}", flush=True)
    print("gpurent glance: that link carries the token (after #t=): anyone holding it "
          "can read this page; it changes at every start", file=sys.stderr)
    if not is_loopback(args.listen):
        print(f"gpurent glance: listening on {args.listen}, not only this machine: keep it "
              "on a private network (Tailscale) or reach 127.0.0.1 through `ssh -L`; "
              "never a public port", file=sys.stderr)
    if not accounts:
        print(f"gpurent glance: {NO_ACCOUNTS}; the page says so until one is",
              file=sys.stderr)
    print(f"gpurent glance: gathering every {args.every:g} s; Ctrl-C stops",
          file=sys.stderr, flush=True)
    ended.wait()
    glance.close()
    return 0
