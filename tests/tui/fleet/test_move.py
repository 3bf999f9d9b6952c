"""Resume elsewhere from the TUI: on the fleet screen, ``m`` on a row taken away by its
provider asks which of its runs and the new box, and resumes that run there
(``remote.billing.move_run``, as ``gpurent resume ORG/REPO:NAME --on TARGET``), each step
said as it happens, into the project a box tab shows (``runs/train``), then opens the new
box's tab on the run. A LibreYOLO run (the stand-in engine) whose milestone is on the Hub
(stand-in), beside another run of the same repository; the new box is a real sshd
reached through the provider stand-in's address. The Hub's final status counts the
run's epochs, both invocations'."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Select

from remote.billing import Account, RunIntent, want_running
from remote.config import remember_hub_repo
from remote.fleet import FleetOptions, list_fleet
from tests.fixtures.fake_libreyolo import libreyolo_shim
from tests.fixtures.guard_pilot import press, ready
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.instance_targets_kit import instance_on
from tests.fixtures.libreyolo_kit import data_yaml, kill
from tests.fixtures.pilot import messages, quiet_env, until  # noqa: F401 (autouse fixture)
from tests.fixtures.resume_kit import rows
from tests.fixtures.screen import until_shown
from tests.fixtures.sshd import make_server
from tests.fixtures.tui_move_kit import milestone_on_the_hub
from tests.fixtures.watch_log import wait_until
from trainer import engines, runfiles
from trainer.hub.autopush import live_watchers
from tui.app import GpurentApp
from tui.dialogs.move import MoveDialog
from tui.screens.fleet import FleetScreen
from tui.spec import BoxSpec

pytestmark = pytest.mark.anyio
SIZE = (170, 40)


async def test_m_on_a_taken_away_row_resumes_its_run_on_another_box(
        provider_standin, hub_standin: HubStandin, tmp_path: Path, monkeypatch) -> None:
    for key, value in {"HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
                       "HF_TOKEN": VALID_TOKEN,
                       "GPURENT_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(key, value)
    data = data_yaml(tmp_path)
    safe = milestone_on_the_hub(tmp_path, data, hub_standin)
    bin_dir = tmp_path / "bin"
    libreyolo_shim(bin_dir, {"FAKE_LIBREYOLO_EPOCH_SECONDS": "0.2",
                             "FAKE_LIBREYOLO_SAVE_SECONDS": "0.01"})
    b = make_server(tmp_path / "b", box_path=[
        str(bin_dir), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"],
        env={"HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
             "HF_HOME": str(tmp_path / "b" / "hf")})
    run_b = Path(b.home) / "runs" / "train" / "ly"
    try:
        runpod = provider_standin("runpod")
        ia = runpod.add_instance()
        ib = instance_on(runpod, b)
        # What `gpurent launch ... hub=org/ly` on runpod:A from this laptop recorded:
        # two runs pushing to the one repository, the other listed first.
        remember_hub_repo("org/ly")
        want_running(f"runpod:{ia}", RunIntent("other", "runs", "org/ly"))
        want_running(f"runpod:{ia}", RunIntent("ly", "runs", "org/ly"))
        runpod.take_away(ia)
        known = tmp_path / "known_hosts"
        known.write_text(f"runpod:{ib} {b.host_key_line}\n")
        options = FleetOptions(timeout=10, weights=False, ssh_options={
            "known_hosts": str(known), "identity_files": (b.key_path,),
            "allow_agent": False, "ssh_config": b.ssh_config})
        account = Account("runpod", "work", runpod.key, runpod.base_url)
        app = GpurentApp([], autoconnect=False)
        app.fleet_lister = lambda: list_fleet([account], options)
        async with app.run_test(size=SIZE, notifications=True) as pilot:
            await until_shown(pilot, f"runpod:{ia}", "taken away")
            screen = app.screen
            assert isinstance(screen, FleetScreen)
            index = next(n for n, r in enumerate(screen.fleet.rows)
                         if r.target == f"runpod:{ia}")
            screen.query_one(DataTable).move_cursor(row=index)
            await pilot.press("m")
            await until(pilot, lambda: ready(app, MoveDialog))
            dialog = app.screen
            choices = {str(label): value for label, value in dialog.query_one(
                "#run", Select)._options}
            ours = next(v for k, v in choices.items() if k.startswith("org/ly:ly "))
            assert f"epoch {safe} on the Hub org/ly@" in \
                next(k for k in choices if k.startswith("org/ly:ly "))
            assert "run ly's, not this run's" in \
                next(k for k in choices if k.startswith("org/ly:other "))
            # The project a box tab opens by default, so the tab shows the run; here
            # the same place under the box's throwaway home (the login directory is
            # the real one).
            assert dialog.query_one("#project", Input).value == BoxSpec("ssh", "x").project
            for key, value in {"target": f"runpod:{ib}", "project": str(run_b.parent),
                               "data": data}.items():
                dialog.query_one(f"#{key}", Input).value = value
            await press(pilot, "#move")  # no run chosen yet: nothing moves
            assert app.screen is dialog
            dialog.query_one("#run", Select).value = ours
            dialog.query_one("#data", Input).focus()
            await pilot.pause()
            await pilot.press("enter")
            await until_shown(pilot, f"ly resumed on runpod:{ib}", timeout=120)
            said = " ".join(messages(app))
            assert "preflight passed" in said and f"last.pt of epoch {safe}" in said
            assert f"training again from epoch {safe + 1} of 6" in said
            await until(pilot, lambda: not isinstance(app.screen, FleetScreen))
            spec = app.specs[-1]
            assert (spec.target, spec.project, spec.run) == (f"runpod:{ib}",
                                                              str(run_b.parent), "ly")
        monkeypatch.setenv(engines.CACHE_ENV, f"{b.home}/.cache/gpurent")  # B's
        assert wait_until(lambda: runfiles.read_status(run_b).get("state") == "completed"
                          and not live_watchers(run_b), 60)
        assert [r["epoch"] for r in rows(run_b)] == list(range(1, 7))
        hub_status = json.loads(hub_standin.read("org/ly", "status.json"))
        assert hub_status["state"] == "completed"
        assert hub_status["completed_epochs"] == 6  # both invocations', not the last's
        assert hub_status["pid"] == runfiles.read_status(run_b).get("pid")
    finally:
        b.sshd.stop()
        monkeypatch.setenv(engines.CACHE_ENV, f"{b.home}/.cache/gpurent")
        for watcher in live_watchers(run_b):
            kill(watcher)
