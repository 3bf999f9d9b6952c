"""What the user wants of each instance, as this laptop knows it: ``STATE/intents.json``.

A provider's state alone cannot tell a stop the user asked for from one the provider did
on its own (RunPod says ``EXITED`` for both; Vast keeps an ``intended_status``, the
others do not). So the laptop writes down what it was asked: a launch, a resume or a
start on an instance means "running", with the run (its name, project and Hub
repository); a stop or destroy from this laptop means "stopped"; an armed guard keeps
its ``--when``/``--then`` here too, so that a run moved to another box can be guarded
there the same way. The fleet listing adds what it observed of each run (its last
completed epoch and health, when) and the instance's running price.

The file is changed under a lock (``remote.billing.statefile``); unreadable entries are
left out when read.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from remote.billing.statefile import locked_json, moment, read_entries, state_file
from remote.fields import num, obj

#: The laptop's intents file, in the state directory.
INTENTS_FILE = "intents.json"


@dataclass(frozen=True)
class RunIntent:
    """A run launched on the instance: its ``name``, ``project`` on the box and Hub
    ``repo`` (``""`` without ``hub=``); what the laptop last ``seen`` of it (completed
    epochs, health, when) and its milestone ``hub_period``/``epochs`` when given."""

    name: str
    project: str = ""
    repo: str = ""
    seen: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"name": self.name, "project": self.project, "repo": self.repo,
                "seen": dict(self.seen)}


@dataclass(frozen=True)
class Intent:
    """``target`` (``runpod:abc``) should be ``want`` (``running``/``stopped``) since
    ``since``; its runs, its guard (``{"when", "then"}`` when armed from here), when the
    laptop last saw it running and at what price."""

    target: str
    want: str
    since: float
    runs: tuple[RunIntent, ...] = ()
    guard: dict[str, Any] | None = None
    seen_running: float | None = None
    price_per_hour: float | None = None
    #: Where its last run moved (``gpurent resume ... --on``): a comeback bills for
    #: nothing (``""``: none moved away).
    moved_to: str = ""

    def run(self, repo: str, name: str) -> RunIntent | None:
        """The run of Hub ``repo`` named ``name``, when launched here."""
        return next((r for r in self.runs if r.repo == repo and r.name == name), None)


def _runs(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The entry's runs as written (each a dict with a name), whatever else it holds."""
    runs = entry.get("runs")
    return [r for r in runs if isinstance(r, dict) and isinstance(r.get("name"), str)] \
        if isinstance(runs, list) else []


def _intent(target: str, entry: Any) -> Intent | None:
    if not isinstance(entry, dict) or entry.get("want") not in ("running", "stopped"):
        return None
    runs = tuple(RunIntent(r["name"], _text(r.get("project")), _text(r.get("repo")),
                           r["seen"] if isinstance(r.get("seen"), dict) else {})
                 for r in _runs(entry))
    guard = entry.get("guard") if isinstance(entry.get("guard"), dict) else None
    return Intent(target, entry["want"], moment(entry.get("since")) or 0.0, runs, guard,
                  moment(entry.get("seen_running")), num(entry.get("price_per_hour")),
                  _text(entry.get("moved_to")))


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def intents() -> dict[str, Intent]:
    """Every instance's intent on this laptop, by target (unreadable entries left out,
    said once)."""
    return read_entries(state_file(INTENTS_FILE), _intent)


def intent_for(target: str) -> Intent | None:
    """``target``'s intent, or ``None``."""
    return intents().get(target)


def want_running(target: str, run: RunIntent | None = None, now: float | None = None) -> None:
    """``target`` should run (a launch, resume or start from here), with ``run`` on it."""
    now = time.time() if now is None else now
    with locked_json(INTENTS_FILE) as data:
        entry = obj(data.get(target))
        runs = _runs(entry)
        if run is not None:
            runs = [r for r in runs if r.get("name") != run.name] + [run.to_dict()]
        if entry.get("want") != "running":
            entry["since"] = now
        entry.update(want="running", runs=runs)
        entry.pop("moved_to", None)
        data[target] = entry


def want_stopped(target: str, now: float | None = None) -> None:
    """``target`` was stopped or destroyed from here: a stopped state is no surprise."""
    with locked_json(INTENTS_FILE) as data:
        entry = obj(data.get(target))
        entry.update(want="stopped", since=time.time() if now is None else now)
        data[target] = entry


def set_guard(target: str, guard: dict[str, Any] | None) -> None:
    """Remember the guard armed on ``target`` from here, its options as given to
    ``gpurent guard arm`` (``None``: disarmed). A guard armed means the instance runs."""
    with locked_json(INTENTS_FILE) as data:
        entry = data.get(target)
        if not isinstance(entry, dict):
            entry = {"want": "running", "since": time.time(), "runs": []}
        entry["guard"] = guard
        data[target] = entry


def observe(target: str, now: float, price: float | None,
            runs: dict[str, dict[str, Any]]) -> None:
    """The fleet saw ``target`` running at ``now`` (at ``price`` $/h), and of its runs (by
    name) what ``runs`` says; runs not launched from here are not added."""
    with locked_json(INTENTS_FILE) as data:
        entry = data.get(target)
        if not isinstance(entry, dict) or entry.get("want") != "running":
            return
        entry["seen_running"] = now
        if price is not None:
            entry["price_per_hour"] = price
        for run in _runs(entry):
            if run["name"] in runs:
                run["seen"] = {**runs[run["name"]], "at": now}


def move_intent(old: str, new: str, name: str, project: str = "",
                now: float | None = None) -> Intent | None:
    """Run ``name`` left ``old`` for ``new`` (into ``project`` there): ``new`` should run
    it (with the same Hub repository, and the guard that ``old`` had); ``old`` no longer
    holds it (and is no longer wanted running when that was its last run: it keeps a
    note of where the run went, so that the watchdog stops its comeback). Returns
    ``old``'s intent before."""
    now = time.time() if now is None else now
    with locked_json(INTENTS_FILE) as data:
        before = _intent(old, data.get(old))
        if before is None:
            return None
        moved = [r.to_dict() for r in before.runs if r.name == name]
        for run in moved:
            run.update(seen={}, project=project or run["project"])
        kept = [r.to_dict() for r in before.runs if r.name != name]
        data[old] = {**data[old], "runs": kept}
        if not kept:
            data[old].update(want="stopped", since=now, moved_to=new)
        entry = obj(data.get(new))
        runs = [r for r in _runs(entry) if r["name"] != name]
        entry.update(want="running", since=now, runs=runs + moved)
        if before.guard is not None:
            entry["guard"] = before.guard
        data[new] = entry
    return before
