"""``remote.fleet.idle``: an idle stretch counted on this laptop's clock, from the
instance's last start, never from before the newest live run started, whatever the
box's clock says."""

from __future__ import annotations

from pathlib import Path

import pytest

from remote.fleet.idle import judge_exited, judge_idle, remember_idle
from remote.runs.probe import BoxReport, BoxRun
from trainer.guard.ring import GpuUse, Sample
from trainer.providers import Instance

NOW = 1_800_000_000.0  # the laptop's clock


def instance(started_ago: float | None) -> Instance:
    return Instance("running", 0.60, 0.01, 100.0, "1x H100", "203.0.113.9", 22, id="7",
                    provider="vast",
                    started_at=None if started_ago is None else NOW - started_ago)


def quiet_ring(box_now: float, minutes: int) -> list[Sample]:
    """A sample a minute, every GPU at 2 %, for ``minutes`` up to the box's now."""
    return [Sample(box_now - 60 * m, (GpuUse(0, 2.0, 500.0, 81920.0),))
            for m in range(minutes, -1, -1)]


SKEWS = [-2 * 3600.0, 0.0, 2 * 3600.0]  # the box's clock 2 h behind, right, 2 h ahead


@pytest.mark.parametrize("skew", SKEWS)
def test_quiet_gpus_before_a_launch_are_not_the_new_runs_idle_time(skew):
    """The ring was quiet an hour; a run started 45 s ago (its first epoch, GPUs still
    under the threshold): idle 45 s at most, not an hour, whatever the box's clock."""
    box_now = NOW + skew
    run = BoxRun("/r/exp", "live", updated=box_now - 5, epoch=0, started=box_now - 45)
    box = BoxReport(box_now, [GpuUse(0, 3.0, 900.0, 81920.0)], [run],
                    history=quiet_ring(box_now, 60))
    idle = judge_idle(instance(started_ago=2 * 3600), box, NOW, first_seen=None)
    assert idle is not None and "with a run alive" in idle.why
    assert 44 <= idle.seconds <= 46


@pytest.mark.parametrize("skew", SKEWS)
def test_idle_since_the_last_run_ended_is_on_the_laptops_clock_whatever_the_boxs(skew):
    """The box's clock is 2 h behind, right, or 2 h ahead: its last run ended 5 min ago
    by its own clock, so the instance has been idle 5 min (not 2 h 05, not 0)."""
    box_now = NOW + skew
    ended = BoxRun("/r/done", "completed", updated=box_now - 300, epoch=30,
                   started=box_now - 3600)
    box = BoxReport(box_now, None, [ended])
    idle = judge_idle(instance(started_ago=3 * 3600), box, NOW, first_seen=None)
    assert idle is not None and idle.why == "no live run"
    assert 299 <= idle.seconds <= 301


def test_idle_never_counts_from_before_the_last_start():
    """Running again for 60 s after a stop (a ring quiet for an hour before it, a laptop
    that first saw it idle long ago): idle 60 s."""
    box = BoxReport(NOW, [GpuUse(0, 0.0, 0.0, 81920.0)], [], history=quiet_ring(NOW, 60))
    idle = judge_idle(instance(started_ago=60), box, NOW, first_seen=NOW - 7200)
    assert idle is not None and 59 <= idle.seconds <= 61


@pytest.mark.parametrize("skew", SKEWS)
@pytest.mark.parametrize("run_alive", [True, False])
def test_the_rings_quiet_start_is_moved_onto_the_laptops_clock(skew, run_alive):
    """Every GPU quiet for the last 20 min of the ring by the box's clock, with a run
    alive for an hour, or with no run and no start time from the provider: idle 20 min
    on this laptop's clock, not 2 h more or less."""
    box_now = NOW + skew
    runs = [BoxRun("/r/exp", "stalled", updated=box_now - 1500, epoch=3,
                   started=box_now - 3600)] if run_alive else []
    box = BoxReport(box_now, [GpuUse(0, 1.0, 900.0, 81920.0)], runs,
                    history=quiet_ring(box_now, 20))
    started = 3 * 3600 if run_alive else None
    idle = judge_idle(instance(started_ago=started), box, NOW, first_seen=NOW - 5 * 3600)
    assert idle is not None and idle.why.startswith("GPUs" if run_alive else "no live run")
    assert 20 * 60 - 1 <= idle.seconds <= 20 * 60 + 1


def test_a_first_sight_from_before_a_stop_is_not_idle_time():
    """Running again for 60 s; the laptop first saw it idle 2 h ago, before the stop.
    The ring does not say (no sample yet) and the live run's status gives no start: idle
    60 s from the instance's start, both for quiet GPUs and for an exited container."""
    run = BoxRun("/r/exp", "starting", updated=None, epoch=None, started=None)
    box = BoxReport(NOW, [GpuUse(0, 0.0, 0.0, 81920.0)], [run])
    quiet = judge_idle(instance(started_ago=60), box, NOW, first_seen=NOW - 7200)
    assert quiet is not None and quiet.why.startswith("GPUs")
    assert 59 <= quiet.seconds <= 61
    exited = Instance("exited", 0.60, 0.01, 100.0, "1x H100", "203.0.113.9", 22, id="7",
                      provider="vast", started_at=NOW - 60)
    gone = judge_exited(exited, NOW, first_seen=NOW - 7200)
    assert gone is not None and 59 <= gone.seconds <= 61


def test_a_busy_moment_ends_the_remembered_idle_stretch(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch):
    """Idle, busy for one pass, idle again: the new stretch is first seen at its own
    start, not at the first stretch's (the watchdog would stop a box that just worked)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert remember_idle({"vast:7": True, "vast:8": True}, NOW - 3600) == \
        {"vast:7": NOW - 3600, "vast:8": NOW - 3600}
    assert remember_idle({"vast:7": False, "vast:8": True}, NOW - 600) == \
        {"vast:8": NOW - 3600}
    assert remember_idle({"vast:7": True, "vast:8": True}, NOW) == \
        {"vast:7": NOW, "vast:8": NOW - 3600}
