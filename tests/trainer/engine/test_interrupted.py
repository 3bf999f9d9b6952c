"""Checkpoints that can resume elsewhere: a periodic milestone sends ``last.pt`` (with its
training state) and the run's history to the Hub, and a SIGTERM mid-epoch saves and ends
the run within the 5 s some providers grant before they kill."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env
from tests.fixtures.paths import ROOT
from tests.fixtures.trainer_run_kit import load, wait_for
from trainer.engine.plan import TrainArgs, milestone_period
from trainer.runfiles import read_status

RESUMABLE = {"best.pt", "last.pt", "results.csv", "status.json", "metrics.jsonl"}


def hub_files(standin: HubStandin, repo: str) -> dict:
    """The files of ``repo`` on the stand-in (none before it exists)."""
    try:
        return standin.repo(repo).files
    except KeyError:
        return {}


@pytest.mark.parametrize(("epochs", "given", "period"), [
    (3, 0, 1), (10, 0, 1), (40, 0, 4), (100, 0, 10), (300, 0, 10), (300, 7, 7)])
def test_the_default_milestone_loses_at_most_a_tenth_and_ten_epochs(
        epochs: int, given: int, period: int) -> None:
    assert milestone_period(TrainArgs(epochs=epochs, hub_period=given)) == period


@pytest.mark.alone
def test_sigterm_mid_epoch_saves_and_exits_within_five_seconds(
        shapes_data: Path, hub_standin: HubStandin, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "cut"
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "train", f"data={shapes_data}", "epochs=20",
         "batch=2", "imgsz=64", "workers=0", "device=cpu", "model=n", "seed=0",
         f"project={tmp_path / 'runs'}", "name=cut", "hub=org/cut", "hub_period=1"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        start_new_session=True)
    try:
        wait_for(lambda: "metrics.jsonl" in hub_files(hub_standin, "org/cut"), 120,
                 "the first milestone on the Hub", proc)
        pushed = hub_standin.repo("org/cut").files
        assert set(pushed) >= RESUMABLE
        # The Hub's last.pt can resume: it holds the optimizer and scheduler state.
        (tmp_path / "hub-last.pt").write_bytes(hub_standin.read("org/cut", "last.pt"))
        state = load(tmp_path / "hub-last.pt")["train_state"]
        assert {"optimizer", "scheduler", "ema_updates", "rng"} <= set(state)
        mark = (run / "train.log").stat().st_size
        # The milestone is pushed after its epoch: the next epoch is under way.
        signalled = time.monotonic()
        os.killpg(proc.pid, signal.SIGTERM)
        wait_for(lambda: read_status(run).get("state") == "stopped", 5,
                 "the stopped status within 5 s")
        saved = time.monotonic() - signalled
        proc.communicate(timeout=5)
        exited = time.monotonic() - signalled
    finally:
        proc.kill()
    print(f"SIGTERM -> last.pt saved and status stopped {saved:.2f}s, exit {exited:.2f}s")
    assert proc.returncode == 0 and saved < 5 and exited < 5
    log = (run / "train.log").read_text()[mark:]
    assert "saved last.pt" in log or "stopped after epoch" in log
    completed = read_status(run).get("completed_epochs")
    assert load(run / "weights/last.pt")["epoch"] == completed
    # The final push after the stop sends the stopped run's history too.
    status = json.loads(hub_standin.read("org/cut", "status.json"))
    assert status["state"] == "stopped" and status["completed_epochs"] == completed
