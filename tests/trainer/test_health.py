"""Run health: liveness is derived from state, time, pid and log growth, never trusted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.fixtures.paths import ROOT
from trainer.health import judge_health, local_pid_alive, parse_df
from trainer.runfiles import StatusRead, parse_status, read_status, utc_now_iso

NOW = 1_800_000_000.0


def libreyolo_status(state: str, *, age: float = 0.0, **extra: object) -> StatusRead:
    """A status.json shaped exactly as LibreYOLO 1.6's TrainingStatusCallback writes it
    (sorted keys, ``isoformat(timespec="seconds")`` timestamps with ``+00:00``)."""
    updated = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(NOW - age))
    body: dict[str, object] = {
        "schema_version": 1, "pid": 4242, "model_family": "yolox", "model_size": "s",
        "task": "detect", "save_dir": "runs/detect/train", "total_epochs": 100,
        "start_epoch": 1, "started_at": "2026-07-31T10:00:00+00:00", "state": state,
        "completed_epochs": 7, "current_epoch": 7, "progress": 0.07,
        "elapsed_seconds": 280.5, "epoch_seconds": 40.1, "mean_epoch_seconds": 40.0,
        "eta_seconds": 3720.0, "train_loss": 3.21,
        "metrics": {"mAP50": 0.41, "mAP50-95": 0.22}, "validated": True,
        "current_metric": 0.22, "current_metric_name": "mAP50-95", "best_metric": 0.22,
        "best_metric_name": "mAP50-95", "best_epoch": 7, "updated_at": updated,
    }
    body.update(extra)
    return parse_status(json.dumps(body, sort_keys=True, indent=2).encode())


def alive(_pid: int) -> bool:
    return True


def gone(_pid: int) -> bool:
    return False


def test_libreyolo_running_run_is_live() -> None:
    read = libreyolo_status("running", age=10)
    assert read.ok, read.reason
    health = judge_health(read, now=NOW, pid_alive=alive)
    assert health.verdict == "live"
    assert "10s ago" in health.reason


def test_libreyolo_completed_and_failed_runs() -> None:
    done = libreyolo_status("completed", age=5000, total_seconds=4000.0,
                            checkpoints={"best": "w/best.pt", "last": "w/last.pt"})
    assert judge_health(done, now=NOW, pid_alive=gone).verdict == "completed"
    failed = libreyolo_status("failed", error={"type": "RuntimeError",
                                               "message": "CUDA out of memory"})
    health = judge_health(failed, now=NOW, pid_alive=gone)
    assert health.verdict == "failed"
    assert health.reason == "RuntimeError: CUDA out of memory"


def test_our_stopped_state() -> None:
    read = libreyolo_status("stopped", host={"hostname": "box", "gpus": []}, batch=16,
                            imgsz=640, world_size=1, hub={"epoch": 5, "commit": "abc"})
    assert judge_health(read, now=NOW).verdict == "stopped"


def test_running_state_with_a_dead_pid_is_dead() -> None:
    health = judge_health(libreyolo_status("running", age=1), now=NOW, pid_alive=gone)
    assert health.verdict == "dead"
    assert "4242" in health.reason


def test_overdue_epoch_is_slow_then_stalled() -> None:
    slow = judge_health(libreyolo_status("running", age=100), now=NOW, pid_alive=alive)
    assert slow.verdict == "slow"
    quiet_log = [(NOW - 300, 1000), (NOW - 200, 1000), (NOW, 1000)]
    stalled = judge_health(libreyolo_status("running", age=200), now=NOW, pid_alive=alive,
                           log_history=quiet_log)
    assert stalled.verdict == "stalled"
    # Still writing its log (a long validation, say): overdue, but not stalled.
    busy_log = [(NOW - 20, 1000), (NOW - 5, 1800), (NOW, 1800)]
    busy = judge_health(libreyolo_status("running", age=200), now=NOW, pid_alive=alive,
                        log_history=busy_log)
    assert busy.verdict == "slow"


def test_first_epoch_without_timing_is_live_until_very_late() -> None:
    first = libreyolo_status("running", age=120, mean_epoch_seconds=None, epoch_seconds=None)
    assert judge_health(first, now=NOW, pid_alive=alive).verdict == "live"
    late = libreyolo_status("running", age=4000, mean_epoch_seconds=None, epoch_seconds=None)
    assert judge_health(late, now=NOW, pid_alive=alive).verdict == "stalled"


TRAINER = textwrap.dedent(
    """
    import os, sys, time
    from trainer.runfiles import RunWriter
    writer = RunWriter(sys.argv[1])
    writer.write_status({"state": "running", "pid": os.getpid(), "completed_epochs": 1,
                         "total_epochs": 10, "mean_epoch_seconds": 60.0})
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_sigkilled_run_is_judged_dead(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", TRAINER, str(tmp_path)], env=env,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        read = read_status(tmp_path)
        now = time.time()
        assert judge_health(read, now=now, pid_alive=local_pid_alive).verdict == "live"
        os.kill(proc.pid, signal.SIGKILL)
        deadline = time.time() + 10
        # Not reaped yet: the zombie must already count as dead.
        while local_pid_alive(proc.pid) and time.time() < deadline:
            time.sleep(0.05)
        read = read_status(tmp_path)
        assert read.get("state") == "running"
        health = judge_health(read, now=time.time(), pid_alive=local_pid_alive)
        assert health.verdict == "dead", health
    finally:
        proc.kill()
        proc.wait()


def test_local_pid_alive() -> None:
    assert local_pid_alive(os.getpid())
    assert not local_pid_alive(0)
    assert not local_pid_alive(2**22 + 12345)


def test_timestamps_round_trip() -> None:
    from trainer.runfiles import parse_iso

    assert abs(parse_iso(utc_now_iso(NOW)) - NOW) < 1e-3
    assert parse_iso("2026-07-31T10:00:00+00:00") == parse_iso("2026-07-31T10:00:00Z")
    assert parse_iso("not a time") is None


DF_HEADER = b"Filesystem 1024-blocks Used Available Capacity Mounted on\n"


def test_a_df_line_that_is_not_ascii_counts_is_no_reading() -> None:
    assert parse_df(DF_HEADER + b"/dev/sda1 100 40 60 40% /\n") == {"free": 60 * 1024,
                                                                    "size": 100 * 1024}
    # str.isdigit takes each of these; int() refuses the first and last and reads the
    # Arabic-Indic and full-width digits as numbers no df prints.
    for count in ("²", "١٢٣", "１２", "9" * 5000):
        line = f"/dev/sda1 {count} 40 {count} 40% /\n".encode()
        assert parse_df(DF_HEADER + line) is None, count
