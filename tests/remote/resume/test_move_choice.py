"""Issue 38, item 1, the parts without a TUI: ``gpurent resume PROVIDER:ID --on B`` on an
instance this laptop launched several Hub runs on lists them to choose from and moves
none (one such run is taken as named); ``gpurent resume TARGET`` without a run names the
runs launched there. A run stopped at epoch 20 whose repository another run pushed
over since (epoch 110) is restored from its own epoch-20 ``last.pt``, found among the
earlier versions (or at ``--revision``, the commit the laptop verified as the run's), and
the laptop's last safe checkpoint of it says the same; a run that never pushed there is
refused (the Hub stand-in, the real ``trainer restore`` in a child process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from remote.billing import RunIntent, want_running
from remote.cli import main as gpurent
from remote.config import remember_hub_repo
from remote.resume.move import parse_run
from remote.weights.lastsafe import hub_copy
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env


@pytest.fixture(autouse=True)
def laptop_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPURENT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_a_resume_without_a_run_named_offers_the_runs_and_moves_none(capsys) -> None:
    want_running("runpod:podA", RunIntent("exp1", "runs/train", "org/shared"))
    want_running("runpod:podA", RunIntent("exp2", "runs/train", "org/shared"))
    want_running("runpod:podA", RunIntent("nohub", "runs/train", ""))
    assert gpurent(["resume", "runpod:podA", "--on", "runpod:podB"]) == 2
    said = capsys.readouterr().err
    assert "2 runs were launched on runpod:podA: name the one to resume" in said
    assert "runpod:podA:runs/train/exp1 (org/shared:exp1)" in said
    assert "runpod:podA:runs/train/exp2 (org/shared:exp2)" in said
    assert gpurent(["resume", "runpod:podA"]) == 2
    said = capsys.readouterr().err
    assert "runs/train/exp1, runs/train/exp2, runs/train/nohub" in said

    want_running("runpod:podC", RunIntent("only", "runs/train", "org/solo"))
    assert parse_run("runpod:podC") == ("org/solo", "only")


def test_a_run_is_restored_from_its_own_last_pt_after_another_run_pushed_over_it(
        hub_standin: HubStandin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def push(name: str, epoch: int) -> str:
        status = {"schema_version": 1, "state": "running", "save_dir": f"/root/runs/{name}",
                  "completed_epochs": epoch, "total_epochs": 200}
        return hub_standin.add_files("org/shared", {
            "last.pt": f"{name} at epoch {epoch}".encode(),
            "status.json": json.dumps(status).encode()})

    push("exp1", 10)
    ours = push("exp1", 20)  # exp1 stopped at epoch 20 ...
    for epoch in (100, 110):  # ... and exp2 pushed over the repository since
        push("exp2", epoch)

    def restore(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trainer", "restore", "org/shared",
                               "--run-dir", str(run_dir), *extra, "--token-stdin", "--json"],
                              input=VALID_TOKEN, capture_output=True, text=True, timeout=60,
                              env=hub_env(hub_standin, tmp_path / "hf"))

    for where, extra in (("head", ()), ("pinned", ("--revision", ours))):
        done = restore(tmp_path / where / "exp1", *extra)
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert (report["commit"], report["epoch"]) == (ours, 20)
        assert (tmp_path / where / "exp1" / "weights" / "last.pt").read_bytes() == \
            b"exp1 at epoch 20"
    refused = restore(tmp_path / "box" / "exp3")  # a run that never pushed there
    assert refused.returncode == 1 and "not run exp3's" in refused.stdout

    # The laptop tells the same: exp1's last safe checkpoint is its own epoch 20.
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    remember_hub_repo("org/shared")
    copy = hub_copy("org/shared", "exp1", VALID_TOKEN)
    assert (copy.error, copy.commit, copy.epoch) == ("", ours, 20)
    assert hub_copy("org/shared", "exp2", VALID_TOKEN).epoch == 110


@pytest.mark.anyio
async def test_the_move_dialog_with_its_run_choice_fits_80x24() -> None:
    from textual.app import App
    from textual.widgets import Button

    from tui.dialogs.move import MoveChoice, MoveDialog

    class Host(App[None]):
        def on_mount(self) -> None:
            self.push_screen(MoveDialog("runpod:podA", [
                MoveChoice("org/shared", "exp1", "runs/train", "epoch 20 on the Hub "
                           "org/shared@abcdef1"),
                MoveChoice("org/shared", "exp2", "runs/train", "epoch 110 on the Hub "
                           "org/shared@1234567")]))

    app = Host()
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        for button in app.screen.query(Button):  # Cancel and Resume there, whole
            assert button.region.bottom <= 24 and button.region.height == 3, button
        assert app.focused is not None and app.focused.id == "run"  # the choice first
