"""Twelve hours of a loop-mode watchdog on a simulated clock (``tests.fixtures.
watchdog_sim``): three providers' stand-ins with rate limits on, five instances each,
random 429s, 5xx answers and hangs, runs that end, people who start instances again
with new leases, Vast's comebacks. Every passed lease and idle stretch ends within one
interval plus the providers' own pace; no training run is stopped; nothing is left
billing."""

from __future__ import annotations

import pytest

from tests.fixtures.watchdog_sim import Sim


@pytest.fixture(autouse=True)
def _own_state(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def test_twelve_hours_unattended_end_every_billing_due_and_stop_no_live_run(
        provider_standin):
    sim = Sim(provider_standin, seed=1)  # bench/watchdog_soak.py runs more seeds
    sim.run()
    got = sim.report()
    assert got["passes"] >= 140  # 12 h at one pass every 5 minutes
    assert got["owed"] >= 15, got  # every instance owed at least one ending
    assert got["never_ended"] == [], got
    assert got["live_runs_stopped"] == [], got
    # One interval (300 s) plus the providers' pace (shows 2 s apart, confirming polls).
    assert got["late_max_s"] <= 300 + 60, got
    assert sum(got["faults_injected"].values()) >= 20, got  # the faults did happen
