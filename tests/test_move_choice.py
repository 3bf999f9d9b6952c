"""Issue 38, item 1, the parts without a TUI: ``gpurent resume PROVIDER:ID --on B`` on an
instance this laptop launched several Hub runs on lists them to choose from and moves
none (one such run is taken as named); ``gpurent resume TARGET`` without a run names the
runs launched there; ``trainer restore --revision COMMIT`` restores the run's
``last.pt`` as of the commit the laptop verified as the run's, though another run
pushed over the repository since (the Hub stand-in, the real ``trainer restore`` in a
child process)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from remote.billing import RunIntent, want_running
from remote.billing.move import parse_run
from remote.cli import main as gpurent
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


def test_restore_takes_the_runs_own_commit_after_another_run_pushed_over_it(
        hub_standin: HubStandin, tmp_path: Path) -> None:
    def push(name: str, epoch: int, weights: bytes) -> str:
        status = {"schema_version": 1, "state": "running", "save_dir": f"/root/runs/{name}",
                  "completed_epochs": epoch, "total_epochs": 30}
        return hub_standin.add_files("org/shared", {"last.pt": weights,
                                                    "status.json": json.dumps(status).encode()})

    ours = push("exp1", 20, b"exp1 at epoch 20")
    push("exp2", 110, b"exp2 at epoch 110")

    def restore(run_dir: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "trainer", "restore", "org/shared",
                               "--run-dir", str(run_dir), *extra, "--token-stdin", "--json"],
                              input=VALID_TOKEN, capture_output=True, text=True, timeout=60,
                              env=hub_env(hub_standin, tmp_path / "hf"))

    refused = restore(tmp_path / "head" / "exp1")  # the head's last.pt is exp2's
    assert refused.returncode == 1 and "not run exp1's" in refused.stdout
    done = restore(tmp_path / "box" / "exp1", "--revision", ours)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["commit"], report["epoch"]) == (ours, 20)
    assert (tmp_path / "box" / "exp1" / "weights" / "last.pt").read_bytes() == \
        b"exp1 at epoch 20"
