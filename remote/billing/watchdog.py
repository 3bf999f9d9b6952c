"""The off-box watchdog: ends the billing of instances whose lease ran out or that idled
past the rule, through the provider's API with the laptop's account keys, so it works
when the box hangs, SSH is gone or the on-box guard died.

It never destroys what the weights gate would refuse (``remote.billing.teardown``:
weights not confirmed off the box, or not checkable because the box cannot be reached,
are unsafe): a destroy becomes a stop, which says what keeps billing; where the
provider cannot stop (Lambda) it raises an alarm and leaves the instance running.

Safe from two places at once: each instance's action runs under a non-blocking
``flock`` in the state directory (a second watchdog on this machine skips it), the
provider's state is read again just before acting (a second watchdog elsewhere sees it
``stopping`` and does nothing; a stop sent twice in the same instant is harmless to the
provider), and what was done is recorded per instance and episode (one lease deadline,
one idle stretch), so it is done once and an alarm is told once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remote.billing.accounts import Account
from remote.billing.fleet import Fleet, FleetOptions, FleetRow, all_at_once, list_fleet
from remote.billing.idle import IDLE_GPU_PERCENT
from remote.billing.intents import intents
from remote.billing.interrupted import first_telling
from remote.billing.leases import leases
from remote.billing.statefile import read_json, state_file
from remote.billing.teardown import SafetyLike, UnknownSafety, check_destroy
from remote.transport.base import TransportError
from trainer import runfiles
from trainer.guard.notify import Notifier, Target
from trainer.providers import Instance, NotFoundError, Provider, ProviderError
from trainer.providers.confirm import StillBilling, destroy_and_confirm, stop_and_confirm
from trainer.text import clean_text, money, one_line, rate

#: States the watchdog acts on: billing the full price and not already on the way down.
ACT_ON = ("running", "starting", "paused", "exited", "error", "unknown")
#: The folder of per-instance locks and records, in the state directory.
RECORDS = "watchdog"


@dataclass(frozen=True)
class Rules:
    """What the watchdog enforces besides leases: stop (or ``then_idle``) an instance
    idle for ``idle_minutes`` (``None``: no idle rule)."""

    idle_minutes: float | None = None
    idle_gpu: float = IDLE_GPU_PERCENT
    then_idle: str = "stop"


@dataclass(frozen=True)
class Decision:
    """What the watchdog did about one instance."""

    target: str
    trigger: str
    reason: str
    action: str
    message: str
    acted: bool = False
    alarm: bool = False

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Due:
    """An instance whose billing should end: why, what was asked, which episode."""

    row: FleetRow
    client: Provider
    trigger: str
    reason: str
    wanted: str
    episode: str


def _record_path(target: str) -> Path:
    return state_file(RECORDS) / target.replace(":", "-")


@contextlib.contextmanager
def _held(target: str) -> Iterator[bool]:
    """The instance's lock, held without waiting: ``False`` when another process has it."""
    path = _record_path(target).with_suffix(".lock")
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        yield True


def _done_before(target: str, episode: str) -> dict[str, Any] | None:
    record = read_json(_record_path(target).with_suffix(".json"))
    return record if record.get("episode") == episode else None


def _record(target: str, episode: str, decision: Decision) -> None:
    path = _record_path(target).with_suffix(".json")
    runfiles.atomic_write_json(path, {"episode": episode, "at": runfiles.utc_now_iso(),
                                      "by": f"{socket.gethostname()}:{os.getpid()}",
                                      **decision.to_dict()})
    os.chmod(path, 0o600)


def due_rows(fleet: Fleet, clients: dict[str, Provider], rules: Rules) -> list[Due]:
    """The instances whose lease passed or whose idle stretch passed the rule."""
    found = []
    for row in fleet.rows:
        inst, client = row.instance, clients.get(row.account)
        if inst is None or client is None or inst.state not in ACT_ON:
            continue
        if row.lease is not None and row.lease.left(fleet.now) <= 0:
            found.append(Due(row, client, "lease", f"its lease ran out at "
                             f"{row.lease.until_at}", row.lease.then,
                             f"lease:{row.lease.until}"))
        elif rules.idle_minutes is not None and row.idle is not None and \
                row.idle.seconds >= rules.idle_minutes * 60:
            found.append(Due(row, client, "idle", f"{row.idle.words()} ({row.idle.why}; "
                             f"rule: {rules.idle_minutes:g} min)", rules.then_idle,
                             f"idle:{inst.started_at or row.idle.since}"))
    return found


SafetyCheck = Callable[[Due], SafetyLike]


def box_safety(options: FleetOptions) -> SafetyCheck:
    """The weights gate's answer for a due instance: its box reached through the provider
    (trainer bootstrapped), ``remote.weights.safety.weights_safety`` over every run of
    its registry; unreachable or failing is unsafe."""
    def check(due: Due) -> SafetyLike:
        from remote.billing.address import Locator
        from remote.billing.providers import InstanceTarget
        from remote.billing.teardown import resolve_safety, run_safety
        from remote.link.connector import Connector

        target = InstanceTarget(due.client.name, due.row.instance.id)
        connector = Connector(target.text, accept_new=options.accept_new, ask_unknown=None,
                              ssh_options=dict(options.ssh_options), bootstrap=True,
                              timeout=options.timeout,
                              locate=Locator(target, provider=due.client))
        try:
            transport = connector.open()
        except (TransportError, OSError, ValueError) as exc:
            return UnknownSafety(f"the box could not be reached to check the weights: "
                                 f"{one_line(clean_text(str(exc)), 160)}")
        with transport:
            return resolve_safety(run_safety(transport, None))
    return check


def enforce(due: Due, safety: SafetyCheck, *, timeout: float = 180.0,
            interval: float = 5.0) -> Decision | None:
    """End ``due``'s billing once (see the module doc); ``None`` when there was nothing
    to do (another watchdog acts or acted, or it is already on its way down)."""
    target = due.row.target
    with _held(target) as mine:
        if not mine or _done_before(target, due.episode) is not None:
            return None
        try:
            now = due.client.get_instance(due.row.instance.id)
        except NotFoundError:
            return None  # gone meanwhile: nothing bills
        except ProviderError as exc:
            return Decision(target, due.trigger, due.reason, "none",
                            f"not acted: {exc}", alarm=True)
        if now.state not in ACT_ON:
            return None
        decision = _act(due, now, safety, timeout, interval)
        _record(target, due.episode, decision)
        return decision


def _act(due: Due, inst: Instance, safety: SafetyCheck, timeout: float,
         interval: float) -> Decision:
    client, target = due.client, due.row.target
    what = f"{client.title} instance {inst.id} ({due.reason})"
    action, note = due.wanted, ""
    if action == "destroy" or not client.can_stop:
        gate = check_destroy(safety(due), inst.id)
        if not gate.allowed:
            if not client.can_stop:
                return Decision(target, due.trigger, due.reason, "none",
                                f"ALARM: NOT terminating {what}: {gate.reason}; "
                                f"{client.title} cannot stop, so it keeps billing "
                                f"{rate(inst.price_per_hour)}", alarm=True)
            action, note = "stop", f"not destroyed ({gate.reason}); "
        else:
            action = "destroy"
    try:
        run = destroy_and_confirm if action == "destroy" else stop_and_confirm
        outcome = run(client, inst.id, timeout=timeout, interval=interval)
    except StillBilling as exc:
        outcome = exc.outcome
    except ProviderError as exc:
        return Decision(target, due.trigger, due.reason, action,
                        f"ALARM: {action} of {what} failed: {exc}", alarm=True)
    return Decision(target, due.trigger, due.reason, action,
                    f"{note}{outcome.message}", acted=True, alarm=outcome.alarm)


def message_for(decision: Decision, row: FleetRow, now: float) -> dict[str, Any]:
    """A notification in the guard's shape (``trainer.guard.notify.request_for``)."""
    inst = row.instance
    spent = row.spent(now)
    title = ("ALARM: the instance may still be billing" if decision.alarm else
             {"stop": "instance stopped", "destroy": "instance destroyed"}
             .get(decision.action, "billing ended"))
    text = "\n".join([f"{decision.target}: {decision.reason}",
                      f"watchdog: {decision.message}",
                      f"{money(spent)} since it started at {rate(inst.price_per_hour)}"
                      if inst and spent is not None else ""]).strip()
    return {"event": "alarm" if decision.alarm else "acted", "title": f"gpurent: {title}",
            "text": text, "target": decision.target, "trigger": decision.trigger,
            "action": decision.action, "provider": row.provider,
            "instance": inst.id if inst else None, "spent_usd": spent,
            "price_per_hour": inst.price_per_hour if inst else None,
            "guard": decision.message, "at": runfiles.utc_now_iso()}


def watch_once(accounts: list[Account], rules: Rules, options: FleetOptions, *,
               notify: list[Target] | None = None, safety: SafetyCheck | None = None,
               confirm_timeout: float = 180.0, interval: float = 5.0,
               progress: Callable[[str], None] | None = None) -> list[Decision]:
    """One pass: list, find what is due, end its billing (all due instances at once)."""
    say = progress or (lambda _line: None)
    if not leases() and rules.idle_minutes is None and not intents():
        say("no lease, no idle rule and no instance launched from here: nothing to watch")
        return []
    listing = list_fleet(accounts, FleetOptions(
        timeout=options.timeout, ssh=options.ssh and rules.idle_minutes is not None,
        accept_new=options.accept_new, ssh_options=options.ssh_options,
        idle_gpu=rules.idle_gpu, weights=False))  # checked when due, at the moment of acting
    for row in listing.rows:
        if row.error:
            say(f"{row.account}: {row.error}")
    due = due_rows(listing, listing.clients, rules)
    check = safety or box_safety(options)
    found = all_at_once({d.row.target: (lambda d=d: enforce(
        d, check, timeout=confirm_timeout, interval=interval)) for d in due},
        confirm_timeout + options.timeout * 4 + 30.0)
    decisions = []
    notifier = Notifier(notify or [], lambda *_a: None)
    for row in listing.rows:  # taken away by the provider: told once per episode
        if row.interrupted is not None and first_telling(row.interrupted):
            decisions.append(Decision(row.target, "interrupted", row.interrupted.how, "none",
                                      row.interrupted.words()))
            say(f"{row.target}: {row.interrupted.words()}")
            notifier.send(row.interrupted.message())
    for d in due:
        answer = found[d.row.target]
        if isinstance(answer, BaseException):
            answer = Decision(d.row.target, d.trigger, d.reason, "none",
                              f"ALARM: not acted: {one_line(answer, 200)}", alarm=True)
        if answer is None:
            continue
        decisions.append(answer)
        say(f"{answer.target}: {answer.message}")
        notifier.send(message_for(answer, d.row, listing.now))
    notifier.flush(30.0)
    return decisions


def loop(accounts: Callable[[], list[Account]], rules: Rules, options: FleetOptions,
         every: float, stop: Callable[[float], bool], **kwargs: Any) -> None:
    """``watch_once`` every ``every`` seconds until ``stop(seconds)`` (a wait) says to end;
    a failing pass is said and the next one runs."""
    say = kwargs.get("progress") or (lambda _line: None)
    while True:
        started = time.monotonic()
        try:
            watch_once(accounts(), rules, options, **kwargs)
        except (ProviderError, TransportError, ValueError, OSError) as exc:
            say(f"this pass failed: {one_line(clean_text(str(exc)), 300)}")
        if stop(max(0.0, every - (time.monotonic() - started))):
            return

