"""``python3 -m trainer guard RUN_DIR --when done|dead|idle=MINUTES --then stop|destroy``:
stop or destroy this box through the provider's API once the run is over and its
weights are safe. Standard library only; started detached by ``remote.runs.guard.arm_guard``.

Triggers (``--when``):

* ``done``: the run ended: its status closed (``completed``, ``failed`` or ``stopped``),
  or it is dead: its process is gone while the status still says running, or it has
  been ``stalled`` for ``--stall-minutes`` (``dead`` is another name for ``done``);
* ``idle=MINUTES``: nothing worked for MINUTES: no GPU busy (``nvidia-smi``; without it,
  no live training process) and no growth of ``train.log``;
* ``--max-hours H`` in any case: a hard lifetime, like a serverless timeout.

Every poll's nvidia-smi sample is appended to the box's GPU ring (``trainer.guard.ring``),
from which the laptop's listings tell how long the GPUs have been quiet.

After a trigger (not after ``--max-hours``) it waits up to ``--push-wait`` seconds for
the final push (``trainer.hub.safe.verified_safety``: the newest weights of every run this
box knows, confirmed by the Hub at the recorded commit, by sha256), as long as someone
may still push (the trainer lives, or a push process runs). It never destroys
unsafe weights: it stops the instance instead and says so (on a provider without stop it
leaves the instance running and raises an alarm). It does not give up while the instance
may bill (``trainer.guard.act``): API failures are retried with a backoff doubling from
``--retry-backoff`` up to ``--retry-max`` seconds, a destroy that did not take is re-sent,
then the instance is stopped, until ``--give-up-after`` seconds; what cannot be ended
is a persistent ``alarm`` in ``guard.json``. Every decision and step goes to
``RUN_DIR/guard.log``; the state for ``gpurent status`` and the TUI goes to
``RUN_DIR/guard.json``.

The API key is the one the provider puts in the instance (Vast ``CONTAINER_API_KEY``,
which manages this instance only; RunPod ``RUNPOD_API_KEY``), read from this environment
or PID 1's. The laptop's account key comes only when the user asked for it
(``--key-stdin``, the first line of stdin): whoever controls the host can read it here.
Lambda Cloud puts no key in its instances: without one the guard refuses to arm and
says that the billing must be ended from the laptop. Webhook URLs come from
``--notify-stdin`` (every further line: ``URL`` or ``FORMAT URL``). No secret is ever
logged or written anywhere.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

from trainer import runfiles
from trainer.guard.loop import EXIT_USAGE, Guard, GuardConfig
from trainer.guard.notify import Target, parse_targets
from trainer.guard.state import (
    ACTIVE_STATES,
    GUARD_FILE,
    GUARD_LOG,
    NOTIFY_FORMATS,
    AlreadyArmed,
    GuardError,
    parse_when,
    read_guard,
)
from trainer.providers import ProviderError, get_provider
from trainer.providers.base import Provider
from trainer.providers.detect import BOX_KEY_VARIABLES, box_api_key, detect_instance
from trainer.text import rate


def build_parser() -> argparse.ArgumentParser:
    """The ``trainer guard`` options."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer guard",
        description="Stop or destroy this instance through the provider's API once the "
        "run is over and best.pt is safe (never destroys unsafe weights: stops instead).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--when", required=True, metavar="done|idle=MINUTES",
                   help="done: the run ended (completed, failed, stopped, or dead: its "
                   "process gone or stalled past --stall-minutes); idle=MINUTES: nothing "
                   "worked for MINUTES")
    p.add_argument("--then", required=True, choices=("stop", "destroy"))
    p.add_argument("--max-hours", type=float, default=None, metavar="H",
                   help="hard lifetime: act after H hours whatever the run does")
    p.add_argument("--provider", choices=("vast", "runpod", "lambda"),
                   help="default: detected from the instance's environment")
    p.add_argument("--instance", metavar="ID", help="default: detected")
    p.add_argument("--key-stdin", action="store_true",
                   help="read the provider API key from the first line of stdin (the "
                   "laptop's account key, when the user asked to send it); default: the "
                   "key the provider put in this instance")
    p.add_argument("--hub-repo", action="append", default=[], metavar="ORG/NAME",
                   help="a Hub repository of the user's (repeatable): only a copy there "
                   "makes the weights safe to destroy (default: none)")
    p.add_argument("--base-url", metavar="URL", help="provider API base URL (testing)")
    p.add_argument("--poll", type=float, default=30.0, metavar="S",
                   help="seconds between looks at the run (default 30)")
    p.add_argument("--push-wait", type=float, default=900.0, metavar="S",
                   help="longest wait for the final push after the trigger (default 900)")
    p.add_argument("--confirm-timeout", type=float, default=180.0, metavar="S",
                   help="how long to poll the API for the outcome (default 180)")
    p.add_argument("--stall-minutes", type=float, default=30.0, metavar="M",
                   help="a run stalled this long counts as dead (default 30)")
    p.add_argument("--retry-backoff", type=float, default=5.0, metavar="S",
                   help="first wait before retrying a failing provider API (default 5)")
    p.add_argument("--retry-max", type=float, default=60.0, metavar="S",
                   help="longest wait between retries (default 60: once the API is "
                   "back, the billing ends within about a minute)")
    p.add_argument("--give-up-after", type=float, default=86400.0, metavar="S",
                   help="hard deadline for ending the billing, then an alarm (default "
                   "86400: a day)")
    p.add_argument("--api-timeout", type=float, default=15.0, metavar="S",
                   help="timeout of one provider API request (default 15)")
    p.add_argument("--notify-stdin", action="store_true",
                   help="read webhook targets from stdin (after the key line with "
                   "--key-stdin): one per line, URL or FORMAT URL")
    p.add_argument("--notify-format", choices=NOTIFY_FORMATS,
                   help="the shape of targets that name none (default: from the URL)")
    return p


def _setup_log(run_dir: Path) -> logging.Logger:
    log = logging.getLogger(f"gpurent.guard.{run_dir}")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = logging.FileHandler(run_dir / GUARD_LOG, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(runfiles.LOG_FORMAT, runfiles.LOG_DATEFMT))
    log.addHandler(handler)
    return log


def read_secrets(args: argparse.Namespace) -> tuple[str | None, str]:
    """The key line (``--key-stdin``) and the notify lines (``--notify-stdin``) from
    stdin, which is read only when one of them asks."""
    key = sys.stdin.readline().strip() if args.key_stdin else None
    notify = sys.stdin.read() if args.notify_stdin else ""
    return key, notify


def no_box_key(provider: str) -> str:
    """Why the guard has no key of this instance, and what to do, in one line."""
    variable = BOX_KEY_VARIABLES.get(provider)
    if variable is None:
        return ("Lambda Cloud puts no API key in its instances, so a guard on the box "
                "cannot end the billing: end it from the laptop (gpurent instance HOST "
                "destroy), or arm with --send-account-key (the account key then sits on "
                "the box)")
    return (f"no {variable} in this instance's environment (nor PID 1's), so the guard "
            "has no key of this instance; arm with --send-account-key to hand it the "
            "account key (which then sits on the box)")


def key_source(args: argparse.Namespace, provider: str) -> str:
    """Which key the guard acts with, for its log."""
    if args.key_stdin:
        return "the account key sent from the laptop"
    return f"this instance's own key ({BOX_KEY_VARIABLES.get(provider)})"


def configure(args: argparse.Namespace,
              stdin_key: str | None) -> tuple[GuardConfig, Provider]:
    """Validate the options, find provider, instance and key; raise ``GuardError``."""
    run_dir = Path(args.run_dir)
    when, minutes = parse_when(args.when)
    for name in ("max_hours", "poll", "push_wait", "confirm_timeout", "stall_minutes",
                 "retry_backoff", "retry_max", "give_up_after", "api_timeout"):
        value = getattr(args, name)
        if value is not None and not (value > 0 and value != float("inf")):
            raise GuardError(f"--{name.replace('_', '-')} must be a positive number")
    existing = read_guard(run_dir)
    if existing and existing.get("alive") and existing.get("state") in ACTIVE_STATES:
        raise AlreadyArmed(f"a guard is already armed on this run (pid "
                           f"{existing.get('pid')}); disarm it first")
    provider_name, instance = args.provider, args.instance
    if not (provider_name and instance):
        found = detect_instance()
        if found is None or (provider_name and found[0] != provider_name):
            raise GuardError("cannot tell which instance this is: pass --provider and "
                             "--instance (no CONTAINER_ID / VAST_CONTAINERLABEL / "
                             "RUNPOD_POD_ID here)")
        provider_name = provider_name or found[0]
        instance = instance or found[1]
    key = stdin_key if args.key_stdin else box_api_key(provider_name)
    if not key:
        raise GuardError("no API key: stdin was empty" if args.key_stdin
                         else no_box_key(provider_name))
    try:
        provider = get_provider(provider_name, key, args.base_url,
                                timeout=args.api_timeout,
                                backoff=min(1.0, args.retry_backoff),
                                max_backoff=min(30.0, args.retry_max))
        instance = provider.check_id(instance)
    except ProviderError as exc:
        raise GuardError(str(exc)) from None
    if args.then == "stop" and not provider.can_stop:
        raise GuardError(f"{provider.title} cannot stop an instance: use --then destroy")
    cfg = GuardConfig(run_dir=run_dir, when=when, idle_minutes=minutes, then=args.then,
                      max_hours=args.max_hours, provider=provider_name, instance=instance,
                      poll=args.poll, push_wait=args.push_wait,
                      confirm_timeout=args.confirm_timeout, stall_minutes=args.stall_minutes,
                      retry_backoff=args.retry_backoff, retry_max=args.retry_max,
                      give_up_after=args.give_up_after, hub_repos=tuple(args.hub_repo))
    return cfg, provider


def main(argv: list[str]) -> int:
    """Run the guard in the foreground (``arm_guard`` starts it detached)."""
    args = build_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"trainer guard: {run_dir} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    stdin_key, notify_text = read_secrets(args)
    log = _setup_log(run_dir)
    try:
        targets: list[Target] = parse_targets(notify_text, args.notify_format)
        cfg, provider = configure(args, stdin_key)
    except GuardError as exc:
        log.error("not armed: %s", exc)
        print(f"trainer guard: {exc}", file=sys.stderr)
        if isinstance(exc, AlreadyArmed):
            return EXIT_USAGE
        runfiles.atomic_write_json(run_dir / GUARD_FILE, {
            "schema_version": 1, "state": "error", "armed": False, "when": args.when,
            "then": args.then, "pid": os.getpid(), "last_decision": f"not armed: {exc}",
            "decided_at": runfiles.utc_now_iso()})
        return EXIT_USAGE
    try:
        inst = provider.get_instance(cfg.instance)
    except ProviderError as exc:
        Guard(cfg, provider, log).decide("error", f"not armed: {exc}", level=logging.ERROR)
        print(f"trainer guard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    guard = Guard(cfg, provider, log, notify=targets, price_per_hour=inst.price_per_hour)
    for sig in (signal.SIGTERM, signal.SIGINT):  # SIGHUP stays ignored (nohup)
        signal.signal(sig, guard.on_signal)
    limit = f", at most {cfg.max_hours:g} h" if cfg.max_hours else ""
    told = ""
    if targets:
        formats = ", ".join(t.format for t in targets)
        told = f"; notifying {len(targets)} webhook{'s' * (len(targets) > 1)} ({formats})"
    guard.decide("armed", f"armed: when {cfg.when_text} then {cfg.then}{limit}; "
                          f"{provider.title} instance {cfg.instance} is {inst.state}, "
                          f"running at {rate(inst.price_per_hour)}{told}; acting with "
                          f"{key_source(args, cfg.provider)}")
    return guard.run()
