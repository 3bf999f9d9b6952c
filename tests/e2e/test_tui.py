"""End to end through the real OpenSSH server on 127.0.0.1: the app connects, bootstraps
the box, launches a 3-epoch CPU run from the launch form, the panes fill from the live
run, and stop training ends it gracefully."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.widgets import Button, Input

from tests.fixtures.pilot import messages, press_button, shown, until
from tests.fixtures.tui_e2e_kit import ssh_spec
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.launch import LaunchForm
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import MetricsPane

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_launch_watch_and_stop_over_ssh(sshd, shapes_data: Path, tmp_path):
    project = str(tmp_path / "box-runs")
    known_hosts = tmp_path / "known_hosts"  # empty: the host key is unknown
    known_hosts.touch()
    app = GpurentApp([ssh_spec(sshd, project, str(known_hosts))])
    async with app.run_test(size=(150, 46)) as pilot:
        box = app.query_one(BoxView)
        # The host-key question comes from the connect worker as a modal.
        await until(pilot, lambda: shown(app, ConfirmDialog)
                    and app.focused is not None, timeout=60)
        assert "SHA256:" in app.screen.body.plain and app.focused.id == "cancel"
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: box.state.transport is not None, timeout=120)
        prefix = box.link.connector.trainer_prefix
        assert prefix and "PYTHONPATH=" in prefix
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm)
                    and app.focused is not None)
        form = app.screen
        # Far more epochs than the test waits for: the stop must hit a live run.
        for key, value in {"data": str(shapes_data), "epochs": "200", "imgsz": "64",
                           "batch": "8", "name": "e2e", "device": "cpu",
                           "extra": "workers=0 seed=0"}.items():
            # As typed: the field has the focus, so the box's checks (a CPU box's
            # defaults, arriving whenever they do) leave it alone.
            field = form.query_one(f"#f-{key}", Input)
            field.focus()
            await until(pilot, lambda field=field: field.has_focus)
            field.value = value
            await pilot.pause()
        await until(pilot, lambda: "epochs=200" in form.query_one("#command").content.plain
                    and not form.query_one("#launch", Button).disabled, timeout=120)
        await press_button(pilot, "#launch")
        await until(pilot, lambda: box.state.run_dir == f"{project}/e2e", timeout=60)
        # The panes fill from the live run: status, a metrics row, log lines.
        await until(pilot, lambda: box.state.status is not None
                    and box.state.status.read.get("state") == "running"
                    and len(box.query_one(MetricsPane).rows) >= 1
                    and len(box.query_one(LogPane).log_view.lines) >= 2, timeout=240)
        assert box.state.status.health.verdict in ("live", "slow")
        assert "$1.25/h" in box.money_text().plain
        await pilot.press("x")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: any(m.startswith("stop: ") for m in messages(app)),
                    timeout=90)
        await until(pilot, lambda: box.state.status.health.verdict == "stopped", timeout=30)
    status = json.loads((Path(project) / "e2e" / "status.json").read_text())
    assert status["state"] == "stopped"
    assert 1 <= status["completed_epochs"] < status["total_epochs"] == 200
    assert (Path(project) / "e2e" / "weights" / "last.pt").is_file()
    assert any(m.startswith("stop: stopped") for m in messages(app)), messages(app)
