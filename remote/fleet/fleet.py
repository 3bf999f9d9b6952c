"""The fleet: every instance on every configured account, what it costs, and for each
running one that can be reached, what its box is doing.

Every account is listed at once (one thread each, each bounded by ``timeout``); a failing
account becomes a row that says why, never a failed listing. Then every running
instance with an SSH address gets one exec (``remote.runs.probe``), all at once, each
bounded by ``timeout``: GPUs now, the registered runs and their health, a guard, a lease,
and (``weights``) the box side of the destroy check when the box has the trainer
(``remote.fleet.boxweights``; else a second exec).
An unknown host key is not accepted (unless ``accept_new``): such a box is
``unreachable`` with that reason, as is one that does not answer. Words are only for
what was observed.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from remote.billing.accounts import Account
from remote.billing.intents import intents
from remote.fleet.boxweights import (
    WEIGHTS_TIMEOUT,
    WeightsVerdict,
    box_weights,
    folded_check,
    hub_verify,
    unknown,
)
from remote.fleet.idle import (
    IDLE_GPU_PERCENT,
    Idle,
    judge_exited,
    judge_idle,
    remember_idle,
)
from remote.fleet.interrupted import Interruption, find_interruptions
from remote.fleet.leases import Lease, leases
from remote.runs.probe import BoxReport, probe_box
from remote.transport.base import NamedBox, Transport
from remote.weights.safety import HubVerify
from trainer.providers import Instance, Provider, ProviderError
from trainer.text import WHOLE_ERROR, clean_text, clock_time, money, one_line, rate

#: States in which an instance bills its full price (everything but stopped/destroyed).
FULL_PRICE = ("starting", "running", "stopping", "paused", "exited", "error", "destroying",
              "unknown")
T = TypeVar("T")
#: Characters of why a box or an account failed in the words of a table cell or a line
#: (the row and its JSON keep ``trainer.text.WHOLE_ERROR``).
WORDS_CHARS = 200


@dataclass(frozen=True)
class FleetOptions:
    """How to list: per-call ``timeout`` (API and SSH alike), whether to reach the boxes
    (``ssh``), ``accept_new`` host keys, more ``ssh_options`` for
    ``remote.transport.ssh.connect`` (tests: ``known_hosts``, ``identity_files``), the idle
    GPU threshold (percent), whether to check the ``weights`` of each reached box (the
    destroy check's verdict) and each check's limit (``weights_timeout``)."""

    timeout: float = 20.0
    ssh: bool = True
    accept_new: bool = False
    ssh_options: Mapping[str, Any] = field(default_factory=dict)
    idle_gpu: float = IDLE_GPU_PERCENT
    weights: bool = True
    weights_timeout: float = WEIGHTS_TIMEOUT
    #: More options for each account's client (``trainer.providers.base.Provider``: a
    #: simulation's ``pacer``, ``sleep`` and ``clock``).
    client_options: Mapping[str, Any] = field(default_factory=dict)
    #: How a running box is probed instead of over SSH (a simulation's boxes: the
    #: client, the instance, its target); the weights are not checked then.
    probe: Callable[[Provider, Instance, str], BoxReport] | None = None


@dataclass(frozen=True)
class FleetRow:
    """One instance (or, with ``error`` and no instance, an account that failed)."""

    account: str
    provider: str
    instance: Instance | None = None
    error: str = ""
    box: BoxReport | None = None
    #: Why the box was not reached (``""``: reached, or not tried).
    unreachable: str = ""
    idle: Idle | None = None
    lease: Lease | None = None
    #: The destroy check's verdict (``None``: not asked, or the box was not reached).
    weights: WeightsVerdict | None = None
    #: Taken away by its provider while wanted running (``remote.fleet.interrupted``).
    interrupted: Interruption | None = None
    #: Kept from the listing made at this time (epoch s): its account did not answer
    #: since (``remote.fleet.lastknown``); ``None``: listed now.
    stale: float | None = None

    def seen(self, now: float) -> float:
        """The moment the row's figures stand for: ``now``, or when it was last listed."""
        return now if self.stale is None else self.stale

    @property
    def target(self) -> str:
        """``vast:4242``: the name the CLI and TUI open it by."""
        return f"{self.provider}:{self.instance.id}" if self.instance else ""

    def listed(self) -> Instance:
        """The provider's record of the instance, for a row known to have one (the rows
        reached, judged or acted on); ``ValueError`` for an account's failure."""
        if self.instance is None:
            raise ValueError(f"{self.account}: no instance in this row ({self.error})")
        return self.instance

    @property
    def full_price(self) -> bool:
        """Whether it bills the full (GPU) price now (worst case: anything not stopped)."""
        return self.instance is not None and self.instance.state in FULL_PRICE

    def uptime(self, now: float) -> float | None:
        """Seconds since it started, when running and the provider says when."""
        inst = self.instance
        if inst is None or inst.started_at is None or inst.state != "running":
            return None
        return max(0.0, now - inst.started_at)

    def spent(self, now: float) -> float | None:
        """Dollars since it started (running price times uptime), when both are known."""
        up = self.uptime(now)
        price = self.instance.price_per_hour if self.instance else None
        return None if up is None or price is None else up * price / 3600

    def disk_per_day(self) -> float | None:
        """What its disk costs per day while stopped."""
        storage = self.instance.storage_per_hour if self.instance else None
        return None if storage is None else storage * 24

    def words(self, now: float) -> list[str]:
        """Short phrases about money and waste, for a table cell or a line."""
        inst = self.instance
        if inst is None:
            return [f"account failed: {one_line(self.error, WORDS_CHARS)}"]
        said: list[str] = []
        if self.stale is not None:
            said.append(f"as of {clock_time(self.stale, seconds=True)}: the account did "
                        "not answer since")
        if self.interrupted is not None:
            said.append(self.interrupted.words())
        if self.idle is not None:
            said.append(self.idle.at(self.seen(now), inst.price_per_hour).words())
        if self.weights is not None:
            said.append(self.weights.words())
        said.extend(self.push_words())
        if inst.state == "stopped":
            day = self.disk_per_day()
            said.append("stopped, nothing billed" if day == 0 and not inst.also_bills else
                        f"stopped: disk {money(day)}/day" if day is not None else
                        "stopped: disk cost unknown")
        elif inst.state == "exited":
            said.append(f"exited but billing {rate(inst.price_per_hour)}")
        if inst.also_bills:
            said.append(f"also billing: {inst.also_bills}")
        if self.unreachable:
            said.append(f"unreachable: {one_line(self.unreachable, WORDS_CHARS)}")
        if self.lease is not None:
            said.append(f"lease {self.lease.left_words(now)}")
        return said

    def push_words(self) -> list[str]:
        """``Hub push failing: RUN at epoch N: ERROR`` for each run of the box whose last
        push to the Hub failed (the weights are then only on the box)."""
        runs = self.box.runs if self.box is not None else []
        return [f"Hub push failing: {run.run_dir.rstrip('/').rsplit('/', 1)[-1]}"
                + (f" at epoch {run.push_epoch}" if run.push_epoch is not None else "")
                + f": {one_line(run.push_error, WORDS_CHARS)}"
                for run in runs if run.push_error]

    def to_dict(self, now: float, idle_gpu: float = IDLE_GPU_PERCENT) -> dict[str, Any]:
        """A JSON-ready dict (the box's GPU history summarised with ``idle_gpu`` as the
        quiet threshold)."""
        inst = self.instance
        return {
            "account": self.account, "provider": self.provider, "target": self.target,
            "error": self.error or None,
            "instance": None if inst is None else inst.to_dict(),
            "billing": None if inst is None else self.full_price,
            "uptime_seconds": self.uptime(now), "spent_usd": self.spent(now),
            "disk_per_day_usd": self.disk_per_day() if inst and inst.state == "stopped"
            else None,
            "box": None if self.box is None else self.box.to_dict(idle_gpu),
            "unreachable": self.unreachable or None,
            "idle": None if self.idle is None else self.idle.to_dict(),
            "lease": None if self.lease is None else self.lease.to_dict(),
            "weights": None if self.weights is None else self.weights.to_dict(),
            "interrupted": None if self.interrupted is None else self.interrupted.to_dict(),
            "stale_since": self.stale,
            "words": self.words(now),
        }


@dataclass(frozen=True)
class Fleet:
    """The listing: its rows, when it was made, and how long it took."""

    rows: list[FleetRow]
    now: float
    seconds: float
    #: Each account's client, by account name (to act on a row).
    clients: dict[str, Provider] = field(default_factory=dict, repr=False)
    #: How it was listed (a row's box is opened the same way).
    options: FleetOptions | None = field(default=None, repr=False)

    def billing_words(self) -> str:
        """``3 instances, billing $1.2000/h now (+1 unknown)``: an instance whose rate
        is unknown is counted as such, never as billing nothing. An account that did not
        answer makes it ``incomplete``: its instances last listed count at their last
        rate (never a lower total as if they stopped billing), or are unknown."""
        billing = [r.instance.billing_per_hour for r in self.rows if r.instance is not None]
        known = [b for b in billing if b is not None]
        more = f" (+{len(billing) - len(known)} unknown)" if len(known) < len(billing) else ""
        words = (f"{len(billing)} instance{'s' * (len(billing) != 1)}, billing "
                 f"{rate(sum(known))} now{more}")
        failed = [r.account for r in self.rows if r.instance is None]
        if failed:
            kept = sum(1 for r in self.rows if r.stale is not None)
            words += (f"; INCOMPLETE: {', '.join(failed)} did not answer ("
                      + (f"{kept} instance{'s' * (kept != 1)} as last listed" if kept else
                         "its instances unknown") + ")")
        return words

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``gpurent.fleet/1``)."""
        return {"schema": "gpurent.fleet/1", "at": self.now, "seconds": round(self.seconds, 3),
                "rows": [row.to_dict(self.now, self.options.idle_gpu if self.options
                                     else IDLE_GPU_PERCENT) for row in self.rows]}


def all_at_once(tasks: Mapping[str, Callable[[], T]],
                timeout: float) -> dict[str, T | BaseException]:
    """Run every task in its own daemon thread; each key gets its value, the exception it
    raised, or a ``TimeoutError`` when it had not finished within ``timeout``."""
    results: dict[str, T | BaseException] = {}
    lock = threading.Lock()
    done = threading.Condition(lock)

    def run(key: str, task: Callable[[], T]) -> None:
        try:
            value: T | BaseException = task()
        except Exception as exc:  # noqa: BLE001 - handed to the caller as the outcome
            value = exc
        with lock:
            results.setdefault(key, value)
            done.notify_all()

    for key, task in tasks.items():
        threading.Thread(target=run, args=(key, task), daemon=True,
                         name=f"fleet-{key}").start()
    deadline = time.monotonic() + timeout
    with lock:
        while len(results) < len(tasks):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            done.wait(left)
        for key in tasks:
            results.setdefault(key, TimeoutError(f"no answer within {timeout:g} s"))
        return dict(results)


def _why(exc: BaseException) -> str:
    """Why, whole (a host key's fingerprints included): the JSON carries this; the words
    shorten it."""
    return one_line(clean_text(str(exc)) or type(exc).__name__, WHOLE_ERROR)


def list_accounts(accounts: list[Account], timeout: float,
                  client_options: Mapping[str, Any] | None = None,
                  wanted: Iterable[str] = ()) -> tuple[list[FleetRow], dict[str, Provider]]:
    """Every account's instances, at once; a row with ``error`` for an account that
    failed, and a row for each ``wanted`` instance (``vast:4242``: leased, or wanted
    running, from here) that a failed list left out and that answered when asked for
    alone. Also each account's client, by account name (made with ``client_options``
    besides the listing's own)."""
    clients: dict[str, Provider] = {}
    tasks: dict[str, Callable[[], list[Instance]]] = {}
    rows: list[FleetRow] = []
    made: dict[str, Any] = {"timeout": timeout, "retries": 1, "backoff": 0.5,
                            "max_backoff": 2.0, "max_rate_wait": timeout,
                            **(client_options or {})}
    for account in accounts:
        if account.problem:
            continue
        client = account.client(**made)
        clients[account.name] = client
        tasks[account.name] = client.list_instances
    # Each try's limit, the backoffs between them and the 429s waited out (a v1 list's
    # pages cost a second each).
    bound = timeout * (made["retries"] + 1) + made["max_backoff"] * made["retries"] + \
        made["max_rate_wait"] + 1.0
    found = all_at_once(tasks, bound)
    for account in accounts:
        answer = found.get(account.name)
        if account.problem or isinstance(answer, BaseException) or answer is None:
            why = account.problem or (_why(answer) if isinstance(answer, BaseException)
                                      else "no answer")
            rows.append(FleetRow(account.name, account.provider, error=why))
            continue
        rows.extend(FleetRow(account.name, account.provider, inst) for inst in answer)
    return rows + _looked_up(rows, clients, wanted, bound), clients


def _looked_up(rows: list[FleetRow], clients: dict[str, Provider], wanted: Iterable[str],
               timeout: float) -> list[FleetRow]:
    """The ``wanted`` instances of providers whose list failed, each asked for on its own
    (a list can fail where showing one instance does not), all at once, on each failed
    account of its provider in turn: rows for those that answered."""
    listed = {row.target for row in rows if row.instance is not None}
    failed = [row for row in rows if row.error and row.account in clients]

    def ask(provider: str, iid: str) -> FleetRow | None:
        for row in (r for r in failed if r.provider == provider):
            try:
                return FleetRow(row.account, provider, clients[row.account].get_instance(iid))
            except ProviderError:
                continue
        return None

    tasks: dict[str, Callable[[], FleetRow | None]] = {
        target: partial(ask, provider, iid)
        for target in sorted(set(wanted) - listed)
        for provider, _, iid in [target.partition(":")]
        if iid and any(r.provider == provider for r in failed)}
    found = all_at_once(tasks, timeout) if tasks else {}
    return [row for row in found.values() if isinstance(row, FleetRow)]


def connect_instance(client: Provider, inst: Instance, options: FleetOptions) -> Transport:
    """One SSH connection to ``inst`` at the address its provider gives, by its name
    ``provider:ID`` as ``gpurent-tui vast:ID`` reaches it: what ``~/.ssh/config`` says for
    the name (``Host vast:*``), the provider's default user unless it names one, the host
    key filed under the name; an unknown key is refused unless ``accept_new``."""
    from remote.transport import ssh  # paramiko loads only when a box is reached

    address = client.ssh_address(inst)
    if address is None:
        raise ValueError("the provider gives no SSH address")
    box = NamedBox(f"{client.name}:{inst.id}", address.host, address.port, address.user)
    return ssh.connect(box, accept_new=options.accept_new, ask_unknown=None,
                       timeout=options.timeout, **dict(options.ssh_options))


def _preload(weights: bool) -> None:
    """Import paramiko (~0.1 s) and, for the weights check, the Hub client (~0.15 s)
    while the providers answer: a fresh ``gpurent instances`` would pay them after."""
    import remote.transport.ssh  # noqa: F401 - imported now so that later imports are free

    if weights:
        from remote.weights.safety import load_hub_client

        load_hub_client()


@dataclass
class _Reached:
    """What one box's task saw so far (the probe lands before the weights check)."""

    report: BoxReport | None = None
    weights: WeightsVerdict | None = None


def _probe(client: Provider, inst: Instance, options: FleetOptions,
           verify: HubVerify | str | None, seen: _Reached) -> BoxReport:
    """The probe, then (``verify``) the weights check: the box's side folded into the
    probe's exec when the box holds the trainer, else on the same connection."""
    target = f"{client.name}:{inst.id}"
    with connect_instance(client, inst, options) as transport:
        fold = None if verify is None or isinstance(verify, str) else \
            folded_check(transport, target, options.weights_timeout)
        seen.report = probe_box(transport, extra=fold, timeout=options.timeout + (
            options.weights_timeout if fold else 0.0))
        if isinstance(verify, str):
            seen.weights = unknown(f"not checked: {verify}")
        elif verify is not None:
            seen.weights = box_weights(
                transport, target, bool(seen.report.runs), verify,
                timeout=options.weights_timeout, accept_new=options.accept_new,
                ssh_options=options.ssh_options, folded=seen.report.sections)
        return seen.report


def list_fleet(accounts: list[Account], options: FleetOptions | None = None, *,
               progress: Callable[[str], None] | None = None,
               now: float | None = None) -> Fleet:
    """The fleet now (see the module doc); ``now``: a simulation's time."""
    options = options or FleetOptions()
    say = progress or (lambda _line: None)
    started = time.monotonic()
    say(f"asking {len(accounts)} account{'s' * (len(accounts) != 1)}")
    if options.ssh and options.probe is None:
        threading.Thread(target=_preload, args=(options.weights,), daemon=True,
                         name="fleet-preload").start()
    known = leases()
    wanted = {t for t, i in intents().items() if i.want == "running"}
    rows, clients = list_accounts(accounts, options.timeout, options.client_options,
                                  wanted | set(known))
    now = time.time() if now is None else now
    rows = [replace(row, lease=known.get(row.target)) for row in rows]
    running = [row for row in rows if options.ssh and row.instance is not None
               and row.instance.state == "running"]
    reach = {row.target: row for row in running
             if options.probe is not None
             or clients[row.account].ssh_address(row.listed()) is not None}
    no_address = {row.target for row in running} - set(reach)
    if reach:
        say(f"reaching {len(reach)} running box{'es' * (len(reach) != 1)}")
    verify = hub_verify() if options.weights and reach and options.probe is None else None
    seen = {t: _Reached() for t in reach}
    limit = options.timeout * 2 + 1.0 + (options.weights_timeout if verify else 0.0)
    probe = options.probe or (lambda client, inst, t: _probe(client, inst, options, verify,
                                                              seen[t]))
    probes = all_at_once({t: partial(probe, clients[r.account], r.listed(), t)
                          for t, r in reach.items()}, limit)
    for t, got in seen.items():  # the probe came back; the weights check did not end
        failed = probes[t]
        if isinstance(failed, BaseException) and got.report is not None:
            probes[t] = got.report
            got.weights = got.weights or unknown(
                "the check did not end in time" if isinstance(failed, TimeoutError)
                else f"not checked: {_why(failed)}")
    boxes = {t: p for t, p in probes.items() if isinstance(p, BoxReport)}
    exited = {row.target for row in rows if options.ssh and row.instance is not None
              and row.instance.state == "exited"}
    first = remember_idle({**{t: judge_idle(reach[t].listed(), b, now, None,
                                            options.idle_gpu) is not None
                              for t, b in boxes.items()}, **dict.fromkeys(exited, True)},
                          now)
    not_reached = unknown("not checked: the box was not reached") if options.weights \
        else None
    out: list[FleetRow] = []
    for row in rows:
        answer = probes.get(row.target)
        if isinstance(answer, BoxReport):
            row = replace(row, box=answer, weights=seen[row.target].weights,
                          idle=judge_idle(row.listed(), answer, now,
                                          first.get(row.target), options.idle_gpu))
        elif answer is not None:
            row = replace(row, unreachable=_why(answer), weights=not_reached)
        elif row.target in no_address:
            row = replace(row, unreachable="the provider gives no SSH address",
                          weights=not_reached)
        elif row.target in exited:
            row = replace(row, idle=judge_exited(row.listed(), now, first.get(row.target)))
        out.append(row)
    taken = find_interruptions(
        [(r.target, r.instance, r.lease) for r in out if r.instance is not None], now,
        at_once=all_at_once, runs_seen={t: b.runs_by_name() for t, b in boxes.items()},
        timeout=options.timeout)
    out = [replace(r, interrupted=taken.get(r.target)) for r in out]
    return Fleet(out, now, time.monotonic() - started, clients, options)
