"""A lease given in the launch form (the ``gpurent launch --lease`` of the TUI): the form
has a lease field only for an instance the user named; a duration that is not one is
marked and refuses Launch; a valid one is kept on this laptop (the watchdog's) and on
the box (the guard's) before the run starts, and the launch line says it (on this
laptop's clock, not ISO); the form says who would end the billing as things stand."""

from __future__ import annotations

import time

import pytest
from textual.widgets import Button, Input

from remote.fleet.leases import lease_for
from tests.fixtures.launched import kill_launched
from tests.fixtures.pilot import connected, local_app, messages, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import until_shown
from trainer.guard.lease import read_lease
from tui.dialogs.launch import LaunchForm

pytestmark = pytest.mark.anyio


async def test_a_lease_typed_in_the_form_is_kept_here_and_on_the_box(
        run_factory, shapes_data, provider_standin, monkeypatch, tmp_path):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # no watchdog passed
    vast = provider_standin("vast")
    iid = vast.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast.key)
    run = run_factory("exp1", done=2, total=2, state="completed")
    app = local_app(run.parent, provider="vast", instance=iid, provider_url=vast.base_url)
    launched = run.parent / "leased"
    try:
        async with app.run_test(size=(150, 46), notifications=True) as pilot:
            box = await connected(app, pilot)
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm))
            form = app.screen
            form.query_one("#f-data", Input).value = str(shapes_data)
            await until_shown(pilot, "✔ the dataset doctor found no errors", timeout=120)
            for key, value in {"name": "leased", "epochs": "1", "imgsz": "64",
                               "extra": "workers=0"}.items():
                form.query_one(f"#f-{key}", Input).value = value
            lease = form.query_one("#f-lease", Input)
            lease.value = "soon"
            await until_shown(pilot, "✖ lease: 'soon' is not a duration")
            assert form.query_one("#launch", Button).disabled
            lease.value = "2h"
            # Said as things stand: no watchdog passed here, no guard armed on the box.
            await until_shown(pilot, f"✔ vast:{iid}: billing to end 2 h after the launch; "
                              "NO watchdog seen (gpurent watchdog); the box's guard is NOT "
                              "armed (a arms it)")
            await pilot.press("ctrl+s")
            await until(pilot, lambda: not isinstance(app.screen, LaunchForm), timeout=90)
            await until(pilot, lambda: box.state.run_dir == str(launched))
            given = lease_for(f"vast:{iid}")
            assert given is not None
            until_local = time.strftime("%H:%M", time.localtime(given.until))
            await until(pilot, lambda: any(m.startswith("launched") and
                                           f"lease until {until_local} (in 1 h 59 min), "
                                           "then stop" in m for m in messages(app)))
            assert given is not None and given.then == "stop"
            assert 2 * 3600 - 120 < given.left() <= 2 * 3600
            assert read_lease()["until"] == given.until  # on the box, for its guard
    finally:
        kill_launched(launched)


async def test_a_box_without_a_named_instance_has_no_lease_field(run_factory):
    run = run_factory("exp1", done=2, total=2, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(150, 46)) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm))
        assert not app.screen.query("#f-lease") and not app.screen.query("#note-lease")
