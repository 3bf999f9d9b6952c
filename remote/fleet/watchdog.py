"""The off-box watchdog: ends the billing of instances whose lease ran out or that idled
past the rule, through the provider's API with the laptop's account keys, so it works
when the box hangs, SSH is gone or the on-box guard died.

It never destroys what the destroy check would refuse (``remote.billing.teardown``:
weights not confirmed off the box, or not checkable because the box cannot be reached,
are unsafe): a destroy becomes a stop, which says what keeps billing; where the
provider cannot stop (Lambda, a RunPod pod in ERROR) it raises an alarm and leaves the
instance running, and judges it again every pass (the weights may be safe by then).

It keeps trying until the billing ends: only an ending that the provider confirmed
settles an episode (one lease deadline; one idle stretch of one start of the instance:
``remote.fleet.watchrecords``). A failed call, a provider that is down or limits its
rate, a stop not confirmed in time: the next pass tries again, and the alarm is told
again while it holds. Nothing fails silently: an account that cannot be listed (a key
refused, a 2FA session expired, an outage) is an alarm of every pass until it answers,
and an instance whose earlier action is still under way says so.

Safe from two places at once: each instance's action runs under a non-blocking
``flock`` in the state directory (a second watchdog on this machine says it is busy),
the provider's state is read again just before acting (a second watchdog elsewhere sees
it ``stopping`` and does nothing; a stop sent twice in the same instant is harmless to
the provider), and a settled episode is not acted on again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

from remote.billing.accounts import Account
from remote.billing.intents import intent_for, intents, want_stopped
from remote.billing.statefile import damage, state_file
from remote.billing.teardown import SafetyLike, UnknownSafety, check_destroy
from remote.fleet.fleet import (
    WORDS_CHARS,
    Fleet,
    FleetOptions,
    FleetRow,
    all_at_once,
    list_fleet,
)
from remote.fleet.idle import IDLE_GPU_PERCENT, minutes
from remote.fleet.interrupted import first_telling
from remote.fleet.leases import LEASES_FILE, leases
from remote.fleet.watchrecords import (
    ALARM_EVERY,
    due_to_tell,
    forget_told,
    held,
    read_record,
    record_pass,
    write_record,
)
from remote.runs.probe import BoxRun
from remote.transport.base import TransportError
from trainer import runfiles
from trainer.guard.notify import Notifier, Target
from trainer.providers import Instance, NotFoundError, Provider, ProviderError
from trainer.providers.confirm import StillBilling, destroy_and_confirm, stop_and_confirm
from trainer.text import WHOLE_ERROR, clean_text, money, one_line, rate

#: States the watchdog acts on: billing the full price and not already on the way down.
ACT_ON = ("running", "starting", "paused", "exited", "error", "unknown")
#: An action under way longer than this many seconds past its own limits is stuck.
STUCK_MARGIN = 60.0
#: The clients of a pass try harder than an interactive listing's: the next pass is
#: minutes away.
WATCH_CLIENT = {"retries": 4, "backoff": 1.0, "max_backoff": 8.0, "max_rate_wait": 60.0}


@dataclass(frozen=True)
class Rules:
    """What the watchdog enforces besides leases: stop (or ``then_idle``) an instance
    idle for ``idle_minutes`` (``None``: no idle rule)."""

    idle_minutes: float | None = None
    idle_gpu: float = IDLE_GPU_PERCENT
    then_idle: str = "stop"
    #: Stop (``then_idle``) an instance whose run made no progress this long while its
    #: process lives (an NCCL hang holds the GPUs busy); ``None``: only said, an alarm.
    stall_minutes: float | None = None


@dataclass(frozen=True)
class Decision:
    """What the watchdog did (or could not do) about one instance or account.

    ``settled``: the provider confirmed the billing ended as asked; nothing else ends an
    episode."""

    target: str
    trigger: str
    reason: str
    action: str
    message: str
    acted: bool = False
    alarm: bool = False
    settled: bool = False
    #: Why the destroy check refused a destroy, whole (an unreachable box's host key
    #: fingerprints included; ``message`` shortens it); ``None`` when it did not.
    unsafe: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class Due:
    """An instance whose billing should end: why, what was asked, which episode (and,
    for an idle stretch, the instance's last start that the episode belongs to)."""

    row: FleetRow
    client: Provider
    trigger: str
    reason: str
    wanted: str
    episode: str
    start: float | None = None
    #: When the idle stretch began (on this laptop's clock).
    since: float | None = None


def due_rows(fleet: Fleet, clients: dict[str, Provider], rules: Rules) -> list[Due]:
    """The instances whose lease passed or whose idle stretch passed the rule, and those
    whose last run moved to another box and that came back by themselves (Vast brings
    interruptible instances back: nothing runs there, and it bills)."""
    found = []
    wanted = intents()
    for row in fleet.rows:
        inst, client = row.instance, clients.get(row.account)
        if inst is None or client is None or inst.state not in ACT_ON:
            continue
        if row.lease is not None and row.lease.left(fleet.now) <= 0:
            found.append(Due(row, client, "lease", f"its lease ran out at "
                             f"{row.lease.until_words}", row.lease.then,
                             f"lease:{row.lease.until}"))
        elif rules.idle_minutes is not None and row.idle is not None and \
                row.idle.seconds >= rules.idle_minutes * 60:
            start = inst.started_at if inst.started_at is not None else row.idle.since
            found.append(Due(row, client, "idle", f"{row.idle.words()} ({row.idle.why}; "
                             f"rule: {rules.idle_minutes:g} min)", rules.then_idle,
                             f"idle:{start:.0f}", start, row.idle.since))
        elif (stall := stalled(row, fleet.now)) is not None and \
                rules.stall_minutes is not None and stall[1] >= rules.stall_minutes * 60:
            run, seconds = stall
            found.append(Due(row, client, "stall", f"run {run.run_dir} made no progress for "
                             f"{minutes(seconds)} while its process lives ({run.reason}; "
                             f"rule: {rules.stall_minutes:g} min)", rules.then_idle,
                             f"stall:{run.updated:.0f}", inst.started_at))
        elif (intent := wanted.get(row.target)) is not None and intent.moved_to and \
                intent.want == "stopped":
            start = inst.started_at if inst.started_at is not None else intent.since
            found.append(Due(row, client, "comeback", f"its run moved to {intent.moved_to}; "
                             f"it is {inst.state} again with nothing of ours on it (start it "
                             f"from here to keep it: gpurent instance {row.target} start)",
                             "stop", f"comeback:{start:.0f}", start))
    return found


def stalled(row: FleetRow, now: float) -> tuple[BoxRun, float] | None:
    """The box's run that the shared health rules call stalled (alive, no progress),
    and for how long it made none (on this laptop's clock); ``None`` without one."""
    box = row.box
    runs = [r for r in box.runs if r.health == "stalled" and r.updated is not None] \
        if box is not None else []
    if not runs or box is None:
        return None
    run = min(runs, key=lambda r: r.updated or 0.0)
    offset = 0.0 if box.now is None else now - box.now
    return run, max(0.0, now - ((run.updated or now) + offset))


def stall_alarms(fleet: Fleet, rules: Rules) -> list[Decision]:
    """A stalled run the rules do not act on (no ``--stall-minutes``, or not yet): an
    alarm, since its instance bills while nothing trains and the idle rule cannot see it
    (its GPUs may stay busy)."""
    found = []
    for row in fleet.rows:
        stall = stalled(row, fleet.now)
        if stall is None or row.instance is None or row.instance.state not in ACT_ON:
            continue
        run, seconds = stall
        if rules.stall_minutes is not None and seconds >= rules.stall_minutes * 60:
            continue  # due: acted on
        rule = f"--stall-minutes {rules.stall_minutes:g} stops it then" \
            if rules.stall_minutes is not None else "--stall-minutes M would stop it"
        found.append(Decision(row.target, "stall", run.reason, "none",
                              f"ALARM: run {run.run_dir} made no progress for "
                              f"{minutes(seconds)} while its process lives ({run.reason}); "
                              f"it bills {rate(row.instance.price_per_hour)} for nothing "
                              f"if it hangs: {rule}", alarm=True))
    return found


SafetyCheck = Callable[[Due], SafetyLike]


def box_safety(options: FleetOptions) -> SafetyCheck:
    """The destroy check's answer for a due instance: its box reached through the provider
    (trainer bootstrapped), ``remote.weights.safety.weights_safety`` over every run of
    its registry; unreachable or failing is unsafe."""
    def check(due: Due) -> SafetyLike:
        from remote.billing.address import connector_to
        from remote.billing.providers import InstanceTarget
        from remote.billing.teardown import resolve_safety, run_safety

        connector = connector_to(InstanceTarget(due.client.name, due.row.listed().id),
                                 provider=due.client, accept_new=options.accept_new,
                                 ssh_options=options.ssh_options, bootstrap=True,
                                 timeout=options.timeout)
        try:
            transport = connector.open()
        except (TransportError, OSError, ValueError) as exc:
            return UnknownSafety(f"the box could not be reached to check the weights: "
                                 f"{one_line(exc, WHOLE_ERROR)}")
        with transport:
            return resolve_safety(run_safety(transport, None))
    return check


def settled_before(due: Due) -> bool:
    """Whether ``due``'s episode was ended already and should be left alone: a settled
    idle stretch (the same start of the instance, and a stretch that began before it was
    ended), or a settled lease whose instance was started from this laptop since (a
    person wants it running). An instance running again after its lease was enforced,
    with no start from here, is its provider's comeback: acted on again."""
    record = read_record(due.row.target)
    if record is None or not record.settled or \
            not record.same_episode(due.episode, due.start):
        return False
    if due.trigger != "lease":
        return due.since is None or due.since <= record.at
    intent = intent_for(due.row.target)
    return intent is not None and intent.want == "running" and intent.since > record.at


def enforce(due: Due, safety: SafetyCheck, *, timeout: float = 180.0,
            interval: float = 5.0, api_timeout: float = 20.0,
            clock: Callable[[], float] = time.time,
            sleep: Callable[[float], None] = time.sleep) -> Decision | None:
    """End ``due``'s billing (see the module doc); ``None`` when there was nothing to do
    (settled before, gone, or already on its way down). A call that fails, and an
    ending not confirmed, is an alarm and leaves the episode open for the next pass.
    ``clock`` and ``sleep``: a simulation's."""
    target = due.row.target
    if settled_before(due):
        return None
    with held(target, clock()) as busy:
        if busy is not None:
            return _busy(due, busy, timeout + api_timeout * 4 + STUCK_MARGIN, clock())
        try:
            now = due.client.get_instance(due.row.listed().id)
        except NotFoundError:
            return None  # gone meanwhile: nothing bills
        except ProviderError as exc:
            decision = Decision(target, due.trigger, due.reason, "none",
                                f"ALARM: not acted this pass: {exc}; the next pass tries "
                                "again", alarm=True)
        else:
            if now.state not in ACT_ON:
                return None
            decision = _act(due, now, safety, {"timeout": timeout, "interval": interval,
                                               "clock": clock, "sleep": sleep})
        write_record(target, due.episode, due.start, decision.settled, decision.to_dict(),
                     clock())
        if decision.acted:
            want_stopped(target, clock())  # a start from here after this: a person's wish
        return decision


def _busy(due: Due, busy: Any, stuck_after: float, now: float) -> Decision:
    """Another action holds the instance: said, and an alarm once it is stuck."""
    age = now - busy.since if busy.since else None
    since = runfiles.utc_now_iso(busy.since)[11:19] if busy.since else "?"
    if age is not None and age < stuck_after:
        return Decision(due.row.target, due.trigger, due.reason, "none",
                        f"another watchdog ({busy.by}) is acting on it since {since} UTC")
    return Decision(due.row.target, due.trigger, due.reason, "none",
                    f"ALARM: an earlier action on it ({busy.by}, since {since} UTC) has not "
                    f"ended; it may still be billing {rate(due.row.listed().price_per_hour)}"
                    f": {due.client.console_hint('stop', due.row.listed().id)}",
                    alarm=True)


def _act(due: Due, inst: Instance, safety: SafetyCheck, polling: dict[str, Any]) -> Decision:
    client, target = due.client, due.row.target
    what = f"{client.title} instance {inst.id} ({due.reason})"
    action, note, refused = due.wanted, "", None
    stoppable = client.can_stop_now(inst)
    if action == "destroy" or not stoppable:
        said = safety(due)
        check = check_destroy(said, inst.id)
        if not check.allowed:
            refused = one_line(said.reason, WHOLE_ERROR)
            unsafe = f"its weights are not confirmed safe off the box " \
                f"({one_line(refused, WORDS_CHARS)})"
            if not stoppable:
                why = (f"{client.title} cannot stop" if not client.can_stop else
                       f"{client.title} cannot stop it while it is {inst.state}")
                return Decision(target, due.trigger, due.reason, "none",
                                f"ALARM: NOT terminating {what}: {unsafe}; {why}, so it "
                                f"keeps billing {rate(inst.price_per_hour)}; judged again "
                                "every pass. Once they are safe: "
                                f"{client.console_hint('destroy', inst.id)}", alarm=True,
                                unsafe=refused)
            action, note = "stop", f"not destroyed ({unsafe}); "
        else:
            action = "destroy"
    try:
        run = destroy_and_confirm if action == "destroy" else stop_and_confirm
        outcome = run(client, inst.id, before=inst, **polling)
    except StillBilling as exc:
        outcome = exc.outcome
    except NotFoundError:
        return Decision(target, due.trigger, due.reason, action,
                        f"{client.title} instance {inst.id} is gone: nothing bills",
                        acted=True, settled=True, unsafe=refused)
    except ProviderError as exc:
        return Decision(target, due.trigger, due.reason, action,
                        f"ALARM: {action} of {what} failed: {exc}; the next pass tries "
                        "again", alarm=True, unsafe=refused)
    later = "" if outcome.confirmed else "; the next pass tries again"
    return Decision(target, due.trigger, due.reason, action,
                    f"{note}{outcome.message}{later}", acted=True, alarm=outcome.alarm,
                    settled=outcome.confirmed, unsafe=refused)


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


def account_alarm(row: FleetRow, lease_targets: list[str]) -> Decision:
    """The alarm of an account that could not be listed: what it stops and the fix."""
    refused = any(word in row.error.lower() for word in ("refused", "no key", "api key",
                                                          "2fa", "not set"))
    fix = ("renew the key (a new API key in the environment or the config file)"
           if refused else "the next pass tries again")
    waiting = f"; {len(lease_targets)} lease(s) wait on it ({', '.join(lease_targets[:3])})" \
        if lease_targets else ""
    return Decision(row.account, "account", row.error, "none",
                    f"ALARM: the watchdog cannot act on {row.account}: {row.error}; its idle "
                    "rule waits until it answers, and its leases hold only where an "
                    f"instance can be asked for alone{waiting}: {fix}", alarm=True)


def _account_message(decision: Decision, row: FleetRow) -> dict[str, Any]:
    return {"event": "alarm", "title": f"gpurent: ALARM: the watchdog cannot act on "
            f"{decision.target}", "text": decision.message, "target": decision.target,
            "trigger": "account", "action": "none", "provider": row.provider,
            "instance": None, "spent_usd": None, "price_per_hour": None,
            "guard": decision.message, "at": runfiles.utc_now_iso()}


def watch_once(accounts: list[Account], rules: Rules, options: FleetOptions, *,
               notify: list[Target] | None = None, safety: SafetyCheck | None = None,
               confirm_timeout: float = 180.0, interval: float = 5.0,
               progress: Callable[[str], None] | None = None,
               alarm_every: float = ALARM_EVERY, clock: Callable[[], float] = time.time,
               sleep: Callable[[float], None] = time.sleep,
               every: float | None = None) -> list[Decision]:
    """One pass: list, find what is due, end its billing (all due instances at once);
    every alarm that holds is told (again after ``alarm_every`` seconds); the pass is
    recorded (``watchrecords.record_pass``, ``every``: the loop's period) for the fleet
    to say that a watchdog enforces leases. ``clock`` and ``sleep``: a simulation's
    (its providers' clients take theirs from ``options.client_options``)."""
    say = progress or (lambda _line: None)
    leased = leases()
    record_pass(len(leased), every, clock())
    damaged = damage(state_file(LEASES_FILE))  # leases that cannot be read are not held
    if not leased and not damaged and rules.idle_minutes is None \
            and rules.stall_minutes is None and not intents():
        say("no lease, no idle rule and no instance launched from here: nothing to watch")
        return []
    listing = list_fleet(accounts, replace(
        options, ssh=options.ssh and (rules.idle_minutes is not None
                                      or rules.stall_minutes is not None),
        idle_gpu=rules.idle_gpu, weights=False,  # checked when due, at the moment of acting
        client_options={**WATCH_CLIENT, **options.client_options}), now=clock())
    decisions: list[Decision] = []
    notifier = Notifier(notify or [], lambda *_a: None)
    holding: set[str] = set()

    def tell(decision: Decision, body: dict[str, Any] | None) -> None:
        decisions.append(decision)
        say(f"{decision.target}: {decision.message}")
        key = f"{decision.target}|{decision.trigger}"
        if decision.alarm:
            holding.add(key)
            if not due_to_tell(key, clock(), alarm_every):
                return
        if body is not None and (decision.alarm or decision.acted):
            notifier.send(body)

    if damaged:
        alarm = Decision("leases", "state", damaged, "none", f"ALARM: {state_file(LEASES_FILE)}: "
                         f"{damaged}: those leases are not enforced; give them again "
                         "(gpurent lease TARGET 6h)", alarm=True)
        tell(alarm, {"event": "alarm", "title": "gpurent: ALARM: leases that cannot be read",
                     "text": alarm.message, "target": "leases", "trigger": "state",
                     "action": "none", "at": runfiles.utc_now_iso()})
    for row in (r for r in listing.rows if r.error):
        waiting = [t for t in leases() if t.startswith(f"{row.provider}:")]
        alarm = account_alarm(row, waiting)
        tell(alarm, _account_message(alarm, row))
    for alarm in stall_alarms(listing, rules):
        row = next(r for r in listing.rows if r.target == alarm.target)
        tell(alarm, message_for(alarm, row, listing.now))
    due = due_rows(listing, listing.clients, rules)
    check = safety or box_safety(options)
    found = all_at_once({d.row.target: partial(
        enforce, d, check, timeout=confirm_timeout, interval=interval,
        api_timeout=options.timeout, clock=clock, sleep=sleep) for d in due},
        confirm_timeout + options.timeout * 4 + 30.0)
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
                              f"ALARM: not acted: {one_line(answer, 200)}; the next pass "
                              "tries again", alarm=True)
        if answer is not None:
            tell(answer, message_for(answer, d.row, listing.now))
    forget_told(holding)
    notifier.flush(30.0)
    say(pass_summary(listing, decisions, clock()))
    return decisions


def pass_summary(listing: Fleet, decisions: list[Decision], now: float) -> str:
    """One line a log keeps for every pass (a quiet log is then a watchdog that did not
    run, never one that ran and saw nothing): when, what it saw, what it did."""
    billing = [r for r in listing.rows if r.full_price]
    per_hour = sum(r.instance.price_per_hour or 0.0 for r in billing if r.instance)
    failed = sum(1 for r in listing.rows if r.error)
    acted = sum(1 for d in decisions if d.acted)
    alarms = sum(1 for d in decisions if d.alarm)
    instances = sum(1 for r in listing.rows if r.instance is not None)
    return (f"pass at {runfiles.utc_now_iso(now)[11:19]} UTC: {instances} instance(s), "
            f"{len(billing)} billing {rate(per_hour)}"
            + (f", {failed} account(s) not listed" if failed else "")
            + f"; {acted} acted on, {alarms} alarm(s)")


def loop(accounts: Callable[[], list[Account]], rules: Rules, options: FleetOptions,
         every: float, stop: Callable[[float], bool], **kwargs: Any) -> None:
    """``watch_once`` every ``every`` seconds until ``stop(seconds)`` (a wait) says to end;
    a failing pass is said and the next one runs. ``kwargs`` go to ``watch_once`` (its
    ``clock`` times the passes too)."""
    say = kwargs.get("progress") or (lambda _line: None)
    clock = kwargs.get("clock") or time.monotonic
    while True:
        started = clock()
        try:
            watch_once(accounts(), rules, options, every=every, **kwargs)
        except (ProviderError, TransportError, ValueError, OSError) as exc:
            say(f"this pass failed: {one_line(clean_text(str(exc)), 300)}")
        if stop(max(0.0, every - (clock() - started))):
            return

