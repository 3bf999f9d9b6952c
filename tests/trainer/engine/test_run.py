"""The training engine end to end, for real on the CPU: the run directory contract, graceful
stop and resume, failure, fine-tuning and run-directory naming."""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.trainer_run_kit import load, trainer_env, wait_for
from trainer import procid
from trainer.health import judge_health
from trainer.runfiles import parse_metrics, read_status

LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (INFO|WARNING|ERROR) +\| ")
TINY = ["model=n", "imgsz=64", "workers=0", "seed=0"]


def start(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    """Start ``python -m trainer train ARGS`` in ``cwd``, in its own session and process
    group, as the launcher does (setsid)."""
    return subprocess.Popen([sys.executable, "-m", "trainer", "train", *args], cwd=cwd,
                            env=trainer_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def train(args: list[str]) -> int:
    """``python -m trainer train ARGS`` in this process (cheaper than a new interpreter);
    returns the exit code."""
    from trainer.engine.command import main

    return main(args)


def metrics_rows(run: Path) -> list[dict[str, Any]]:
    """Rows of ``metrics.jsonl``."""
    chunk = parse_metrics((run / "metrics.jsonl").read_bytes())
    assert chunk.skipped == 0
    return chunk.rows


def test_two_epochs_write_every_contract_file(shapes_data: Path, in_tmp: Path) -> None:
    code = train([*TINY, f"data={shapes_data}", "epochs=2", "batch=8", "save_period=1",
                  "project=runs", "name=two"])
    assert code == 0
    run = in_tmp / "runs" / "two"

    status = read_status(run)
    assert status.ok, status.reason
    s = status.fields
    assert s["state"] == "completed" and s["schema_version"] == 1
    assert s["completed_epochs"] == s["current_epoch"] == s["total_epochs"] == 2
    assert s["progress"] == 1.0 and s["start_epoch"] == 1 and s["pid"] == os.getpid()
    assert (s["model_family"], s["model_size"], s["task"]) == ("gpdet", "n", "detect")
    assert s["save_dir"] == str(run.resolve())
    assert s["batch"] == 8 and s["imgsz"] == 64 and s["world_size"] == 1
    assert s["host"]["hostname"] and s["host"]["gpus"] == [] and s["hub"] is None
    assert s["best_metric_name"] == "mAP50-95" and s["current_metric_name"] == "mAP50-95"
    assert set(s["metrics"]) == {"precision", "recall", "mAP50", "mAP50-95"}
    assert s["checkpoints"]["best"] == str((run / "weights/best.pt").resolve())
    assert s["checkpoints"]["last"] == str((run / "weights/last.pt").resolve())
    for key in ("started_at", "updated_at", "elapsed_seconds", "epoch_seconds",
                "mean_epoch_seconds", "eta_seconds", "train_loss", "total_seconds"):
        assert s[key] is not None, key
    assert judge_health(status, now=time.time()).verdict == "completed"

    rows = metrics_rows(run)
    assert [r["epoch"] for r in rows] == [1, 2]
    for row in rows:
        for key in ("time", "train/loss", "train/box_loss", "train/cls_loss",
                    "metrics/precision", "metrics/recall", "metrics/mAP50",
                    "metrics/mAP50-95", "lr/pg0", "lr/pg1", "lr/pg2"):
            assert isinstance(row[key], float), key
        assert row["validated"] is True and row["best_metric_name"] == "mAP50-95"
        assert row["train/loss"] == pytest.approx(row["train/box_loss"] + row["train/cls_loss"])
    best = max(rows, key=lambda r: (r["metrics/mAP50-95"], -r["epoch"]))
    assert rows[-1]["best_epoch"] == s["best_epoch"] == best["epoch"]
    assert rows[-1]["best_metric"] == pytest.approx(s["best_metric"])
    assert rows[0]["is_best"] is True
    assert s["metrics"]["mAP50-95"] == pytest.approx(rows[-1]["metrics/mAP50-95"])

    with open(run / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [int(r["epoch"]) for r in table] == [1, 2]
    assert float(table[1]["train/loss"]) == pytest.approx(rows[1]["train/loss"], rel=1e-5)
    assert list(table[0]) == list(rows[0])

    summary = json.loads((run / "summary.json").read_text())
    assert summary["state"] == "completed" and summary["completed_epochs"] == 2
    assert summary["best_epoch"] == s["best_epoch"] and summary["args"]["epochs"] == 2

    log_lines = (run / "train.log").read_text().splitlines()
    assert log_lines and all(LOG_LINE.match(line) for line in log_lines)
    assert any("epoch 2/2" in line for line in log_lines)

    last, best_ckpt = load(run / "weights/last.pt"), load(run / "weights/best.pt")
    assert last["epoch"] == 2 and "train_state" in last and "train_state" not in best_ckpt
    assert best_ckpt["epoch"] == s["best_epoch"]
    assert best_ckpt["model_meta"] == {"family": "gpdet", "size": "n", "nc": 4,
                                       "names": ["circle", "square", "triangle", "cross"],
                                       "imgsz": 64}
    assert load(run / "weights/epoch_1.pt")["epoch"] == 1
    assert load(run / "weights/epoch_2.pt")["epoch"] == 2
    assert not list((run / "weights").glob("*.tmp"))

    # best.pt rebuilds its model, which reproduces the validated mAP.
    from trainer.datasets.loader import YoloDataset, load_data_config, make_loader
    from trainer.engine.checkpoint import model_from_checkpoint
    from trainer.engine.device import choose_precision, probe
    from trainer.engine.loop import validate

    model = model_from_checkpoint(best_ckpt)
    data = load_data_config(shapes_data)
    loader, _ = make_loader(YoloDataset(data.val, 4, 64, augment=False), batch=16, workers=0,
                            shuffle=False, pin_memory=False)
    caps = probe("cpu")
    import torch

    metrics = validate(model, loader, caps, choose_precision(caps), torch.contiguous_format,
                       64, 4)
    assert metrics["mAP50-95"] == pytest.approx(s["best_metric"], abs=1e-6)

    # Resuming from epoch 1's snapshot with more epochs: epoch 2 is trained again and
    # its old row replaced, so the history keeps one row per epoch.
    assert train([f"resume={run / 'weights/epoch_1.pt'}", "epochs=3", "val_period=3"]) == 0
    rows = metrics_rows(run)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    assert rows[1]["validated"] is False and rows[1]["metrics/mAP50"] is None
    assert rows[2]["validated"] is True and isinstance(rows[2]["metrics/mAP50"], float)
    with open(run / "results.csv", newline="") as fh:
        assert [int(r["epoch"]) for r in csv.DictReader(fh)] == [1, 2, 3]
    assert "dropped 1 metrics rows" in (run / "train.log").read_text()
    status = read_status(run)
    assert (status.get("total_epochs"), status.get("start_epoch")) == (3, 2)

    # model=best.pt fine-tunes; exist_ok reuses the directory with a fresh history.
    assert train([*TINY[1:], f"data={shapes_data}", "epochs=1", "batch=8", "project=runs",
                  "name=two", "exist_ok=True", f"model={run / 'weights/best.pt'}"]) == 0
    assert [r["epoch"] for r in metrics_rows(run)] == [1]
    assert "fine-tuning from" in (run / "train.log").read_text()
    assert read_status(run).get("total_epochs") == 1
    assert not (in_tmp / "runs/two2").exists()


def test_sigterm_stops_gracefully_and_resume_finishes(shapes_data: Path, in_tmp: Path) -> None:
    run = in_tmp / "runs" / "stop"
    # A loader worker too: the stop signals the whole process group, as remote.runs.stop
    # does, and the worker must not take the run down with it.
    args = ["model=n", "imgsz=64", "workers=1", "seed=0", f"data={shapes_data}", "epochs=3",
            "batch=2", "project=runs", "name=stop"]
    proc = start(args, in_tmp)
    try:
        # Epoch 1 has ended when its status is written; epoch 2's 8 steps are under way.
        wait_for(lambda: read_status(run).get("completed_epochs") == 1, 90,
                 "the end of epoch 1", proc)
        # What `gpurent stop` checks before it signals: the pid's start time and boot.
        assert {k: read_status(run).get(k) for k in ("pid", "pid_start", "boot_id")} == \
            {"pid": proc.pid, **procid.identity(proc.pid)}
        os.killpg(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    status = read_status(run)
    assert status.get("state") == "stopped" and status.get("completed_epochs") == 1
    assert judge_health(status, now=time.time()).verdict == "stopped"
    assert "SIGTERM received" in out
    last = load(run / "weights/last.pt")
    assert last["epoch"] == 1
    # Nearly always the signal lands among epoch 2's steps; on a loaded machine it can
    # land in the moments between epoch 1's status and its end-of-epoch stop check.
    if "stopped in epoch 2" in out:
        assert last["train_state"]["partial_step"] > 0
    else:
        assert "stopped after epoch 1" in out and not last["train_state"].get("partial_step")
    assert [r["epoch"] for r in metrics_rows(run)] == [1]

    assert train(["resume=True", "project=runs", "name=stop", "workers=0"]) == 0
    status = read_status(run)
    assert status.get("state") == "completed" and status.get("start_epoch") == 2
    assert status.get("completed_epochs") == 3
    rows = metrics_rows(run)
    assert [r["epoch"] for r in rows] == [1, 2, 3]
    with open(run / "results.csv", newline="") as fh:
        assert [int(r["epoch"]) for r in csv.DictReader(fh)] == [1, 2, 3]
    assert not (in_tmp / "runs/stop2").exists()


def test_a_corrupt_image_mid_run_fails_the_run(shapes_data: Path, in_tmp: Path) -> None:
    data_dir = in_tmp / "data"
    shutil.copytree(shapes_data.parent, data_dir)
    run = in_tmp / "runs" / "bad"
    stop = threading.Event()

    def corrupt_after_epoch_1() -> None:
        # The fault arrives while training runs: every training image becomes garbage.
        while not stop.is_set():
            if read_status(run).get("completed_epochs") == 1:
                for image in (data_dir / "images/train").glob("*.png"):
                    image.write_bytes(b"this is not a PNG any more")
                return
            time.sleep(0.01)

    saboteur = threading.Thread(target=corrupt_after_epoch_1)
    saboteur.start()
    try:
        code = train(["model=n", "imgsz=64", "workers=1", f"data={data_dir / 'data.yaml'}",
                      "epochs=4", "batch=8", "project=runs", "name=bad"])
    finally:
        stop.set()
        saboteur.join()
    assert code == 1
    assert multiprocessing.active_children() == []  # the loader worker was shut down
    status = read_status(run)
    assert status.get("state") == "failed"
    error = status.get("error")
    assert error["type"] == "DataError" and "cannot read image" in error["message"]
    assert "\n" not in error["message"]
    assert judge_health(status, now=time.time()).verdict == "failed"
    log = (run / "train.log").read_text()
    assert "Traceback (most recent call last)" in log and "training failed: DataError" in log
    assert load(run / "weights/last.pt")["epoch"] >= 1
    assert json.loads((run / "summary.json").read_text())["state"] == "failed"


def test_a_second_stop_soon_after_the_first_still_saves(shapes_data: Path,
                                                        tmp_path: Path) -> None:
    """A second signal within REPEAT_SECONDS of the first (a double press, `gpurent stop`
    twice) is the same stop: the run still saves last.pt and ends stopped (it used to
    exit at once without saving). Forcing the exit later is in test_trainer_units."""
    run = tmp_path / "runs" / "twice"
    proc = start([*TINY, f"data={shapes_data}", "epochs=3", "batch=2", "project=runs",
                  "name=twice"], tmp_path)
    try:
        wait_for(lambda: read_status(run).get("state") == "running"
                 and "device cpu" in _text(run / "train.log"), 90, "training", proc)
        proc.send_signal(signal.SIGINT)
        wait_for(lambda: "SIGINT received" in _text(run / "train.log"), 30,
                 "the first signal to be handled", proc)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, out
    assert "SIGTERM again" in out and "already stopping" in out
    status = read_status(run)
    assert status.get("state") == "stopped"
    assert (run / "weights" / "last.pt").exists()


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
