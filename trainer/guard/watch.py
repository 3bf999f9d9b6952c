"""The guard's watch loop: look at the run every poll, decide, and act through the
provider's API, recording each decision in ``guard.log`` and ``guard.json``."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import procid, runfiles, smi
from trainer.guard.state import ACTIVE_STATES, GUARD_FILE
from trainer.providers import ProviderError
from trainer.providers.base import Provider
from trainer.providers.confirm import (
    ActionOutcome,
    StillBilling,
    destroy_and_confirm,
    stop_and_confirm,
)
from trainer.text import format_duration, one_line

#: After the run's process is gone nobody will push any more: wait at most this long.
DEAD_PUSH_GRACE = 60.0
#: A GPU busier than this (percent) means work is being done.
GPU_BUSY_PERCENT = 10

#: Exit codes: 0 acted (or disarmed), 1 the action failed or was refused, 2 bad input.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def gpu_utilisation(timeout: float = 10.0) -> list[int] | None:
    """Utilisation (percent) of each GPU from ``nvidia-smi``; ``None`` when unavailable."""
    rows, _error = smi.query(("utilization.gpu",), timeout)
    values = [int(row["utilization.gpu"]) for row in rows or ()
              if row["utilization.gpu"] is not None]
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
        self.identity = procid.identity(os.getpid())  # what `disarm` checks before a signal
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
            **self.identity,
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
                    return "idle", (f"idle for {format_duration(idle_for)} ({gpus}, "
                                    f"no log growth; run {verdict})")
            last_size = size
            if self._sleep(cfg.poll):
                return None

    def safety(self) -> dict[str, Any]:
        """Whether every run's newest weights on this box are confirmed by the Hub
        (``trainer.hub.safe.verified_safety``); unsafe when that cannot be told."""
        from trainer.hub.safe import verified_safety

        try:
            return verified_safety(self.cfg.run_dir)
        except (OSError, ValueError) as exc:
            return {"safe": False, "reason": f"cannot check the weights: {one_line(exc)}"}

    def wait_for_safe(self, trigger: str) -> dict[str, Any]:
        """Wait for ``best.pt`` to be safe (the final push) and return the last answer."""
        cfg = self.cfg
        answer = self.safety()
        if answer.get("safe") or trigger == "max-hours":
            return answer
        wait = format_duration(cfg.push_wait)
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
