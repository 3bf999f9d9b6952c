"""A Modal tab's launch form (``l`` on ``gpurent-tui modal:APP``), against the Modal
stand-in with the real ``modal`` client: filled from the app's last launch, a timeout it
will not launch without, the app file shown as it will run, an estimate measured by a
probe on Modal that proposes the timeout, and a launch the tab then watches to its end."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import time
from pathlib import Path

import pytest
from textual.widgets import Button, Input, Static

from tests.fixtures.modal_standin import ModalStandin
from tests.fixtures.screen import screen_text, until_true, widget_text

WAIT = 240.0
OLD_APP = "ap-" + "a" * 22


def earlier_launch() -> None:
    """What the laptop recorded of an earlier launch of app ``shapes`` (run ``r1``, CPU,
    one hour), an app Modal no longer lists."""
    from remote.billing.intents import RunIntent, want_running
    from remote.serverless.appfile import ModalSpec
    from remote.serverless.record import note_app

    want_running("modal:shapes", RunIntent("r1", "shapes"))
    args = ("model=n", "imgsz=64", "epochs=2", "batch=4", "workers=0", "seed=0", "device=cpu")
    note_app(ModalSpec("shapes", "r1", args, None, 3600, "/cache/shapes/data.yaml"), OLD_APP,
             time.time() - 7200)


def test_the_modal_form_proposes_a_timeout_shows_the_app_file_and_launches(
        modal: ModalStandin, shapes_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``l`` opens the form with the last launch's words and a new run name; without a
    timeout it refuses to launch and says why; Estimate runs a probe on Modal whose
    proposal fills the timeout; the preview is the app file with that timeout; ctrl+s
    launches detached, and the tab watches the new run to its end through the Volume."""
    shutil.copytree(shapes_data.parent, modal.volumes.published("gpurent-cache") / "shapes")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    earlier_launch()
    asyncio.run(launch_from_the_form(modal))
    intents = json.loads((Path(os.environ["XDG_STATE_HOME"]) / "gpurent" /
                          "intents.json").read_text())
    assert "modal:shapes-probe" not in intents


async def launch_from_the_form(modal: ModalStandin) -> None:
    """The steps of the test above, in the TUI."""
    from remote.serverless import record_for
    from tui.box.view import BoxView
    from tui.dialogs.modal_form import ModalForm
    from tui.main import app_from_args

    app = app_from_args(["modal:shapes"])
    async with app.run_test(size=(160, 48)) as pilot:
        box = app.query_one(BoxView)
        await until_true(pilot, lambda: box.spec.connector.state.last() is not None, WAIT)
        await pilot.press("l")
        await until_true(pilot, lambda: isinstance(app.screen, ModalForm))
        form = app.screen
        assert form.query_one("#f-name", Input).value == "r2"
        assert form.query_one("#f-data", Input).value == "/cache/shapes/data.yaml"
        assert form.query_one("#f-timeout", Input).value == "1h"
        assert form.query_one("#f-extra", Input).value == "workers=0 seed=0"
        assert "TIMEOUT = 3600" in widget_text(app, form.query_one("#appfile", Static))

        form.query_one("#f-timeout", Input).value = ""
        await until_true(pilot, lambda: form.query_one("#launch", Button).disabled)
        assert "timeout= is required" in widget_text(app, form.query_one("#money", Static))
        await pilot.press("ctrl+s")
        assert isinstance(app.screen, ModalForm) and modal.calls("FunctionCreate") == []

        form.query_one("#estimate", Button).press()
        await until_true(pilot, lambda: form.proposed != "", WAIT)
        probe = modal.calls("FunctionCreate")[0].function
        assert probe.timeout_secs == 900
        timeout = form.query_one("#f-timeout", Input).value
        assert timeout == form.proposed and timeout[-1] in "mh"
        seconds = int(timeout[:-1]) * (60 if timeout.endswith("m") else 3600)
        # the preview holds the app file with the new timeout (read from the widget: the
        # form may have scrolled that line out of view)
        assert f"TIMEOUT = {seconds}" in str(form.query_one("#appfile", Static).content)
        await until_true(pilot, lambda: "proposed" in widget_text(
            app, form.query_one("#form-status", Static)))

        await until_true(pilot, lambda: not form.query_one("#launch", Button).disabled)
        await pilot.press("ctrl+s")
        await until_true(pilot, lambda: not isinstance(app.screen, ModalForm), WAIT)
        record = record_for("shapes")
        assert record is not None and record.run == "r2" and record.app_id != OLD_APP
        assert record.timeout == seconds
        launch = modal.calls("FunctionCreate")[-1].function
        assert launch.timeout_secs == seconds
        assert box.state.run_dir == "shapes/r2"
        await until_true(pilot, lambda: box.state.status is not None
                         and box.state.status.health.verdict == "completed", WAIT)
        assert "r2" in screen_text(app)
