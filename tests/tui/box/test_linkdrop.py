"""The link to a box drops while the TUI watches a live run (the box in a network
namespace, behind an 80 ms relay; the link taken down for real): the panes dim and say
how old their data is, nothing claims to be live, actions say why they cannot run, and
when the link comes back the watcher, the runs list, the weights badge and the actions
all recover without a key press; a pull then works."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
from textual.widgets import Input, Static

from tests.fixtures.netbox import NetBox
from tests.fixtures.pilot import messages, shown, until
from tests.fixtures.screen import flat, screen_text, until_shown
from tests.fixtures.ssh_faults_kit import start_sim
from tests.fixtures.tui_runs import write_run
from trainer.datasets.shapes import write_dataset
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.launch import LaunchForm
from tui.dialogs.pull import PullDialog
from tui.spec import BoxSpec
from tui.widgets.badges import WeightsBadge

pytestmark = [pytest.mark.anyio, pytest.mark.netns, pytest.mark.timeout(300)]


def box_spec(netbox: NetBox, project: str) -> BoxSpec:
    """The namespaced box as ``gpurent-tui user@127.0.0.1 -p RELAY`` opens it."""
    server = netbox.server
    options = (("known_hosts", server.known_hosts), ("identity_files", (server.key_path,)),
               ("allow_agent", False), ("ssh_config", server.ssh_config))
    return BoxSpec("ssh", f"{server.user}@{server.host}", port=server.port, project=project,
                   price=1.25, ssh_options=options)


async def test_link_drop_dims_then_runs_badge_and_pull_recover(netbox: NetBox, tmp_path,
                                                               monkeypatch):
    monkeypatch.setenv("GPURENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    project = Path(netbox.server.home) / "runs"
    run_dir = project / "live"
    pid = start_sim(netbox, run_dir)
    app = GpurentApp([box_spec(netbox, str(project))])
    try:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            box = app.query_one(BoxView)
            await until(pilot, lambda: box.state.status is not None
                        and box.state.run_dir == str(run_dir)
                        and box.log_pane.log_view.lines, timeout=180)
            await until_shown(pilot, "⇄ connected", "● live", "live", timeout=60)
            badge = box.query_one(WeightsBadge)
            await until(pilot, lambda: badge.safe_now is not None, timeout=60)
            (run_dir / "weights").mkdir(exist_ok=True)
            (run_dir / "weights" / "best.pt").write_bytes(os.urandom(256 * 1024))

            netbox.link_down()
            text = await until_shown(pilot, "no link", "last data", timeout=60)
            assert box.has_class("-offline")
            assert "● live" not in text.splitlines()[0]  # the header no longer says live
            assert "⚠ last data" in text  # every pane says how old it is
            await pilot.press("w")
            # Refused, said in a notification (the status row keeps the link warning).
            await until(pilot, lambda: any("no link to the box (last data" in m
                                           and "r tries now" in m for m in messages(app)))
            # Meanwhile the box goes on: a run finishes there, another appears.
            write_run(project / "while-away", done=3, total=3, state="completed")

            netbox.link_up()
            await until(pilot, lambda: not box.has_class("-offline"), timeout=60)
            # Without r: the runs list is listed again on the new control connection,
            # the weights badge asked again, the header lives again.
            await until_shown(pilot, "while-away", "⇄ connected", timeout=60)
            await until(pilot, lambda: any(e.message == "control connection open again"
                                           for e in app.history))
            await until(pilot, lambda: "last data" not in screen_text(app).splitlines()[0])
            await pilot.press("w")
            await until(pilot, lambda: shown(app, PullDialog))
            await pilot.press("enter")
            await until(pilot, lambda: any(m.startswith("pulled best.pt")
                                           and "sha256 verified" in m for m in messages(app)),
                        timeout=90)
            await until(pilot, lambda: badge.safe_now is True, timeout=60)
            await until_shown(pilot, "⛨ weights safe", "(laptop)")

            # The launch form is open when the link drops: the dataset doctor's check
            # fails, and runs again on its own once the connection is back (the failure
            # it left in the form goes).
            data = write_dataset(Path(netbox.server.home) / "data", train=8, val=4,
                                 imgsz=32, seed=0)
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
            form = app.screen
            status = form.query_one("#form-status", Static)
            netbox.link_down()
            await until(pilot, lambda: box.has_class("-offline"), timeout=60)
            form.query_one("#f-data", Input).value = str(data)
            await until(pilot, lambda: status.has_class("-error"), timeout=120)
            assert "no link to the box" in str(status.render())
            netbox.link_up()
            await until(pilot, lambda: "dataset doctor found no errors" in
                        flat(screen_text(app)), timeout=120)
            assert not status.has_class("-error")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
