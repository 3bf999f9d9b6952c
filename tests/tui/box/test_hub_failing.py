"""Hub pushes that fail every epoch are no longer silent (issue 38 item 9): the box tab's
weights badge says so while they fail, ONE toast (kept in the events) says why, and the
events say when a push works again, which clears the badge. The run's status.json is
written as our trainer writes its ``hub`` key; the real watcher reads it."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.fixtures.screen import history
from trainer import runfiles
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.spec import BoxSpec
from tui.widgets.badges import WeightsBadge

pytestmark = pytest.mark.anyio
REFUSED = ("401 Client Error: Unauthorized for url: https://huggingface.co/api/models/"
           "org/exp/preupload/main (Invalid credentials in Authorization header)")


def epoch_status(run: Path, epoch: int, hub: dict) -> None:
    """The status our trainer writes at the end of ``epoch`` with its last push's outcome."""
    path = run / runfiles.STATUS_FILE
    status = json.loads(path.read_text())
    status.update(completed_epochs=epoch, current_epoch=epoch,
                  hub={**hub, "epoch": epoch, "time": runfiles.utc_now_iso()})
    runfiles.atomic_write_json(path, status)


async def until(pilot, check, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"condition not met: {history(pilot.app)[-4:]}"
        await pilot.pause(0.05)


async def test_failing_pushes_show_a_badge_and_one_toast_until_one_works(run_factory):
    run = run_factory("exp", done=3, total=10)
    epoch_status(run, 3, {"error": REFUSED})
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent))])
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        box = app.query_one(BoxView)
        badge = box.query_one(WeightsBadge)
        await until(pilot, lambda: "Hub push failing" in str(badge.content))
        for epoch in (4, 5):  # failing again at every epoch
            epoch_status(run, epoch, {"error": REFUSED})
            await until(pilot, lambda e=epoch: box.state.status is not None
                        and box.state.status.read.get("completed_epochs") == e)
        said = [line for line in history(app) if "Hub push failed" in line]
        assert len(said) == 1, said  # once, not once per epoch
        assert "epoch 3" in said[0] and REFUSED in said[0]  # why, whole
        assert "Hub push failing" in str(badge.content)
        epoch_status(run, 6, {"commit": "0123456789abcdef", "repo": "org/exp"})
        await until(pilot, lambda: "Hub push failing" not in str(badge.content))
        assert any("Hub push works again (epoch 6): commit 0123456789" in line
                   for line in history(app))
