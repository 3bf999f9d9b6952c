"""The guard's watch loop: look at the run every poll, decide, and act through the
provider's API (``trainer.guard.act``: retried until the billing ends or a hard
deadline), recording each decision in ``guard.log`` and ``guard.json`` and telling the
webhooks (``trainer.guard.notify``). Each poll's GPU sample also goes to the box's GPU
ring (``trainer.guard.ring``), which the laptop's probe reads."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import engines, procid, runfiles, smi
from trainer.guard import ring
from trainer.guard.act import Ending, Policy, end_billing
from trainer.guard.lease import lease_passed
from trainer.guard.notify import Notifier, Target
from trainer.guard.state import ACTIVE_STATES, GUARD_FILE
from trainer.health import apply_stop, judge_health, local_pid_alive
from trainer.providers.base import Provider
from trainer.text import format_duration, money, one_line, rate

#: A GPU busier than this (percent) means work is being done.
GPU_BUSY_PERCENT = 10
#: Verdicts that end a run for ``--when done``, and those worth a notification.
ENDED = ("completed", "failed", "stopped", "dead")
#: Steps kept in ``guard.json`` (all of them are in ``guard.log``).
KEEP_STEPS = 20
#: The longest wait for notifications under way before the guard exits (seconds).
NOTIFY_FLUSH = 120.0

#: Exit codes: 0 acted (or disarmed), 1 the action failed or was refused, 2 bad input.
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def gpu_sample(timeout: float = 10.0) -> list[dict[str, Any]] | None:
    """Each GPU's row of the ring's fields (``trainer.guard.ring.FIELDS``) from
    ``nvidia-smi``; ``None`` when it is missing or failed."""
    rows, _error = smi.query(ring.FIELDS, timeout)
    return rows or None


def utilisation(rows: list[dict[str, Any]] | None) -> list[float] | None:
    """The utilisation (percent) of each GPU that reported one; ``None`` for none."""
    values = [row["utilization.gpu"] for row in rows or ()
              if row["utilization.gpu"] is not None]
    return values or None


def filled_status(run_dir: Path) -> runfiles.StatusRead:
    """``status.json`` with what a final LibreYOLO status drops taken from its history."""
    read = runfiles.read_status(run_dir)
    if not read.ok or read.get("state") == "running":
        return read
    return runfiles.StatusRead(engines.fill_from_history(read.fields,
                                                         engines.last_metrics_row(run_dir)))


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
    #: A live run that is ``stalled`` this long counts as dead.
    stall_minutes: float = 30.0
    #: Retries of a failing provider API: the first wait, its cap, the hard deadline.
    retry_backoff: float = 5.0
    retry_max: float = 60.0
    give_up_after: float = 86400.0
    #: The user's Hub repositories: only a copy in one of them makes the weights safe.
    hub_repos: tuple[str, ...] = ()

    @property
    def policy(self) -> Policy:
        """How hard ``trainer.guard.act`` tries."""
        return Policy(confirm_timeout=self.confirm_timeout,
                      interval=max(0.05, min(5.0, self.poll)), backoff=self.retry_backoff,
                      max_backoff=self.retry_max, give_up_after=self.give_up_after)

    @property
    def when_text(self) -> str:
        """``--when`` as given (``idle=30``)."""
        return f"idle={self.idle_minutes:g}" if self.when == "idle" else self.when


class Guard:
    """The watch loop and the action. ``gpu_rows`` and ``pid_alive`` are injectable."""

    def __init__(self, cfg: GuardConfig, provider: Provider, log: logging.Logger, *,
                 gpu_rows: Callable[[], list[dict[str, Any]] | None] = gpu_sample,
                 pid_alive: Callable[[int], bool] = local_pid_alive,
                 notify: list[Target] | None = None,
                 price_per_hour: float | None = None) -> None:
        self.cfg = cfg
        self.provider = provider
        self.log = log
        self.gpu_rows = gpu_rows
        self.pid_alive = pid_alive
        self.price_per_hour = price_per_hour
        self.disarm = threading.Event()
        self._acting = False
        self._t0 = time.monotonic()
        self._lock = threading.RLock()
        self.started_at = runfiles.utc_now_iso()
        self.ended_at: float | None = None
        self.run_verdict: str | None = None
        self.identity = procid.identity(os.getpid())  # what `disarm` checks before a signal
        self.state: dict[str, Any] = {}
        self.notifier = Notifier(notify or [], self._notified)

    # ------------------------------------------------------------------ state file

    def write_state(self, state: str, decision: str, **extra: Any) -> None:
        """Replace ``guard.json`` (and log ``decision``)."""
        cfg = self.cfg
        deadline = None
        if cfg.max_hours is not None:
            deadline = runfiles.utc_now_iso(time.time() + cfg.max_hours * 3600
                                            - (time.monotonic() - self._t0))
        with self._lock:
            old = self.state
            self.state = {
                "schema_version": 1, "state": state, "armed": state in ACTIVE_STATES,
                "when": cfg.when_text, "then": cfg.then, "max_hours": cfg.max_hours,
                "started_at": self.started_at, "deadline_at": deadline, "pid": os.getpid(),
                **self.identity,
                "pgid": os.getpgid(0), "provider": cfg.provider, "instance": cfg.instance,
                "last_decision": decision, "decided_at": runfiles.utc_now_iso(),
                "outcome": old.get("outcome"), "alarm": old.get("alarm"),
                "steps": old.get("steps") or [], "notify": old.get("notify") or [],
                "stall_minutes": cfg.stall_minutes, "give_up_after": cfg.give_up_after,
                "price_per_hour": self.price_per_hour, "run_verdict": self.run_verdict,
                "run_ended_at": None if self.ended_at is None
                else runfiles.utc_now_iso(self.ended_at),
            }
            self.state.update(extra)
            runfiles.atomic_write_json(cfg.run_dir / GUARD_FILE, self.state)

    def decide(self, state: str, decision: str, *, level: int = logging.INFO,
               **extra: Any) -> None:
        """Log a decision and record it in ``guard.json``."""
        self.log.log(level, "%s", decision)
        self.write_state(state, decision, **extra)

    def step(self, step: str, text: str, level: int) -> None:
        """One step of the action: logged (with its time) and kept in ``guard.json``."""
        entry = {"at": runfiles.utc_now_iso(), "step": step, "result": text}
        with self._lock:
            steps = [*(self.state.get("steps") or []), entry][-KEEP_STEPS:]
            self.decide("acting", text, level=level, steps=steps)

    # ------------------------------------------------------------------ notifications

    def message(self, event: str, title: str, what: str) -> dict[str, Any]:
        """A notification: the facts (run, state, best metric, what the guard did, money)
        and ``title``/``text`` for people."""
        cfg = self.cfg
        read = filled_status(cfg.run_dir)
        run = cfg.run_dir.resolve().name
        best = None
        if read.get("best_metric") is not None:
            best = {"metric": read.get("best_metric_name") or "metric",
                    "value": read.get("best_metric"), "epoch": read.get("best_epoch")}
        price = self.price_per_hour
        elapsed = read.get("elapsed_seconds") or read.get("total_seconds")
        run_usd = None
        if price is not None and isinstance(elapsed, (int, float)):
            run_usd = elapsed * price / 3600
        idle = None if self.ended_at is None else max(0.0, time.time() - self.ended_at)
        idle_usd = None if idle is None or price is None else idle * price / 3600
        spent = None if run_usd is None else run_usd + (idle_usd or 0.0)
        verdict = one_line(self.run_verdict or read.get("state") or "unknown", 40)
        host = one_line(socket.gethostname(), 60)
        lines = [f"run {one_line(run, 80)} on {host}: {verdict}"]
        if best is not None and isinstance(best["value"], (int, float)):
            lines.append(one_line(f"best {best['metric']} {best['value']:.4g} at epoch "
                                  f"{best['epoch']}", 120))
        lines.append(f"guard: {one_line(what, 600)}")
        money_line = f"{money(spent)} so far at {rate(price)}"
        if idle is not None:
            money_line += (f" (idle after the run {format_duration(idle)}: "
                           f"{money(idle_usd)})")
        lines.append(money_line)
        return {"event": event, "title": f"gpurent: {title}", "text": "\n".join(lines),
                "run": run, "run_dir": str(cfg.run_dir), "host": host, "state": verdict,
                "best": best, "guard": what, "guard_state": self.state.get("state"),
                "provider": cfg.provider, "instance": cfg.instance,
                "price_per_hour": price, "spent_usd": spent, "idle_seconds": idle,
                "idle_usd": idle_usd, "outcome": self.state.get("outcome"),
                "alarm": self.state.get("alarm"), "at": runfiles.utc_now_iso()}

    def notify(self, event: str, title: str, what: str) -> None:
        """Tell the webhooks (in the background; nothing when there are none)."""
        if self.notifier.targets:
            self.notifier.send(self.message(event, title, what))

    def _notified(self, index: int, target: Target, event: str, delivered: bool,
                  detail: str) -> None:
        level = logging.INFO if delivered else logging.WARNING
        self.log.log(level, "notification %d (%s) of %s: %s", index, target.format, event,
                     detail)
        with self._lock:
            entry = {"at": runfiles.utc_now_iso(), "target": index, "format": target.format,
                     "event": event, "delivered": delivered, "detail": detail}
            self.state["notify"] = [*(self.state.get("notify") or []), entry][-KEEP_STEPS:]
            runfiles.atomic_write_json(self.cfg.run_dir / GUARD_FILE, self.state)

    # ------------------------------------------------------------------ watching

    def _sleep(self, seconds: float) -> bool:
        """Sleep; ``True`` when a disarm came meanwhile."""
        return self.disarm.wait(max(0.0, seconds))

    def _over_lifetime(self) -> bool:
        cfg = self.cfg
        return cfg.max_hours is not None and \
            time.monotonic() - self._t0 >= cfg.max_hours * 3600

    def _run_ended(self, verdict: str, reason: str, read: runfiles.StatusRead) -> None:
        """The run reached an end: remember when (for the idle money) and tell."""
        if self.ended_at is None:
            updated = runfiles.parse_iso(read.get("updated_at") or "")
            closed = verdict in ("completed", "failed", "stopped")
            self.ended_at = updated if closed and updated is not None else time.time()
        self.run_verdict = verdict
        self.write_state(self.state.get("state") or "armed",
                         self.state.get("last_decision") or "")
        if verdict != "stopped":  # a stop is a person's own doing
            plan = ("acting on it" if self.cfg.when == "done"
                    else f"watching (when {self.cfg.when_text})")
            self.notify("run-ended", f"run {verdict}", f"{reason}; {plan}")

    def watch(self) -> tuple[str, str] | None:
        """Poll the run until a trigger fires: ``(trigger, reason)``; ``None`` = disarmed.
        The trigger is ``done`` (completed, failed, stopped), ``dead`` (process gone, or
        stalled past ``stall_minutes``), ``idle``, ``max-hours`` or ``lease`` (the
        laptop's lease on this box ran out: ``trainer.guard.lease``)."""
        cfg = self.cfg
        log_path = cfg.run_dir / runfiles.LOG_FILE
        history: list[tuple[float, int]] = []
        last_verdict = None
        last_busy = time.monotonic()
        last_size = -1
        stalled_since: float | None = None
        while True:
            if self._over_lifetime():
                return "max-hours", f"--max-hours {cfg.max_hours:g} reached"
            leased = lease_passed(cfg.provider, cfg.instance)
            if leased:
                return "lease", leased
            now = time.time()
            size = log_path.stat().st_size if log_path.exists() else 0
            history = [*history[-20:], (now, size)]
            read = filled_status(cfg.run_dir)
            health = apply_stop(judge_health(read, now=now, pid_alive=self.pid_alive,
                                             log_history=history),
                                read, engines.read_stop_mark(cfg.run_dir))
            verdict, reason = health.verdict, health.reason
            stalled_since = (stalled_since or time.monotonic()) if verdict == "stalled" \
                else None
            if stalled_since is not None and \
                    time.monotonic() - stalled_since >= cfg.stall_minutes * 60:
                verdict = "dead"
                reason = (f"stalled for {format_duration(time.monotonic() - stalled_since)}"
                          f" (limit {cfg.stall_minutes:g} min): {reason}")
            if verdict != last_verdict:
                last_verdict = verdict
                self.decide("armed", f"run is {verdict}: {reason}")
                if verdict in ENDED:
                    self._run_ended(verdict, reason, read)
            if cfg.when == "done" and verdict in ENDED:
                trigger = "dead" if verdict == "dead" else "done"
                return trigger, f"the run is {verdict} ({reason})"
            rows = self.gpu_rows()
            if rows:
                # The ring is a record for the laptop, never a reason to stop watching.
                with contextlib.suppress(OSError):
                    ring.append(rows, now)
            if cfg.when == "idle":
                util = utilisation(rows)
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
            return verified_safety(self.cfg.run_dir, repos=self.cfg.hub_repos)
        except (OSError, ValueError) as exc:
            return {"safe": False, "reason": f"cannot check the weights: {one_line(exc)}"}

    def someone_may_push(self) -> bool:
        """Whether a push may still come: the trainer lives (and is not stuck), or a push
        process is under way (``trainer.hub.safe.push_in_flight``)."""
        from trainer.hub.safe import push_in_flight

        if push_in_flight(self.cfg.run_dir):
            return True
        pid = runfiles.read_status(self.cfg.run_dir).get("pid")
        alive = isinstance(pid, int) and self.pid_alive(pid)
        return alive and self.run_verdict != "dead"

    def wait_for_safe(self, trigger: str) -> dict[str, Any]:
        """Wait for ``best.pt`` to be safe (the final push) while someone may still push
        it, up to ``push_wait``; return the last answer."""
        cfg = self.cfg
        answer = self.safety()
        if answer.get("safe") or trigger == "max-hours" or not self.someone_may_push():
            return answer
        wait = format_duration(cfg.push_wait)
        self.decide("waiting-for-push", f"waiting up to {wait} for the final push: "
                                        f"{answer.get('reason')}")
        start = time.monotonic()
        while True:
            if self._sleep(min(cfg.poll, 5.0)) or self._over_lifetime():
                return answer
            answer = self.safety()
            if answer.get("safe") or time.monotonic() - start >= cfg.push_wait:
                return answer
            if not self.someone_may_push():
                return answer  # the trainer is gone and no push runs: nobody will push

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
                text = (f"NOT destroying: best.pt is not safe ({why}); "
                        f"{self.provider.title} cannot stop, so the instance is left "
                        f"running and keeps billing {rate(self.price_per_hour)}: push or "
                        "pull the weights, then destroy it")
                self.raise_alarm(text, {"action": "none", "wanted": "destroy",
                                        "confirmed": False, "trigger": trigger,
                                        "billing_per_hour": self.price_per_hour})
                return EXIT_FAILED
            action = "stop"
            self.log.warning("NOT destroying: best.pt is not safe (%s); stopping instead, "
                             "which keeps the disk and the weights (storage keeps billing)",
                             why)
        self._acting = True
        verb = "destroying" if action == "destroy" else "stopping"
        self.decide("acting", f"{verb} {self.provider.title} instance {cfg.instance} "
                              f"({trigger}: {reason})")
        ending = end_billing(self.provider, cfg.instance, action, cfg.policy, self.step)
        return self.finish(ending, trigger)

    def raise_alarm(self, text: str, outcome: dict[str, Any]) -> None:
        """Record a persistent alarm in ``guard.json`` and tell the webhooks."""
        alarm = {"at": runfiles.utc_now_iso(), "message": text,
                 "billing_per_hour": outcome.get("billing_per_hour")}
        self.decide("alarm", text, level=logging.CRITICAL, outcome=outcome, alarm=alarm)
        self.notify("alarm", "ALARM: the instance may still be billing", text)

    def finish(self, ending: Ending, trigger: str) -> int:
        """Record how the action ended, tell the webhooks; the exit code."""
        outcome = {**ending.outcome, "trigger": trigger}
        if ending.alarm:
            self.raise_alarm(ending.message, outcome)
            return EXIT_FAILED
        self.decide("done", ending.message, outcome=outcome)
        done = {"stop": "instance stopped", "destroy": "instance destroyed"}
        self.notify("acted", done.get(str(outcome.get("action")), "billing ended"),
                    ending.message)
        return EXIT_OK

    def run(self) -> int:
        """Watch, then act; ``disarm`` (SIGTERM) ends it quietly before it acts. Waits a
        bounded time for notifications under way before returning."""
        try:
            fired = self.watch()
            if fired is None:
                self.decide("disarmed", "disarmed (SIGTERM): the instance is left as it is")
                return EXIT_OK
            return self.act(*fired)
        except Exception as exc:  # a bug must not leave the box billing without a word
            self.log.exception("the guard failed")
            hint = self.provider.console_hint("stop", self.cfg.instance)
            self.raise_alarm(f"the guard failed ({type(exc).__name__}: {one_line(exc)}); "
                             f"{self.provider.title} instance {self.cfg.instance} may still "
                             f"be billing: {hint}",
                             {"action": "none", "confirmed": False,
                              "billing_per_hour": self.price_per_hour})
            return EXIT_FAILED
        finally:
            self.notifier.flush(NOTIFY_FLUSH)

    def on_signal(self, signum: int, _frame: object) -> None:
        """SIGTERM/SIGINT: disarm, unless the action is already under way."""
        if self._acting:
            self.log.warning("%s received while acting: finishing the action",
                             signal.Signals(signum).name)
            return
        self.disarm.set()
