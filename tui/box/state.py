"""The facts of one box, in one plain object that every part of the box view shares: the
link, the watched run and what is known of every run, what the box and its instance
said (preflight, instance, weights, guard), the actions in progress and the last thing
that happened. No widget, no thread: it changes on the UI thread (worker results arrive
there as messages) and worker threads only read it."""

from __future__ import annotations

import dataclasses
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from textual.notifications import SeverityLevel

from remote.billing import parse_instance_target
from remote.transport import Transport
from remote.watch import StatusEvent
from trainer.health import GOING
from trainer.text import format_duration
from tui.box.activity import Activities
from tui.box.failures import ActionRefused
from tui.spec import BoxSpec
from tui.words import provider_words

if TYPE_CHECKING:
    from remote.runs import RunInfo

#: Health verdicts that ring the bell when a run reaches them (any run of the box).
ALERT_VERDICTS: dict[str, SeverityLevel] = {
    "completed": "information", "failed": "error", "dead": "error", "stalled": "warning"}


@dataclass
class BoxState:
    """What the TUI knows about one box. ``clock`` gives the time (frozen in snapshots)."""

    spec: BoxSpec
    clock: Callable[[], float] = time.time
    #: The project directory on the box (a resume or the demo may move it).
    project: str = ""
    #: The control connection that actions use (``None`` until it is open).
    transport: Transport | None = None
    #: When the data on screen was last known fresh, while the link is down.
    down_since: float | None = None
    #: Whether a connection is being retried (Escape stops, r retries now).
    retrying: bool = False
    #: Whether the box ever answered (a watch went live, the control connection opened):
    #: until then a failed try is connecting, not a link that was lost.
    reached: bool = False
    #: The last failed try to connect (one line), until a connection opens.
    connect_error: str | None = None
    #: Why connecting stopped without another try (with the next step), else ``None``.
    not_connected: str | None = None
    #: The instance was destroyed (confirmed by the provider after our destroy).
    destroyed: bool = False
    #: The provider stopped the instance under the box while the link was down (its
    #: words, ``remote.billing.taken_words``): nothing is watched or retried until R.
    taken_away: str | None = None
    #: The watched run (``None``: the box has not chosen one yet) and its last status.
    run_dir: str | None = None
    status: StatusEvent | None = None
    #: The watch's generation: events of an earlier watch are not shown.
    gen: int = 0
    last_verdict: str | None = None
    #: The watched run's last Hub push failed: its error (``None``: it did not).
    push_failing: str | None = None
    #: The last verdict seen of every run (run dir -> verdict), to alert on changes.
    verdicts: dict[str, str] = field(default_factory=dict)
    #: Runs whose alert the user has not looked at yet.
    unseen: set[str] = field(default_factory=set)
    #: The watched run's weight files and Hub ledger as last streamed (kind -> value).
    weight_files: dict[str, Any] = field(default_factory=dict)
    preflight: dict[str, Any] | None = None
    #: The provider's instance (price, storage, state), once asked, and when it said so.
    instance: Any = None
    instance_at: float | None = None
    #: Whether the weights are safe off the box, and when that was judged.
    safety: Any = None
    safety_at: float | None = None
    #: The guard's state on the box (``None``: off).
    guard: Any = None
    activities: Activities = field(default_factory=Activities)
    #: The last outcome worth keeping on screen: ``(line, severity)``, and when it
    #: came (``say``; a line of information leaves the status row after a while).
    last_line: tuple[str, str] | None = None
    last_line_at: float = 0.0
    #: The values of the last launch from this tab (the next form starts from them).
    last_launch: dict[str, str] = field(default_factory=dict)
    #: The last profile's report (the palette's "Profile card" shows it whole).
    last_profile: dict[str, Any] | None = None
    last_hub_repo: str = ""
    #: The folder the last pull went into (``w`` offers it again).
    last_pull_dir: str = ""

    def __post_init__(self) -> None:
        self.project = self.project or self.spec.project
        if self.spec.listed is not None:
            self.instance, self.instance_at = self.spec.listed

    def say(self, line: str, severity: str = "information") -> None:
        """Put ``line`` in the status row (until the next one, or for
        ``tui.box.lines.INFO_SECONDS`` when it is only information)."""
        self.last_line = (line, severity)
        self.last_line_at = self.clock()

    # ------------------------------------------------------------------ the run

    @property
    def run_name(self) -> str:
        """The watched run's name ("" when none)."""
        return self.run_dir.rstrip("/").rsplit("/", 1)[-1] if self.run_dir else ""

    def run_path(self, name: str, project: str | None = None) -> str:
        """The directory of run ``name`` in ``project`` (default: the box's project)."""
        return f"{(project or self.project).rstrip('/')}/{name}"

    def watch(self, run_dir: str | None) -> int:
        """From now on ``run_dir`` is watched: the previous run's facts are forgotten.
        Returns the new watch's generation."""
        self.gen += 1
        self.run_dir = run_dir
        self.status = None
        self.last_verdict = None
        self.push_failing = None
        self.weight_files = {}
        self.unseen.discard(run_dir or "")
        return self.gen

    def choose_run(self, runs: list[RunInfo], name: str | None) -> str | None:
        """The run to watch once ``runs`` are listed: ``name`` when asked for, else the
        watched one, else the newest going run, else the newest."""
        if name:
            return next((r.run_dir for r in runs if r.name == name), self.run_path(name))
        if runs and self.run_dir is None:
            return ([r for r in runs if r.health in GOING] or runs)[0].run_dir
        return self.run_dir

    def note_verdict(self, run_dir: str, verdict: str) -> bool:
        """Remember a run's verdict; ``True`` when it changed to one worth an alert."""
        before = self.verdicts.get(run_dir)
        self.verdicts[run_dir] = verdict
        return before is not None and before != verdict and verdict in ALERT_VERDICTS

    def other_going(self) -> str | None:
        """The name of another run on this box last seen training (``None``: none)."""
        return next((d.rstrip("/").rsplit("/", 1)[-1] for d, verdict in self.verdicts.items()
                     if d != self.run_dir and verdict in GOING), None)

    def with_live_health(self, runs: list[RunInfo]) -> list[RunInfo]:
        """``runs`` with the watched run's row at its live health (the watcher's verdict
        is fresher than a listing's)."""
        live = None if self.status is None else self.status.health.verdict
        if live is None or self.run_dir is None:
            return runs
        return [dataclasses.replace(r, health=live) if r.run_dir == self.run_dir else r
                for r in runs]

    def resume_target(self) -> str | None:
        """The run to resume: the watched one, else ``--run``, else ``None`` (the newest
        interrupted run, found once the box answers)."""
        if self.run_dir:
            return self.run_dir
        return posixpath.join(self.project, self.spec.run) if self.spec.run else None

    # ------------------------------------------------------------------ refusals

    def need_transport(self) -> Transport:
        """The control connection, or ``ActionRefused`` saying why there is none."""
        if self.instance_destroyed():
            raise ActionRefused(f"instance {self.spec.instance} was destroyed: there is no "
                                "box to act on")
        if self.transport is None and self.not_connected:
            raise ActionRefused(f"not connected: {self.not_connected}")
        if self.transport is None:
            raise ActionRefused("not connected to the box yet: wait for the connection "
                                "(r retries now)")
        if self.down_since is not None:
            raise ActionRefused(f"no link to the box ({self.stale_words()}): reconnecting "
                                "on its own; r tries now")
        return self.transport

    def need_run(self) -> str:
        """The watched run directory, or ``ActionRefused``."""
        if self.run_dir is None:
            raise ActionRefused("no run selected (l: launch, or pick one in the runs list)")
        return self.run_dir

    # ------------------------------------------------------------------ words, money

    def stale_words(self) -> str:
        """``last data 34s ago`` while the link is down (after ``instance not running;``
        once it was taken away), else empty."""
        if self.down_since is None:
            return ""
        ago = f"last data {format_duration(max(0.0, self.clock() - self.down_since))} ago"
        return ago if self.taken_away is None else f"instance not running; {ago}"

    def bills(self) -> bool:
        """Whether money is a subject for this box: a rented box, or this machine when a
        price or an instance was given (``--local``/``--demo`` alone rent nothing)."""
        return self.spec.kind != "local" or self.spec.price is not None \
            or self.has_instance()

    def instance_destroyed(self) -> bool:
        """Whether the box's instance is known to be destroyed: by our destroy, the
        provider's word, or the guard's confirmed destroy."""
        guard = self.guard
        outcome = (guard.outcome or {}) if guard is not None and guard.state == "done" else {}
        return self.destroyed or getattr(self.instance, "state", None) == "destroyed" or \
            bool(outcome.get("confirmed") and outcome.get("action") == "destroy")

    def instance_stopped(self) -> bool:
        """Whether the box's instance is known to be stopped (its disk still bills): the
        provider's word or the guard's confirmed stop."""
        guard = self.guard
        outcome = (guard.outcome or {}) if guard is not None and guard.state == "done" else {}
        return getattr(self.instance, "state", None) == "stopped" or \
            bool(outcome.get("confirmed") and outcome.get("action") == "stop")

    def storage_per_hour(self) -> float | None:
        """What the stopped instance's disk bills per hour: the provider's figure, else
        what the guard's stop reported, else unknown."""
        storage = getattr(self.instance, "storage_per_hour", None)
        guard = self.guard
        if storage is None and guard is not None and guard.state == "done":
            storage = (guard.outcome or {}).get("billing_per_hour")
        return storage if isinstance(storage, int | float) else None

    def provider_said(self) -> str:
        """What the provider last said of the instance, in words
        (``tui.words.provider_words``); ``""`` before it said anything."""
        inst, at = self.instance, self.instance_at
        if inst is None or at is None or not self.spec.provider:
            return ""
        return provider_words(self.spec.provider, str(getattr(inst, "state", "unknown")),
                              getattr(inst, "billing_per_hour", None), self.clock() - at)

    def has_instance(self) -> bool:
        """Whether the box is a provider's instance that the app may ask about."""
        return bool(self.spec.provider and self.spec.provider != "manual"
                    and self.spec.instance)

    def instance_target(self) -> str | None:
        """The instance the user named for this box as a target (``vast:4242``): what
        leases and the laptop's intents are kept under; ``None`` without one."""
        spec = self.spec
        named = parse_instance_target(f"{spec.provider}:{spec.instance}") \
            if spec.provider and spec.instance else None
        return None if named is None else named.text

    def price_per_hour(self) -> float | None:
        """``--price``, else the provider's price for the instance, else unknown; once
        the provider took the instance away, what it bills in the state it left it in."""
        if self.taken_away is not None:
            return getattr(self.instance, "billing_per_hour", None)
        if self.spec.price is not None:
            return self.spec.price
        return getattr(self.instance, "price_per_hour", None)

    def verdict_now(self) -> str | None:
        """The watched run's health, ``taken`` once its instance was taken away (the
        last status, written before, says it trains)."""
        if self.taken_away is not None and self.status is not None:
            return "taken"
        return self.status.health.verdict if self.status is not None else None
