"""Idle and waste, priced: from what a probe of the box saw (``remote.runs.probe``) and
the provider's start time, how long a running instance has been paying for nothing.

An instance is *idle* when its box has no live run and no GPU busy now (at or over the
threshold), or when every GPU stayed under the threshold although a run looks alive (a
stalled loop that holds its process: SkyPilot #10628). Since when:

* no live run: since the later of the instance's last start (the provider's own time:
  never across a stopped stretch) and the last update of the newest ended run (its
  ``status.json``, on the box's clock, moved onto this laptop's), whichever are known;
* GPUs under the threshold with a run alive, or no live run and no provider start time:
  since the box's GPU ring says every GPU went under the threshold (``quiet_since`` of
  ``trainer.guard.ring``, fed by the guard's polls and every probe; its holes are not
  bridged), moved onto this laptop's clock with the probe's reading of the box's clock;
  where the ring does not say, since this laptop first saw it so
  (``STATE/fleet-seen.json``, kept per instance by every listing and watchdog pass);
  never before the newest live run started (GPUs quiet before a launch are not the new
  run's idle time).

Only what was observed: a box not reached has no idle words, and the seconds are never
counted from before the instance's start.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remote.billing.statefile import locked_json, moment
from remote.runs.probe import QUIET_PERCENT, BoxReport
from trainer.providers import Instance
from trainer.text import money

#: GPU utilisation (percent) under which a GPU counts as idle (the GPU ring's quiet).
IDLE_GPU_PERCENT = QUIET_PERCENT
#: Per instance, when this laptop first saw it idle in the current stretch.
SEEN_FILE = "fleet-seen.json"


@dataclass(frozen=True)
class Idle:
    """An idle stretch: since when (epoch s), why, and what it cost so far."""

    since: float
    why: str
    seconds: float
    dollars: float | None

    def words(self) -> str:
        """``idle 47 min, $2.72``."""
        cost = "" if self.dollars is None else f", {money(self.dollars)}"
        return f"idle {minutes(self.seconds)}{cost}"

    def at(self, now: float, price_per_hour: float | None) -> Idle:
        """The same stretch as it stands at ``now`` (still idle, as last seen): its
        seconds and dollars moved on."""
        seconds = max(self.seconds, now - self.since)
        return Idle(self.since, self.why, seconds,
                    None if price_per_hour is None else seconds * price_per_hour / 3600)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"since": self.since, "why": self.why, "seconds": round(self.seconds, 1),
                "dollars": None if self.dollars is None else round(self.dollars, 4),
                "words": self.words()}


def minutes(seconds: float) -> str:
    """``47 min``, ``3 h 05 min``."""
    whole = int(max(0.0, seconds) // 60)
    return f"{whole} min" if whole < 60 else f"{whole // 60} h {whole % 60:02d} min"


def span(seconds: float) -> str:
    """``59 s`` under a minute (at least ``1 s``: a deadline not yet reached is never
    "0"), else as ``minutes``: a lease with 59 s left never reads "0 min left"."""
    return f"{max(1, int(seconds))} s" if seconds < 60 else minutes(seconds)


def idle_reason(box: BoxReport, threshold: float = IDLE_GPU_PERCENT) -> str | None:
    """Why the box is idle now (``None``: it is not, as far as was seen). A Hub push
    under way (a run's final one among them) is work: never idle."""
    if box.pushes:
        return None
    busiest = box.gpu_busiest()
    gpus_idle = busiest is not None and busiest < threshold
    if not box.live_runs and (busiest is None or gpus_idle):
        return "no live run" + (f", GPUs under {threshold:g}%" if gpus_idle else "")
    if box.live_runs and gpus_idle:
        return f"GPUs under {threshold:g}% with a run alive"
    return None


def _offset(box: BoxReport, now: float) -> float:
    """Seconds to add to a time on the box's clock to put it on this laptop's."""
    return 0.0 if box.now is None else now - box.now


def _last_run_end(box: BoxReport, now: float) -> float | None:
    ends = [run.updated for run in box.runs if run.updated is not None]
    return max(ends) + _offset(box, now) if ends else None


def _live_run_start(box: BoxReport, now: float) -> float | None:
    starts = [run.started for run in box.live_runs if run.started is not None]
    return max(starts) + _offset(box, now) if starts else None


def quiet_since(box: BoxReport, now: float,
                threshold: float = IDLE_GPU_PERCENT) -> float | None:
    """Since when the box's GPU ring says every GPU stayed under ``threshold``, on this
    laptop's clock (``now`` less how long before the box's own now); ``None`` when the
    ring does not say (no quiet stretch reaching the probe's moment)."""
    past = box.gpu_history(threshold)
    if past is None or past.quiet_since is None or box.now is None:
        return None
    return now - (box.now - past.quiet_since)


def judge_idle(inst: Instance, box: BoxReport | None, now: float,
               first_seen: float | None, threshold: float = IDLE_GPU_PERCENT) -> Idle | None:
    """The idle stretch of a running instance whose box was probed, else ``None``.
    ``first_seen``: when this laptop first saw it idle in the current stretch."""
    if inst.state != "running" or box is None:
        return None
    why = idle_reason(box, threshold)
    if why is None:
        return None
    start = inst.started_at
    known = [t for t in (start, _last_run_end(box, now)) if t is not None]
    if why.startswith("no live run") and known:
        since = max(known)
    else:
        quiet = quiet_since(box, now, threshold)
        since = quiet if quiet is not None else first_seen if first_seen is not None else now
        for floor in (start, _live_run_start(box, now)):
            if floor is not None:
                since = max(since, floor)
    seconds = max(0.0, now - since)
    price = inst.price_per_hour
    return Idle(since, why, seconds, None if price is None else seconds * price / 3600)


def judge_exited(inst: Instance, now: float, first_seen: float | None) -> Idle | None:
    """An instance whose container exited by itself while it bills the GPU (Vast's
    ``exited`` with ``intended_status`` running): nothing can run there, so it idles,
    since this laptop first saw it so (the provider gives no time for it)."""
    if inst.state != "exited":
        return None
    since = now if first_seen is None else first_seen
    if inst.started_at is not None:
        since = max(since, inst.started_at)
    seconds = max(0.0, now - since)
    price = inst.price_per_hour
    return Idle(since, "its container exited; it bills the GPU", seconds,
                None if price is None else seconds * price / 3600)


def remember_idle(seen: dict[str, bool], now: float) -> dict[str, float]:
    """Record which instances (``vast:4242`` -> idle now) are idle, keeping the time each
    was first seen idle in its current stretch; return those times for the idle ones."""
    with locked_json(SEEN_FILE) as data:
        for target, idle in seen.items():
            if not idle:
                data.pop(target, None)
            elif moment(data.get(target)) is None:
                data[target] = now
        return {t: moment(data[t]) or now for t, idle in seen.items() if idle}
