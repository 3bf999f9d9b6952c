"""A run's new verdict is said once in its alert (issue 38, "Smaller"): a run that
completed reads "run exp completed after 30/30 epochs" or "run exp completed", never
"completed: completed". The real watcher reads the status a run wrote."""

from __future__ import annotations

import json

import pytest

from tests.fixtures.screen import history
from tests.fixtures.screen import until_true as until
from trainer import runfiles
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.spec import BoxSpec

pytestmark = pytest.mark.anyio



@pytest.mark.parametrize("counts", [False, True])
async def test_a_completed_run_is_said_completed_once(run_factory, counts: bool) -> None:
    run = run_factory("exp", done=30, total=30)
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent))])
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None)
        path = run / runfiles.STATUS_FILE
        status = json.loads(path.read_text())
        status["state"] = "completed"
        if not counts:  # a status that does not say its epochs (a stranger's engine)
            status.pop("completed_epochs", None)
            status.pop("total_epochs", None)
        runfiles.atomic_write_json(path, status)
        await until(pilot, lambda: any(line.startswith("run exp completed")
                                       for line in history(app)))
        said = next(line for line in history(app) if line.startswith("run exp completed"))
        assert said == ("run exp completed after 30/30 epochs" if counts
                        else "run exp completed"), said
