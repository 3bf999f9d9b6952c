"""``python3 -m trainer guard RUN_DIR --when done|dead|idle=MINUTES --then stop|destroy``:
stop or destroy this box through the provider's API once the run is over and its
weights are safe. Standard library only; started detached by ``remote.guard.arm_guard``.

Triggers (``--when``):

* ``done``: the run closed its status (``completed``, ``failed`` or ``stopped``);
* ``dead``: as ``done``, or its process is gone while the status still says running;
* ``idle=MINUTES``: nothing worked for MINUTES: no GPU busy (``nvidia-smi``; without it,
  no live training process) and no growth of ``train.log``;
* ``--max-hours H`` in any case: a hard lifetime, like a serverless timeout.

After a trigger (not after ``--max-hours``) it waits up to ``--push-wait`` seconds for
the final push (``trainer.hub_safe``: ``best.pt`` on the Hub by sha256). It never destroys
unsafe weights: it stops the instance instead and says so (on a provider without stop it
leaves the instance running and says that). Every decision goes to ``RUN_DIR/guard.log``;
the state for ``gpurent status`` and the TUI goes to ``RUN_DIR/guard.json``.

The API key comes from ``--key-stdin`` (one line), else from the key the provider puts in
the instance (Vast ``CONTAINER_API_KEY``, RunPod ``RUNPOD_API_KEY``), read from this
environment or PID 1's. It is never logged or written anywhere.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import runfiles
from trainer.providers import ProviderError, get_provider
from trainer.providers.base import Provider, one_line
from trainer.providers.confirm import (
    ActionOutcome,
    StillBilling,
    destroy_and_confirm,
    stop_and_confirm,
)
from trainer.providers.detect import box_api_key, detect_instance

GUARD_FILE = "guard.json"
GUARD_LOG = "guard.log"
#: Where ``arm_guard`` sends the guard's stdout/stderr (crash tracebacks only).
GUARD_OUT = "guard.out"

#: States in which a guard process is (or should be) watching.
ACTIVE_STATES = ("armed", "waiting-for-push", "acting")
#: After the run's process is gone nobody will push any more: wait at most this long.
DEAD_PUSH_GRACE = 60.0
#: A GPU busier than this (percent) means work is being done.
GPU_BUSY_PERCENT = 10

#: Exit codes: 0 acted (or disarmed), 1 the action failed or was refused, 2 bad input.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class GuardError(Exception):
    """The guard cannot start; one line for the user."""


class AlreadyArmed(GuardError):
    """Another guard watches this run; its ``guard.json`` must be left alone."""


def parse_when(text: str) -> tuple[str, float | None]:
    """``("done", None)``, ``("dead", None)`` or ``("idle", minutes)``."""
    value = (text or "").strip().lower()
    if value in ("done", "dead"):
        return value, None
    if value.startswith("idle="):
        try:
            minutes = float(value[5:])
        except ValueError:
            minutes = -1.0
        if minutes > 0 and minutes == minutes and minutes != float("inf"):
            return "idle", minutes
    raise GuardError(f"--when {one_line(text, 40)!r}: use done, dead or idle=MINUTES "
                     "(MINUTES > 0)")


def read_guard(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``RUN/guard.json`` with ``alive`` added (whether its pid runs here), or ``None``."""
    path = Path(run_dir) / GUARD_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    data["alive"] = runfiles.local_pid_alive(pid) if isinstance(pid, int) else False
    return data


def gpu_utilisation(timeout: float = 10.0) -> list[int] | None:
    """Utilisation (percent) of each GPU from ``nvidia-smi``; ``None`` when unavailable."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "--query-gpu=utilization.gpu", "--format=csv,noheader,"
                              "nounits"], capture_output=True, timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    values = []
    for line in out.stdout.decode("ascii", errors="replace").splitlines():
        line = line.strip()
        if line.isdigit():
            values.append(int(line))
    return values or None


@dataclass(frozen=True)
class GuardConfig:
    """What the guard watches and does."""

    run_dir: Path
    when: str
    idle_minutes: float | None
    then: str
    max_hours: float | None
    provider: str
    instance: str
    poll: float = 30.0
    push_wait: float = 900.0
    confirm_timeout: float = 180.0

    @property
    def when_text(self) -> str:
        """``--when`` as given (``idle=30``)."""
        return f"idle={self.idle_minutes:g}" if self.when == "idle" else self.when


class Guard:
    """The watch loop and the action. ``gpu_util`` and ``pid_alive`` are injectable."""

    def __init__(self, cfg: GuardConfig, provider: Provider, log: logging.Logger, *,
                 gpu_util: Callable[[], list[int] | None] = gpu_utilisation,
                 pid_alive: Callable[[int], bool] = runfiles.local_pid_alive) -> None:
        self.cfg = cfg
        self.provider = provider
        self.log = log
        self.gpu_util = gpu_util
        self.pid_alive = pid_alive
        self.disarm = threading.Event()
        self._acting = False
        self._t0 = time.monotonic()
        self.started_at = runfiles.utc_now_iso()
        self.state: dict[str, Any] = {}

    # ------------------------------------------------------------------ state file

    def write_state(self, state: str, decision: str, **extra: Any) -> None:
        """Replace ``guard.json`` (and log ``decision``)."""
        cfg = self.cfg
        deadline = None
        if cfg.max_hours is not None:
            deadline = runfiles.utc_now_iso(time.time() + cfg.max_hours * 3600
                                            - (time.monotonic() - self._t0))
        self.state = {
            "schema_version": 1, "state": state, "armed": state in ACTIVE_STATES,
            "when": cfg.when_text, "then": cfg.then, "max_hours": cfg.max_hours,
            "started_at": self.started_at, "deadline_at": deadline, "pid": os.getpid(),
            "pgid": os.getpgid(0), "provider": cfg.provider, "instance": cfg.instance,
            "last_decision": decision, "decided_at": runfiles.utc_now_iso(),
            "outcome": self.state.get("outcome"),
        }
        self.state.update(extra)
        runfiles.atomic_write_json(cfg.run_dir / GUARD_FILE, self.state)

    def decide(self, state: str, decision: str, *, level: int = logging.INFO,
               **extra: Any) -> None:
        """Log a decision and record it in ``guard.json``."""
        self.log.log(level, "%s", decision)
        self.write_state(state, decision, **extra)

    # ------------------------------------------------------------------ watching

    def _sleep(self, seconds: float) -> bool:
        """Sleep; ``True`` when a disarm came meanwhile."""
        return self.disarm.wait(max(0.0, seconds))

    def _over_lifetime(self) -> bool:
        cfg = self.cfg
        return cfg.max_hours is not None and \
            time.monotonic() - self._t0 >= cfg.max_hours * 3600

    def watch(self) -> tuple[str, str] | None:
        """Poll the run until a trigger fires: ``(trigger, reason)``; ``None`` = disarmed."""
        cfg = self.cfg
        log_path = cfg.run_dir / runfiles.LOG_FILE
        history: list[tuple[float, int]] = []
        last_verdict = None
        last_busy = time.monotonic()
        last_size = -1
        while True:
            if self._over_lifetime():
                return "max-hours", f"--max-hours {cfg.max_hours:g} reached"
            now = time.time()
            size = log_path.stat().st_size if log_path.exists() else 0
            history = [*history[-20:], (now, size)]
            read = runfiles.read_status(cfg.run_dir)
            health = runfiles.judge_health(read, now=now, pid_alive=self.pid_alive,
                                           log_history=history)
            if health.verdict != last_verdict:
                last_verdict = health.verdict
                self.decide("armed", f"run is {health.verdict}: {health.reason}")
            verdict = health.verdict
            if cfg.when == "done" and verdict in ("completed", "failed", "stopped"):
                return "done", f"the run is {verdict} ({health.reason})"
            if cfg.when == "dead" and verdict in ("completed", "failed", "stopped", "dead"):
                return "dead", f"the run is {verdict} ({health.reason})"
            if cfg.when == "idle":
                util = self.gpu_util()
                grew = last_size >= 0 and size != last_size
                if util is not None:
                    busy = grew or max(util) >= GPU_BUSY_PERCENT
                else:
                    busy = grew or verdict in ("live", "slow", "stalled")
                if busy:
                    last_busy = time.monotonic()
                idle_for = time.monotonic() - last_busy
                if idle_for >= (cfg.idle_minutes or 0) * 60:
                    gpus = "no GPU busy" if util is not None else "no training process"
                    return "idle", (f"idle for {runfiles.format_duration(idle_for)} ({gpus}, "
                                    f"no log growth; run {verdict})")
            last_size = size
            if self._sleep(cfg.poll):
                return None

    def safety(self) -> dict[str, Any]:
        """``trainer safe``'s answer for the run (unsafe when it cannot be read)."""
        from trainer.hub_safe import safety

        try:
            return safety(self.cfg.run_dir)
        except (OSError, ValueError) as exc:
            return {"safe": False, "reason": f"cannot check the weights: {one_line(exc)}"}

    def wait_for_safe(self, trigger: str) -> dict[str, Any]:
        """Wait for ``best.pt`` to be safe (the final push) and return the last answer."""
        cfg = self.cfg
        answer = self.safety()
        if answer.get("safe") or trigger == "max-hours":
            return answer
        wait = runfiles.format_duration(cfg.push_wait)
        self.decide("waiting-for-push", f"waiting up to {wait} for the final push: "
                                        f"{answer.get('reason')}")
        start = time.monotonic()
        dead_since: float | None = None
        while True:
            if self._sleep(min(cfg.poll, 5.0)) or self._over_lifetime():
                return answer
            answer = self.safety()
            if answer.get("safe"):
                return answer
            pid = runfiles.read_status(cfg.run_dir).get("pid")
            alive = isinstance(pid, int) and self.pid_alive(pid)
            now = time.monotonic()
            if not alive and dead_since is None:
                dead_since = now
            waited = now - start
            if waited >= cfg.push_wait:
                return answer
            if dead_since is not None and now - dead_since >= min(cfg.push_wait,
                                                                   DEAD_PUSH_GRACE):
                return answer  # the trainer is gone: nobody will push any more

    # ------------------------------------------------------------------ acting

    def act(self, trigger: str, reason: str) -> int:
        """Wait for safe weights, then stop or destroy; return the exit code."""
        cfg = self.cfg
        self.log.info("trigger %s: %s", trigger, reason)
        answer = self.wait_for_safe(trigger)
        if self.disarm.is_set() and not self._over_lifetime():
            self.decide("disarmed", "disarmed while waiting for the final push")
            return EXIT_OK
        safe, why = bool(answer.get("safe")), str(answer.get("reason") or "")
        self.log.info("weights %s: %s", "safe" if safe else "NOT safe", why)
        action = cfg.then
        if cfg.then == "destroy" and not safe:
            if not self.provider.can_stop:
                self.decide("refused", f"NOT destroying: best.pt is not safe ({why}); "
                            f"{self.provider.title} cannot stop, so the instance is left "
                            "running and keeps billing: push or pull the weights, then "
                            "destroy it", level=logging.ERROR)
                return EXIT_FAILED
            action = "stop"
            self.log.warning("NOT destroying: best.pt is not safe (%s); stopping instead, "
                             "which keeps the disk and the weights (storage keeps billing)",
                             why)
        self._acting = True
        verb = "destroying" if action == "destroy" else "stopping"
        self.decide("acting", f"{verb} {self.provider.title} instance {cfg.instance} "
                              f"({trigger}: {reason})")
        return self._perform(action, trigger)

    def _perform(self, action: str, trigger: str) -> int:
        cfg = self.cfg
        do = destroy_and_confirm if action == "destroy" else stop_and_confirm
        interval = max(0.05, min(5.0, cfg.poll))
        for attempt in range(1, 4):
            try:
                outcome: ActionOutcome = do(self.provider, cfg.instance,
                                            timeout=cfg.confirm_timeout, interval=interval)
            except StillBilling as exc:
                self.decide("alarm", str(exc), level=logging.CRITICAL,
                            outcome={**exc.outcome.to_dict(), "trigger": trigger})
                return EXIT_FAILED
            except ProviderError as exc:
                transient = exc.kind in ("timeout", "network", "server", "rate_limited")
                if not transient or attempt == 3:
                    self.decide("error", f"{action} failed: {exc}", level=logging.ERROR,
                                outcome={"action": action, "confirmed": False,
                                         "message": str(exc), "trigger": trigger})
                    return EXIT_FAILED
                self.log.warning("%s failed (attempt %d of 3), retrying: %s", action,
                                 attempt, exc)
                time.sleep(min(60.0, 5.0 * attempt))
                continue
            level = logging.INFO if outcome.confirmed else logging.ERROR
            self.decide("done" if outcome.confirmed else "alarm", outcome.message, level=level,
                        outcome={**outcome.to_dict(), "trigger": trigger})
            return EXIT_OK if outcome.confirmed else EXIT_FAILED
        return EXIT_FAILED  # not reached: the last attempt returns

    def run(self) -> int:
        """Watch, then act; ``disarm`` (SIGTERM) ends it quietly before it acts."""
        fired = self.watch()
        if fired is None:
            self.decide("disarmed", "disarmed (SIGTERM): the instance is left as it is")
            return EXIT_OK
        return self.act(*fired)

    def on_signal(self, signum: int, _frame: object) -> None:
        """SIGTERM/SIGINT: disarm, unless the action is already under way."""
        if self._acting:
            self.log.warning("%s received while acting: finishing the action",
                             signal.Signals(signum).name)
            return
        self.disarm.set()


# ---------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    """The ``trainer guard`` options."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer guard",
        description="Stop or destroy this instance through the provider's API once the "
        "run is over and best.pt is safe (never destroys unsafe weights: stops instead).")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--when", required=True, metavar="done|dead|idle=MINUTES",
                   help="done: the run ended; dead: ended or its process died; "
                   "idle=MINUTES: nothing worked for MINUTES")
    p.add_argument("--then", required=True, choices=("stop", "destroy"))
    p.add_argument("--max-hours", type=float, default=None, metavar="H",
                   help="hard lifetime: act after H hours whatever the run does")
    p.add_argument("--provider", choices=("vast", "runpod", "lambda"),
                   help="default: detected from the instance's environment")
    p.add_argument("--instance", metavar="ID", help="default: detected")
    p.add_argument("--key-stdin", action="store_true",
                   help="read the provider API key from the first line of stdin")
    p.add_argument("--base-url", metavar="URL", help="provider API base URL (testing)")
    p.add_argument("--poll", type=float, default=30.0, metavar="S",
                   help="seconds between looks at the run (default 30)")
    p.add_argument("--push-wait", type=float, default=900.0, metavar="S",
                   help="longest wait for the final push after the trigger (default 900)")
    p.add_argument("--confirm-timeout", type=float, default=180.0, metavar="S",
                   help="how long to poll the API for the outcome (default 180)")
    return p


def _setup_log(run_dir: Path) -> logging.Logger:
    log = logging.getLogger(f"gpurent.guard.{run_dir}")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = logging.FileHandler(run_dir / GUARD_LOG, mode="a", encoding="utf-8")
    handler.setFormatter(logging.Formatter(runfiles.LOG_FORMAT, runfiles.LOG_DATEFMT))
    log.addHandler(handler)
    return log


def configure(args: argparse.Namespace, stdin_key: str | None) -> tuple[GuardConfig, Provider]:
    """Validate the options, find provider, instance and key; raise ``GuardError``."""
    run_dir = Path(args.run_dir)
    when, minutes = parse_when(args.when)
    for name in ("max_hours", "poll", "push_wait", "confirm_timeout"):
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
        where = "stdin was empty" if args.key_stdin else "none in this instance's environment"
        raise GuardError(f"no API key for {provider_name} ({where}); pass it with --key-stdin")
    try:
        provider = get_provider(provider_name, key, args.base_url)
        instance = provider.check_id(instance)
    except ProviderError as exc:
        raise GuardError(str(exc)) from None
    if args.then == "stop" and not provider.can_stop:
        raise GuardError(f"{provider.title} cannot stop an instance: use --then destroy")
    cfg = GuardConfig(run_dir=run_dir, when=when, idle_minutes=minutes, then=args.then,
                      max_hours=args.max_hours, provider=provider_name, instance=instance,
                      poll=args.poll, push_wait=args.push_wait,
                      confirm_timeout=args.confirm_timeout)
    return cfg, provider


def main(argv: list[str]) -> int:
    """Run the guard in the foreground (``arm_guard`` starts it detached)."""
    args = build_parser().parse_args(argv)
    run_dir = Path(args.run_dir)
    if not run_dir.is_dir():
        print(f"trainer guard: {run_dir} is not a directory", file=sys.stderr)
        return EXIT_USAGE
    stdin_key = sys.stdin.readline().strip() if args.key_stdin else None
    log = _setup_log(run_dir)
    try:
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
    guard = Guard(cfg, provider, log)
    try:
        inst = provider.get_instance(cfg.instance)
    except ProviderError as exc:
        guard.decide("error", f"not armed: {exc}", level=logging.ERROR)
        print(f"trainer guard: {exc}", file=sys.stderr)
        return EXIT_USAGE
    for sig in (signal.SIGTERM, signal.SIGINT):  # SIGHUP stays ignored (nohup)
        signal.signal(sig, guard.on_signal)
    rate = "unknown $/h" if inst.price_per_hour is None else f"${inst.price_per_hour:.4f}/h"
    limit = f", at most {cfg.max_hours:g} h" if cfg.max_hours else ""
    guard.decide("armed", f"armed: when {cfg.when_text} then {cfg.then}{limit}; "
                          f"{provider.title} instance {cfg.instance} is {inst.state} at {rate}")
    return guard.run()
