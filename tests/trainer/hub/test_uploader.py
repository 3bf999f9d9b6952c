"""The milestone uploader inside the trainer: latest wins, never blocks, never raises,
and what reaches the Hub is exactly the epoch's bytes."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.hub_standin import (
    VALID_TOKEN,
    HubStandin,
    hub_env,
    write_checkpoint,
    write_run,
)
from tests.fixtures.paths import ROOT
from trainer.hub.ledger import read_ledger
from trainer.hub.uploader import MilestoneUploader


@pytest.fixture(autouse=True)
def _no_xet(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process huggingface_hub may already be imported: turn Xet off directly
    (the client would otherwise choose it, and no stand-in can serve it)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


def wait_for(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


def uploader(run: Path, standin: HubStandin, period: int = 0) -> MilestoneUploader:
    return MilestoneUploader(run, "org/m", period, logging.getLogger("test.hub"),
                             token=VALID_TOKEN, endpoint=standin.url)


def test_latest_milestone_wins_and_pushes_the_epochs_own_bytes(hub_standin: HubStandin,
                                                               tmp_path: Path) -> None:
    run = tmp_path / "run1"
    write_run(run)
    best = run / "weights" / "best.pt"
    up = uploader(run, hub_standin)
    hub_standin.hold("preupload")  # the first push stalls before any byte is uploaded
    shas = {1: write_checkpoint(best, 300_000)}
    up.on_epoch_end(1, True, "mAP50-95", 0.1)
    wait_for(lambda: len(hub_standin.routes("preupload")) == 1)
    started = time.monotonic()
    for epoch in (2, 3):  # new bests replace best.pt while epoch 1 is being pushed
        shas[epoch] = write_checkpoint(best, 300_000)
        up.on_epoch_end(epoch, True, "mAP50-95", epoch / 10)
    up.on_epoch_end(4, False, "mAP50-95", 0.2)  # neither a best nor a period milestone
    assert time.monotonic() - started < 5  # on_epoch_end did not wait for the Hub
    assert up.state() is None
    hub_standin.release("preupload")
    # Epoch 1 finishes, then the newest pending milestone (3) goes; 2 never does.
    wait_for(lambda: (up.state() or {}).get("epoch") == 3)
    (run / "summary.json").write_text('{"epochs": 4}')  # the end of training writes it
    state = up.finish(timeout=60)
    repo = hub_standin.repo("org/m")
    assert [c.files["best.pt"].oid for c in repo.commits] == [shas[1], shas[3], shas[3]]
    assert ["epoch 1," in repo.commits[0].message, "epoch 3," in repo.commits[1].message,
            "epoch 4," in repo.commits[2].message] == [True, True, True]
    assert not (hub_standin.lfs_dir / shas[2]).exists()  # epoch 2 was superseded
    best_entries = [e for e in read_ledger(run) if e["file"] == "best.pt"]
    assert [(e["epoch"], e["sha256"]) for e in best_entries] == [
        (1, shas[1]), (3, shas[3]), (3, shas[3])]
    assert state is not None and state["epoch"] == 4 and state["commit"] == repo.head
    assert state["repo"] == "org/m" and "error" not in state
    assert not list(run.glob(".hub-push-*"))


def test_period_milestones_push_last_pt_too(hub_standin: HubStandin, tmp_path: Path) -> None:
    run = tmp_path / "run1"
    write_run(run)
    write_checkpoint(run / "weights" / "last.pt", 1000)
    up = uploader(run, hub_standin, period=2)
    up.on_epoch_end(1, False, None, None)  # not a milestone
    up.on_epoch_end(2, False, None, None)  # period
    wait_for(lambda: up.state() is not None)
    assert sorted(hub_standin.repo("org/m").files) == ["best.pt", "last.pt", "results.csv",
                                                        "status.json"]
    up.finish(timeout=60)


def test_a_failing_push_is_reported_not_raised(hub_standin: HubStandin, tmp_path: Path,
                                               caplog: pytest.LogCaptureFixture) -> None:
    run = tmp_path / "run1"
    write_run(run)
    hub_standin.fail("commit")
    up = uploader(run, hub_standin)
    with caplog.at_level(logging.WARNING, logger="test.hub"):
        up.on_epoch_end(1, True, "mAP50-95", 0.3)
        wait_for(lambda: up.state() is not None)
        first = up.state()
        assert first is not None and first["epoch"] == 1 and "500" in first["error"]
        hub_standin.clear_failures()
        state = up.finish(timeout=60)  # the final push retries and succeeds
    assert state is not None and "error" not in state and state["epoch"] == 1
    assert any("push of epoch 1 failed" in r.getMessage() for r in caplog.records)
    # Only the successful final push (what exists of the run's files) is in the ledger.
    assert [e["file"] for e in read_ledger(run)] == ["best.pt", "results.csv",
                                                     "status.json"]


@pytest.mark.slow
def test_training_run_completes_when_the_hub_fails(hub_standin: HubStandin,
                                                   tmp_path: Path) -> None:
    data = tmp_path / "shapes"
    subprocess.run([sys.executable, "-m", "trainer", "shapes", str(data), "--train", "8",
                    "--val", "4", "--imgsz", "32"], cwd=ROOT, check=True,
                   capture_output=True, timeout=120)
    hub_standin.fail("commit")
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN, OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "train", f"data={data / 'data.yaml'}", "epochs=3",
         "batch=8", "imgsz=32", "workers=0", "device=cpu", f"project={tmp_path / 'runs'}",
         "name=hubfail", "hub=org/m", "hub_period=1"],
        env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    run = tmp_path / "runs" / "hubfail"
    status = json.loads((run / "status.json").read_text())
    assert status["state"] == "completed" and status["completed_epochs"] == 3
    assert "500" in status["hub"]["error"] and status["hub"]["epoch"] == 3
    assert "push of epoch" in (run / "train.log").read_text()
    assert not (run / "hub.json").exists()
    assert len(hub_standin.routes("commit")) >= 2  # milestones were attempted
