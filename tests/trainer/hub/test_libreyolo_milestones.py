"""The push watcher's milestones for a LibreYOLO run (``trainer.hub.autopush``) and
``trainer restore`` of such a run (``trainer.hub.restore``): ``last.pt`` goes with the
history only when it is the status's epoch's, and a restored history ends at the
milestone's epoch (LibreYOLO appends to what it finds). Hub stand-in (talked to from
child processes, as the box does: huggingface_hub reads its endpoint once); files as the
stand-in engine writes them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fake_libreyolo import torch_save
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env
from tests.fixtures.libreyolo_milestones_kit import milestone
from trainer import runfiles
from trainer.hub.autopush import RunWatch


def write_epoch(run: Path, epoch: int, total: int = 10, pid: int | None = None) -> None:
    """What the engine writes at an epoch's end: last.pt, then the row, then the status."""
    (run / "weights").mkdir(parents=True, exist_ok=True)
    torch_save({"epoch": epoch - 1}, run / "weights" / "last.pt", 0)
    with open(run / runfiles.METRICS_FILE, "a") as fh:
        fh.write(json.dumps({"epoch": epoch, "train/loss": 1.0 / epoch}) + "\n")
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, {
        "schema_version": 1, "state": "running", "pid": pid or os.getpid(),
        "save_dir": str(run), "total_epochs": total, "start_epoch": 1,
        "completed_epochs": epoch})


@pytest.fixture(autouse=True)
def box_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPURENT_CACHE_DIR", str(tmp_path / "cache"))


def test_milestones_fall_due_every_period_from_where_the_run_started(tmp_path: Path) -> None:
    run = tmp_path / "ly"
    run.mkdir()
    watch = RunWatch(run, None, period=3)
    for epoch, due in ((1, None), (2, None), (3, 3), (4, 4)):
        write_epoch(run, epoch)
        assert watch.milestone_due() == due, epoch
    watch.milestone_pushed = 4
    write_epoch(run, 5)
    assert watch.milestone_due() is None
    write_epoch(run, 6)
    assert watch.milestone_due() == 6
    # Auto (period 0): a tenth of the run; a resumed run counts from its start epoch.
    status = json.loads((run / runfiles.STATUS_FILE).read_text())
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE,
                               {**status, "total_epochs": 40, "start_epoch": 5})
    assert RunWatch(run, None).milestone_due() is None  # 4 -> 6 passes no multiple of 4
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE,
                               {**status, "total_epochs": 40, "completed_epochs": 8,
                                "start_epoch": 5})
    assert RunWatch(run, None).milestone_due() == 8


def test_a_last_pt_newer_than_the_status_is_not_pushed(tmp_path: Path,
                                                       hub_standin: HubStandin) -> None:
    run = tmp_path / "ly"
    run.mkdir()
    (run / "train_config.yaml").write_text("epochs: 10\n")
    write_epoch(run, 1)
    write_epoch(run, 2)
    # The next epoch's last.pt is being saved: not the status's epoch, not pushed.
    status = (run / runfiles.STATUS_FILE).stat()
    torch_save({"epoch": 2}, run / "weights" / "last.pt", 0)
    os.utime(run / "weights" / "last.pt", ns=(status.st_atime_ns, status.st_mtime_ns + 10**6))
    assert milestone(run, hub_standin) is None
    assert not hub_standin.routes("commit")
    write_epoch(run, 3)
    result = milestone(run, hub_standin)
    assert result is not None
    assert {e["file"] for e in result["files"]} == {"last.pt", "status.json", "metrics.jsonl",
                                                    "train_config.yaml"}
    assert json.loads(hub_standin.read("org/ly", "status.json"))["completed_epochs"] == 3


def test_restore_ends_a_libreyolo_history_at_the_milestone(tmp_path: Path,
                                                            hub_standin: HubStandin) -> None:
    old = tmp_path / "old" / "ly"
    old.mkdir(parents=True)
    (old / "train_config.yaml").write_text("epochs: 10\n")
    for epoch in (1, 2, 3):
        write_epoch(old, epoch)
    # A history a row longer than the milestone (its next row appended while the
    # milestone was copied), pushed with it.
    rows = (old / runfiles.METRICS_FILE).read_bytes() + b'{"epoch": 4}\n'
    hub_standin.add_files("org/ly", {
        "last.pt": (old / "weights" / "last.pt").read_bytes(),
        "status.json": (old / runfiles.STATUS_FILE).read_bytes(),
        "train_config.yaml": (old / "train_config.yaml").read_bytes(),
        "metrics.jsonl": rows})
    new = tmp_path / "new" / "ly"
    done = subprocess.run([sys.executable, "-m", "trainer", "restore", "org/ly", "--run-dir",
                           str(new), "--token-stdin", "--json"], input=VALID_TOKEN,
                          capture_output=True, text=True, timeout=60,
                          env=hub_env(hub_standin, tmp_path / "hf"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["engine"] == "libreyolo" and report["epoch"] == 3
    assert [json.loads(line)["epoch"] for line in
            (new / runfiles.METRICS_FILE).read_text().splitlines()] == [1, 2, 3]
    assert (new / "train_config.yaml").is_file() and not (new / "status.json").exists()
