"""What the TUI does records intent as the CLI does (``remote.billing.intents``): a run
launched from the launch form on a named instance means the user wants it running (with
the run's name, project and Hub repository), and a guard armed from the guard dialog is
remembered with its choices, to be armed again where the run moves (``resume --on``).
A real trainer run on this machine; the provider stand-in."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Input

from remote.billing.intents import intent_for
from tests.fixtures.guard_kit import stop_guard
from tests.fixtures.guard_pilot import SIZE, app_for, press, ready
from tests.fixtures.pilot import quiet_env, shown, until  # noqa: F401 (autouse fixture)
from trainer import runfiles
from tui.box.view import BoxView
from tui.dialogs.guard import GuardDialog
from tui.dialogs.launch import LaunchForm

pytestmark = pytest.mark.anyio


async def test_a_launch_and_a_guard_from_the_tui_record_intent(
        tmp_path: Path, shapes_data: Path, provider_standin, monkeypatch) -> None:
    runpod = provider_standin("runpod")
    iid = runpod.add_instance()
    monkeypatch.setenv("RUNPOD_API_KEY", runpod.key)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    project = tmp_path / "runs"
    project.mkdir()
    app = app_for(project / "none", runpod, iid)
    try:
        async with app.run_test(size=SIZE) as pilot:
            box = app.query_one(BoxView)
            await until(pilot, lambda: box.state.transport is not None, timeout=60)
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
            form = app.screen
            for key, value in {"data": str(shapes_data), "epochs": "1", "imgsz": "64",
                               "batch": "8", "name": "tui", "device": "cpu",
                               "extra": "workers=0 seed=0"}.items():
                form.query_one(f"#f-{key}", Input).value = value
            await pilot.pause(0.1)
            await press(pilot, "#launch")
            await until(pilot, lambda: box.state.run_dir == f"{project}/tui", timeout=60)
            intent = intent_for(f"runpod:{iid}")
            assert intent is not None and intent.want == "running"
            assert [(r.name, r.project) for r in intent.runs] == [("tui", str(project))]
            assert intent.guard is None
            await until(pilot, lambda: runfiles.read_status(project / "tui").get("state")
                        == "completed", timeout=180)
            await pilot.press("a")
            await until(pilot, lambda: ready(app, GuardDialog))
            await press(pilot, "#arm")
            # The box's guard.json can be read back before the intent is written: wait
            # on what is asserted.
            await until(pilot, lambda: intent_for(f"runpod:{iid}").guard is not None,
                        timeout=60)
            await until(pilot, lambda: box.state.guard is not None, timeout=60)
            guard = intent_for(f"runpod:{iid}").guard
            assert guard is not None and guard["when"] == "done" and guard["then"] == "stop"
    finally:
        stop_guard(project / "tui")
