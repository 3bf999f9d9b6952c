"""The guard and the money in the TUI, with a real guard process and the provider
stand-ins: arming from the dialog stops an idle box and the money line says so; an alarm
is a red badge (and a bell) until acknowledged; a provider that cannot stop gets no stop
choice and no stop advice."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import Input, Select
from textual.widgets._select import InvalidSelectValueError

from remote.fleet.leases import lease_for
from remote.runs.guard import arm_guard
from remote.transport.local import LocalTransport
from tests.fixtures.guard_kit import guard_over, stop_guard, wait_until
from tests.fixtures.guard_pilot import SIZE, app_for, press, ready
from tests.fixtures.pilot import messages, quiet_env, until  # noqa: F401 (autouse fixture)
from trainer import runfiles
from trainer.guard.lease import read_lease
from tui.box.view import BoxView
from tui.dialogs.base import Dialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.guard import GuardDialog

pytestmark = pytest.mark.anyio


def ended_run(run_factory, minutes_ago: float) -> Path:
    """A completed run (no best.pt: nothing to lose) that ended ``minutes_ago``."""
    run = run_factory("exp1", done=3, total=3, state="completed")
    status = runfiles.read_status(run).fields or {}
    status["updated_at"] = runfiles.utc_now_iso(time.time() - minutes_ago * 60)
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, status)
    return run


async def test_arming_stops_an_idle_box_and_the_money_line_follows(run_factory,
                                                                   provider_standin,
                                                                   monkeypatch):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast.key)  # the laptop's: it stays here
    # This machine is the box: the key Vast places in the instance (the guard's).
    monkeypatch.setenv("CONTAINER_API_KEY", vast.instance_key(iid))
    run = ended_run(run_factory, 30)
    app = app_for(run, vast, iid)
    try:
        async with app.run_test(size=SIZE) as pilot:
            box = app.query_one(BoxView)
            await until(pilot, lambda: box.state.status is not None
                        and box.state.instance is not None)
            assert "idle 30 min: $0.23 and counting" in box.money_text().plain
            await pilot.press("a")
            await until(pilot, lambda: ready(app, GuardDialog))
            assert app.screen.query_one("#when", Select).value == "done"
            assert app.screen.query_one("#then", Select).value == "stop"
            app.screen.query_one("#lease", Input).value = "6h"  # a vast:ID box: offered
            await press(pilot, "#arm")
            await until(pilot, lambda: box.state.guard is not None
                        and box.state.guard.state == "done", timeout=60)
            assert "instance stopped: its disk bills $0.0694/h" in box.money_text().plain
            assert "and counting" not in box.money_text().plain
            assert box.guard.text().plain.startswith("guard done: Vast.ai instance")
            lease = lease_for(f"vast:{iid}")  # the same lease as `gpurent lease vast:ID 6h`
            assert lease is not None and abs(lease.left() - 6 * 3600) < 120
            assert read_lease()["target"] == f"vast:{iid}"  # on the box, for its guard
    finally:
        stop_guard(run)
    assert vast.instances[iid]["actual_status"] == "stopped"


async def test_an_alarm_stays_red_until_acknowledged(run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance()
    vast_standin.ignore(iid, "destroy", "stop")
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = ended_run(run_factory, 1)
    try:
        arm_guard(LocalTransport(), str(run), "done", "destroy", None, "vast", iid,
                  vast_standin.key, send_account_key=True, base_url=vast_standin.base_url, poll=0.1,
                  confirm_timeout=0.2, give_up_after=0.5)
        wait_until("the alarm", lambda: guard_over(run), timeout=60)
    finally:
        stop_guard(run)
    app = app_for(run, vast_standin, iid)
    bells: list[int] = []
    monkeypatch.setattr(app, "bell", lambda: bells.append(1))
    async with app.run_test(size=SIZE) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.guard is not None and box.state.guard.alarm_active)
        badge = box.guard.text()
        assert badge.plain.startswith(" ⚠ GUARD ALARM ") and "gave up after" in badge.plain
        assert any("red" in str(span.style) for span in badge.spans)
        assert bells == [1]
        await pilot.pause(1.0)  # refreshed a few times: still red, told only once
        assert box.state.guard.alarm_active and bells == [1]
        await pilot.press("a")
        await until(pilot, lambda: ready(app, ConfirmDialog))
        assert "gave up after" in app.screen.body.plain
        assert "destroy accepted, but the instance is still running" in app.screen.body.plain
        await press(pilot, "#confirm")
        await until(pilot, lambda: not box.state.guard.alarm_active)
        assert box.guard.text().plain.startswith("GUARD ALARM (acknowledged)")
        assert not any("red" in str(span.style) for span in box.guard.text().spans)
    assert (run / "guard.ack.json").exists()
    again = app_for(run, vast_standin, iid)  # a new session: the acknowledgement holds
    async with again.run_test(size=SIZE) as pilot:
        box = again.query_one(BoxView)
        await until(pilot, lambda: box.state.guard is not None)
        assert box.state.guard.alarm is not None and not box.state.guard.alarm_active


async def test_a_provider_that_cannot_stop_gets_no_stop(run_factory, lambda_standin,
                                                        monkeypatch):
    iid = lambda_standin.add_instance()
    monkeypatch.setenv("LAMBDA_API_KEY", lambda_standin.key)
    run = ended_run(run_factory, 1)
    app = app_for(run, lambda_standin, iid)
    async with app.run_test(size=SIZE) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None and box.state.instance is not None)
        await pilot.press("a")
        await until(pilot, lambda: ready(app, GuardDialog))
        then = app.screen.query_one("#then", Select)
        assert then.value == "destroy"
        with pytest.raises(InvalidSelectValueError):
            then.value = "stop"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
        await pilot.press("D")
        await until(pilot, lambda: ready(app, DestroyDialog))
        detail = app.screen.detail.plain
        assert "cannot stop an instance" in detail and "Stopping is cheaper" not in detail
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
        await pilot.press("i")
        await until(pilot, lambda: any("cannot stop" in m for m in messages(app)))
        assert not isinstance(app.screen, Dialog)
    assert not (run / "guard.json").exists()
    assert not lambda_standin.calls("POST", "terminate")
