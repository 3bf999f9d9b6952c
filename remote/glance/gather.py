"""The glance page's data, gathered in one background thread on a period (never per
request: the providers rate-limit, and a phone polls): each pass lists the fleet
(``remote.fleet.fleet.list_fleet``, every instance of every account, its box probed),
then reads the runs of every reached box at once (``remote.glance.boxruns``), and swaps
in a new ``Snapshot`` that the server answers from.

The runs the laptop knows: those in each reached box's registry (every run launched
through gpurent there) and those launched from this laptop (``remote.billing.intents``).
A run whose box was not reached this pass keeps what was last read of it, marked
``reached: false`` with when it was last read (``lost_since``, this laptop's clock); a
run launched from here whose box was never reached in this process shows what the
fleet last noted of it (the intent's ``seen``). A run of an instance its account no
longer lists (destroyed) is dropped.
"""

from __future__ import annotations

import posixpath
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

from remote.billing.accounts import NO_ACCOUNTS, Account, configured_accounts
from remote.billing.intents import Intent, intents
from remote.fleet.fleet import Fleet, FleetOptions, FleetRow, all_at_once, connect_instance
from remote.fleet.fleet import list_fleet as fleet_lister
from remote.glance.boxruns import RunSeen, read_runs
from remote.glance.shape import (
    ago,
    hhmm,
    instance_row,
    number,
    run_id,
    run_words,
    scalar,
    text,
)
from remote.transport.base import TransportError
from trainer import runfiles
from trainer.text import one_line

#: Seconds between passes by default, and the least allowed.
EVERY = 30.0
MIN_EVERY = 1.0


@dataclass
class KnownRun:
    """A run the laptop knows, across passes: where it is, what was last read of it
    and whether its box was reached this pass."""

    target: str
    account: str
    run_dir: str
    seen: RunSeen | None = None
    price: float | None = None
    reached: bool = False
    #: Why it was not read this pass (``""``: it was).
    why: str = ""
    #: What the fleet noted of a run launched from here (the intent's ``seen``).
    noted: dict[str, Any] = field(default_factory=dict)
    #: The box's clock minus this laptop's (seconds), at the last read.
    skew: float = 0.0

    @property
    def id(self) -> str:
        """The run's id in URLs."""
        return run_id(self.target, self.run_dir)

    @property
    def name(self) -> str:
        """The run's folder name."""
        return posixpath.basename(self.run_dir.rstrip("/")) or self.run_dir


@dataclass(frozen=True)
class Snapshot:
    """What the server answers from: the last pass (``at`` is ``None`` before the
    first), its instances and runs as sent, and each run's last read by id."""

    at: float | None = None
    seconds: float = 0.0
    passes: int = 0
    every: float = EVERY
    error: str = ""
    billing: str = ""
    instances: list[dict[str, Any]] = field(default_factory=list)
    runs: list[KnownRun] = field(default_factory=list)
    details: dict[str, KnownRun] = field(default_factory=dict)


def run_entry(run: KnownRun, now: float) -> dict[str, Any]:
    """A run for ``/api/runs`` (the shape of ``libreyolo monitor``'s, and more: its box,
    health, money, and when it was last seen), with the card's ``words``."""
    status = run.seen.status if run.seen is not None else {}

    def num(key: str) -> Any:
        return number(status.get(key))

    elapsed, eta = num("elapsed_seconds"), num("eta_seconds")
    price = run.price
    cost = None if price is None or elapsed is None else elapsed * price / 3600
    state = scalar(status.get("state")) if run.seen is not None else None
    projected = None if cost is None or eta is None or state != "running" else \
        cost + eta * (price or 0.0) / 3600
    metric = num("current_metric")
    metric_name = text(status.get("current_metric_name"), 80)
    if metric is None:
        metric, metric_name = num("best_metric"), text(status.get("best_metric_name"), 80)
    seen_at = run.seen.read_at if run.seen is not None else number(run.noted.get("at"))
    entry: dict[str, Any] = {
        "id": run.id, "name": text(run.name), "target": text(run.target),
        "account": text(run.account), "run_dir": text(run.run_dir),
        "state": state if state is not None else "unknown",
        "health": text(run.seen.health) if run.seen else text(run.noted.get("health")),
        "reason": text(run.seen.reason) if run.seen else None,
        "epoch": num("completed_epochs") if run.seen else number(run.noted.get("epoch")),
        "current_epoch": num("current_epoch"), "total_epochs": num("total_epochs"),
        "progress": num("progress"), "eta_seconds": eta, "elapsed_seconds": elapsed,
        "metric_name": metric_name, "metric": metric,
        "best_metric": num("best_metric"), "best_metric_name": text(
            status.get("best_metric_name"), 80), "best_epoch": num("best_epoch"),
        "train_loss": num("train_loss"), "updated_at": text(status.get("updated_at"), 40),
        "price_per_hour": number(price), "cost_usd": number(cost),
        "projected_usd": number(projected), "reached": run.reached,
        "seen_at": seen_at, "lost_since": None if run.reached else seen_at,
        "why": text(run.why) or None,
    }
    updated = runfiles.parse_iso(str(status.get("updated_at") or ""))
    words = run_words(entry)
    if updated is not None and run.reached:
        words["updated"] = f"updated {ago(now - (updated - run.skew))}"
    if run.reached:
        words["seen"] = f"seen {ago(now - run.seen.read_at)}" if run.seen else "seen"
    elif seen_at is not None:
        words["seen"] = f"not reached since {hhmm(seen_at)}"
    else:
        words["seen"] = "never reached from here"
    if run.seen is None and run.noted:
        epoch = number(run.noted.get("epoch"))
        words["noted"] = "last noted " + " at ".join(filter(None, (
            text(run.noted.get("health"), 40),
            None if epoch is None else f"epoch {epoch}")))
    if run.why and not run.reached:
        words["why"] = one_line(run.why, 200)
    entry["words"] = words
    return entry


class Gatherer:
    """The background pass (see the module doc): ``start`` it, read ``snapshot``;
    ``refresh`` asks for a pass now; ``stop`` ends the thread. ``accounts`` is called
    each pass (a key added to the config is picked up)."""

    def __init__(self, options: FleetOptions, every: float = EVERY, *,
                 accounts: Callable[[], list[Account]] = configured_accounts,
                 lister: Callable[[list[Account], FleetOptions], Fleet] | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        if not every >= MIN_EVERY:
            raise ValueError(f"the period must be at least {MIN_EVERY:g} s")
        self.options = options
        self.every = every
        self.accounts = accounts
        self.lister = lister or (lambda accts, opts: fleet_lister(accts, opts))
        self.clock = clock
        self._known: dict[tuple[str, str], KnownRun] = {}
        #: The keys of the accounts of the last pass (kept out of every answer).
        self.keys: list[str] = []
        self._snapshot = Snapshot(every=every)
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._ended = threading.Event()
        self._thread: threading.Thread | None = None

    def snapshot(self) -> Snapshot:
        """The last pass's snapshot (an empty one before the first)."""
        with self._lock:
            return self._snapshot

    def start(self) -> None:
        """Start the thread; the first pass begins at once."""
        self._thread = threading.Thread(target=self._loop, daemon=True, name="glance-gather")
        self._thread.start()

    def refresh(self) -> None:
        """Begin a pass now (the period counts from its end)."""
        self._wake.set()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (a pass under way is not waited for past ``timeout``)."""
        self._ended.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._ended.is_set():
            self.run_once()
            self._wake.wait(self.every)
            self._wake.clear()

    def run_once(self) -> Snapshot:
        """One pass, swapped in as the snapshot (a pass that fails says why in
        ``error`` and keeps the runs known)."""
        started = time.monotonic()
        try:
            instances, billing, runs = self._pass()
            error = ""
        except Exception as exc:  # noqa: BLE001 - the page says why; the next pass retries
            instances, billing, runs = [], "", list(self._known.values())
            error = one_line(exc, 300)
            for run in runs:
                run.reached, run.why = False, run.why or error
        before = self.snapshot()
        runs = [replace(run) for run in runs]  # the server's copies: later passes move on
        snap = Snapshot(self.clock(), time.monotonic() - started, before.passes + 1,
                        self.every, error, billing, instances, runs,
                        {run.id: run for run in runs})
        with self._lock:
            self._snapshot = snap
        return snap

    def _pass(self) -> tuple[list[dict[str, Any]], str, list[KnownRun]]:
        accounts = self.accounts()
        self.keys = [a.key for a in accounts if a.key]
        fleet = self.lister(accounts, self.options) if accounts else \
            Fleet([], self.clock(), 0.0)
        now = fleet.now
        wanted = intents()
        rows = [row for row in fleet.rows if row.instance is not None]
        reached = {row.target: row for row in rows if row.box is not None}
        plans = {t: self._plan(row, wanted) for t, row in reached.items()}
        read = all_at_once({t: partial(self._read_box, fleet, row, plans[t])
                            for t, row in reached.items()},
                           self.options.timeout * 4 + 60.0) if reached else {}
        for target, answer in read.items():
            self._merge(reached[target], plans[target], answer, now)
        listed = {row.target: row for row in rows}
        failed = {row.provider for row in fleet.rows if row.instance is None}
        for target, intent in wanted.items():
            if target not in reached and intent.want == "running":
                self._note_intent(target, intent, listed.get(target))
        for key, run in list(self._known.items()):
            row = listed.get(run.target)
            provider = run.target.partition(":")[0]
            if run.target in reached:
                if key[1] not in plans[run.target][0]:
                    del self._known[key]  # no longer among the box's runs
                continue
            if row is None and provider not in failed and \
                    not (run.target in wanted and wanted[run.target].want == "running"):
                del self._known[key]  # its instance is gone
                continue
            run.reached = False
            run.why = (row.unreachable if row is not None and row.unreachable else
                       f"instance {row.instance.state}" if row is not None and row.instance
                       and row.instance.state != "running" else
                       "the box was not reached" if row is not None else
                       f"{provider}'s account could not be listed" if provider in failed
                       else "its provider no longer lists the instance")
        runs = sorted(self._known.values(),
                      key=lambda r: (not r.reached, -(r.seen.read_at if r.seen else 0.0),
                                     r.target, r.name))
        billing = fleet.billing_words() if accounts else NO_ACCOUNTS
        return [instance_row(row, now) for row in fleet.rows], billing, runs

    def _note_intent(self, target: str, intent: Intent, row: FleetRow | None) -> None:
        """Runs launched from here on ``target``, whose box was not reached: known, with
        what the fleet last noted of them."""
        for run in intent.runs:
            if any(k[0] == target and posixpath.basename(k[1].rstrip("/")) == run.name
                   for k in self._known):
                continue
            account = row.account if row is not None else target.partition(":")[0]
            run_dir = posixpath.join(run.project, run.name) if run.project else run.name
            self._known[(target, run_dir)] = KnownRun(
                target, account, run_dir, noted=dict(run.seen),
                price=intent.price_per_hour)

    def _plan(self, row: FleetRow, wanted: dict[str, Intent]) -> tuple[list[str],
                                                                       dict[str, RunSeen]]:
        """What to read on ``row``'s box: its registered runs (the newest, as the probe
        reports them) and the runs launched there from here; and what was read of each
        before."""
        box = row.box
        dirs = [r.run_dir for r in box.runs] if box is not None else []
        names = {posixpath.basename(d.rstrip("/")) for d in dirs}
        intent = wanted.get(row.target)
        for run in intent.runs if intent is not None else ():
            if run.name not in names:
                dirs.append(posixpath.join(run.project, run.name) if run.project
                            else run.name)
        before = {k[1]: r.seen for k, r in self._known.items()
                  if k[0] == row.target and r.seen is not None}
        return dirs, before

    def _read_box(self, fleet: Fleet, row: FleetRow,
                  plan: tuple[list[str], dict[str, RunSeen]]) -> dict[str, RunSeen | str]:
        """The planned runs of ``row``'s box, read on one connection (in a thread of
        its own: it touches no shared state)."""
        dirs, before = plan
        assert row.instance is not None
        try:
            with connect_instance(fleet.clients[row.account], row.instance,
                                  fleet.options or self.options) as transport:
                return read_runs(transport, dirs, before, self.clock())
        except (TransportError, OSError, ValueError) as exc:
            return dict.fromkeys(dirs, one_line(exc, 300))

    def _merge(self, row: FleetRow, plan: tuple[list[str], dict[str, RunSeen]],
               answer: dict[str, RunSeen | str] | BaseException, now: float) -> None:
        """A box's answer into the known runs."""
        box, inst = row.box, row.instance
        skew = 0.0 if box is None or box.now is None else box.now - now
        if isinstance(answer, BaseException):
            answer = dict.fromkeys(plan[0], one_line(answer, 300))
        for run_dir, got in answer.items():
            key = (row.target, run_dir)
            known = self._known.get(key) or KnownRun(row.target, row.account, run_dir)
            if isinstance(got, RunSeen):
                known = replace(known, seen=got, reached=True, why="", skew=skew,
                                price=inst.price_per_hour if inst else None,
                                account=row.account)
            elif known.seen is None and "not a directory" in got:
                self._known.pop(key, None)  # registered once, gone since
                continue
            else:
                known = replace(known, reached=False, why=got)
            self._known[key] = known
