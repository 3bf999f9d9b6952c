"""Instances taken away: the provider stopped (outbid, preempted, host lost) an instance
the user wanted running, and what of its runs is safe.

"Wanted running" is the provider's own word where it keeps one (Vast's
``intended_status``), else this laptop's record (``remote.billing.intents``: a launch,
resume or start from here, not followed by a stop from here). Not an interruption: a
stop after the instance's lease ran out (the watchdog's or the guard's doing), or after
its runs ended while a guard was armed from here (the guard's doing).

For each run launched there, the last checkpoint known to be safe comes from what the
laptop can verify with the box gone (``remote.weights.lastsafe``): the Hub's copy in the
user's repository, asked with the user's token (the run's own ``last.pt``: a repository
other runs push to may hold another's, and that is said instead of an epoch), and an
intact pulled copy. The epochs lost are exact when the laptop saw the run's last epoch
after it could no longer change (the fleet's probe found it dead, failed or stopped),
else bounded by one milestone.

An episode (from the first listing that saw it taken away until it runs again) is kept in
``STATE/interrupted.json``, so that it is told once (``first_telling``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from remote.billing.intents import Intent, RunIntent, intent_for, intents, observe
from remote.billing.statefile import locked_json, moment
from remote.fleet.leases import Lease
from remote.weights.lastsafe import HubCopy, LaptopCopy, hub_copy, laptop_copy
from trainer import runfiles
from trainer.providers import Instance
from trainer.text import clean_text, one_line

#: The episodes file, in the state directory.
EPISODES_FILE = "interrupted.json"
#: Normalised states that mean "not running" for a provider that keeps no intent.
TAKEN = ("stopped", "exited", "error", "destroyed")
#: Vast's ``actual_status`` values that mean the instance is not running.
VAST_TAKEN = ("exited", "offline", "stopped")
#: A run observed in one of these can no longer add epochs.
ENDED = ("dead", "failed", "stopped", "completed")
#: A run that ended by itself: a guard armed from here then stops the instance.
ENDED_ITSELF = ("failed", "stopped", "completed")


@dataclass(frozen=True)
class RunAtRisk:
    """One run of a taken instance: what the laptop last saw of it and its safe copies."""

    run: RunIntent
    hub: HubCopy | None = None
    laptop: LaptopCopy | None = None

    def safe_words(self) -> str:
        """``epoch 4 on the Hub org/exp@abc1234`` (and the laptop's copy), or why none."""
        said = []
        if self.hub is not None and not self.hub.error:
            said.append(f"epoch {self.hub.epoch if self.hub.epoch is not None else '?'} "
                        f"{self.hub.where}")
        if self.laptop is not None:
            said.append(f"{self.laptop.file} pulled to this laptop at "
                        f"{self.laptop.time[11:16] or '?'} UTC ({self.laptop.local_path})")
        if said:
            return " and ".join(said)
        why = self.hub.error if self.hub is not None else "no hub= repository"
        return f"none known ({why})"

    def lost_words(self) -> str:
        """The epochs done on the box after the safe one, when the laptop saw them."""
        safe = self.hub.epoch if self.hub is not None else None
        seen = self.run.seen.get("epoch")
        if not isinstance(safe, int) or not isinstance(seen, int):
            return ""
        exact = self.run.seen.get("health") in ENDED
        lost = max(0, seen - safe)
        return (f"{lost} epoch(s) lost (seen at epoch {seen} on the box, its run "
                f"{self.run.seen.get('health')})" if exact else
                f"at least {lost} epoch(s) lost (seen at epoch {seen} while it ran)")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"run": self.run.to_dict(),
                "hub": None if self.hub is None else self.hub.to_dict(),
                "laptop": None if self.laptop is None else self.laptop.to_dict(),
                "safe": self.safe_words(), "lost": self.lost_words() or None}


@dataclass(frozen=True)
class Interruption:
    """``target`` was taken away (``how``); first noticed at ``noticed_at``, last seen
    running at ``seen_running``; its runs and what of them is safe."""

    target: str
    how: str
    noticed_at: float
    seen_running: float | None = None
    runs: tuple[RunAtRisk, ...] = field(default_factory=tuple)

    @property
    def episode(self) -> str:
        """The episode's key: one telling each."""
        return f"taken:{self.noticed_at:.0f}"

    def words(self) -> str:
        """The interruption in one line."""
        seen = "" if self.seen_running is None else \
            f", last seen running at {_hhmm(self.seen_running)}"
        text = f"taken away by the provider at {_hhmm(self.noticed_at)} ({self.how}{seen})"
        for risk in self.runs:
            text += f"; {risk.run.name}: last safe checkpoint: {risk.safe_words()}"
            lost = risk.lost_words()
            if lost:
                text += f", {lost}"
            if risk.run.repo:
                text += f"; resume it: gpurent resume {risk.run.repo}:{risk.run.name} --on TARGET"
        return one_line(clean_text(text), 900)

    def message(self) -> dict[str, Any]:
        """A notification in the guard's shape (``trainer.guard.notify.request_for``)."""
        return {"event": "alarm", "title": f"gpurent: {self.target} was taken away",
                "text": f"{self.target}: {self.words()}", "target": self.target,
                "trigger": "interrupted", "action": "none", "how": self.how,
                "runs": [r.to_dict() for r in self.runs], "at": runfiles.utc_now_iso()}

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"target": self.target, "how": self.how, "noticed_at": self.noticed_at,
                "seen_running": self.seen_running, "words": self.words(),
                "runs": [r.to_dict() for r in self.runs]}


def _hhmm(when: float) -> str:
    return time.strftime("%H:%M UTC", time.gmtime(when))


def how_taken(inst: Instance, intent: Intent | None) -> str:
    """Why ``inst`` counts as taken away (the provider's words), ``""`` when it does not."""
    raw = inst.raw if isinstance(inst.raw, dict) else {}
    if inst.provider == "vast" and raw.get("intended_status") == "running":
        actual = str(raw.get("actual_status") or "")
        if actual in ("exited", "offline") or (
                actual == "stopped" and intent is not None and intent.want == "running"
                and (intent.seen_running or 0) >= intent.since):
            return f"Vast says {actual} while it is meant to run"
        return ""
    if intent is None or intent.want != "running" or inst.state not in TAKEN:
        return ""
    if inst.raw_state.lower() == "preempted":
        return "preempted (Lambda says so)"
    return f"{inst.provider} says {inst.raw_state or inst.state}"


def taken_words(inst: Instance, target: str | None) -> str:
    """Why the box of instance ``target`` (``vast:4242``) no longer answers, when its
    provider stopped it without being asked from this laptop: the fleet's "taken away"
    verdict (``how_taken``), else the provider's own word for an instance that is not
    running and that nobody here asked to stop; ``""`` when it runs, or the stop was
    asked for here (``want_stopped``)."""
    intent = intent_for(target) if target else None
    how = how_taken(inst, intent)
    if how:
        return f"taken away by the provider ({how})"
    if inst.state in TAKEN and (intent is None or intent.want == "running"):
        return f"{inst.provider} says the instance is {inst.raw_state or inst.state}"
    return ""


def explained(intent: Intent | None, lease: Lease | None, now: float) -> bool:
    """A stop that the lease or an armed guard (after the runs ended) accounts for."""
    if lease is not None and lease.left(now) <= 0:
        return True
    return intent is not None and intent.guard is not None and bool(intent.runs) and \
        all(r.seen.get("health") in ENDED_ITSELF for r in intent.runs)


def note_episode(target: str, now: float, taken: bool) -> float | None:
    """The first time this episode was noticed (``None`` and forgotten when not taken)."""
    with locked_json(EPISODES_FILE) as data:
        if not taken:
            data.pop(target, None)
            return None
        entry = data.get(target)
        noticed = moment(entry.get("noticed_at")) if isinstance(entry, dict) else None
        if noticed is None:
            data[target] = {"noticed_at": now, "told": False}
        return now if noticed is None else noticed


def first_telling(interruption: Interruption) -> bool:
    """``True`` once per episode: the caller tells it (words, webhooks)."""
    with locked_json(EPISODES_FILE) as data:
        entry = data.get(interruption.target)
        if not isinstance(entry, dict) or entry.get("told"):
            return False
        entry["told"] = True
        return True


def _at_risk(run: RunIntent) -> RunAtRisk:
    return RunAtRisk(run, hub_copy(run.repo, run.name) if run.repo else None,
                     laptop_copy(run.name, run.project))


Row = tuple[str, Instance, Lease | None]


def find_interruptions(rows: Iterable[Row], now: float, *,
                       at_once: Callable[[dict[str, Callable[[], Any]], float], dict[str, Any]],
                       runs_seen: dict[str, dict[str, dict[str, Any]]] | None = None,
                       timeout: float = 20.0) -> dict[str, Interruption]:
    """The taken instances among ``rows`` (target, instance, lease), by target. Running
    ones with an intent here are observed (``runs_seen``: by target, by run name, what the
    fleet saw of each) and end their episode. The Hub is asked for all at once."""
    wanted = intents()
    found: dict[str, tuple[str, float, Intent | None]] = {}
    for target, inst, lease in rows:
        intent = wanted.get(target)
        if inst.state == "running":
            note_episode(target, now, False)
            if intent is not None:
                observe(target, now, inst.price_per_hour, (runs_seen or {}).get(target, {}))
            continue
        how = how_taken(inst, intent)
        if how and not explained(intent, lease, now):
            noticed = note_episode(target, now, True)
            found[target] = (how, noticed if noticed is not None else now, intent)
    risks = at_once({f"{t}|{r.name}": partial(_at_risk, r) for t, (_h, _n, i) in
                     found.items() for r in (i.runs if i is not None else ())}, timeout * 2)
    out = {}
    for target, (how, noticed, intent) in found.items():
        runs = tuple(risk if isinstance(risk := risks.get(f"{target}|{r.name}"), RunAtRisk)
                     else RunAtRisk(r, HubCopy(r.repo, error=one_line(risk, 200)))
                     for r in (intent.runs if intent is not None else ()))
        out[target] = Interruption(target, how, noticed,
                                   intent.seen_running if intent is not None else None, runs)
    return out
