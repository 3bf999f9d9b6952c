"""``gpurent status RUN_DIR``: the human summary, the --json object and exit codes."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from pathlib import Path

from tests.fixtures.status_cli_kit import GPURENT, ROOT, gpurent
from trainer.runfiles import RunWriter


def completed_run(run: Path) -> None:
    writer = RunWriter(run)
    writer.write_status({
        "state": "completed", "pid": 2**22 + 12345, "completed_epochs": 3,
        "total_epochs": 3, "progress": 1.0, "eta_seconds": 0.0, "train_loss": 1.25,
        "best_metric": 0.5123, "best_metric_name": "mAP50-95", "best_epoch": 2,
    })


def test_json_summary_has_the_stable_keys(tmp_path: Path) -> None:
    completed_run(tmp_path)
    result = gpurent("status", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    for key in ("state", "health", "epoch", "total_epochs", "progress", "eta_seconds",
                "best_metric", "best_metric_name", "best_epoch", "train_loss",
                "updated_at", "pid", "pid_alive", "reason"):
        assert key in summary, key
    assert summary["state"] == summary["health"] == "completed"
    assert summary["epoch"] == 3 and summary["best_epoch"] == 2
    assert summary["pid_alive"] is False


def test_human_summary(tmp_path: Path) -> None:
    completed_run(tmp_path)
    result = gpurent("status", str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert "health: completed" in result.stdout
    assert "epoch  3/3  (100%)" in result.stdout
    assert "mAP50-95 0.5123 at epoch 2" in result.stdout


def test_running_run_of_this_process_is_live(tmp_path: Path) -> None:
    RunWriter(tmp_path).write_status({"state": "running", "pid": os.getpid(),
                                      "completed_epochs": 1, "total_epochs": 4,
                                      "mean_epoch_seconds": 30.0, "progress": 0.25})
    summary = json.loads(gpurent("status", str(tmp_path), "--json").stdout)
    assert summary["health"] == "live" and summary["pid_alive"] is True


def test_missing_directory_exits_2_with_one_line(tmp_path: Path) -> None:
    result = gpurent("status", str(tmp_path / "nope"))
    assert result.returncode == 2
    assert result.stdout == ""
    assert len(result.stderr.strip().splitlines()) == 1
    assert "not a directory" in result.stderr


def test_unreadable_status_exits_2_with_the_reason(tmp_path: Path) -> None:
    (tmp_path / "status.json").write_bytes(b'{"state": "running", "pid": "12"}')
    result = gpurent("status", str(tmp_path))
    assert result.returncode == 2
    assert result.stderr.strip() == ("gpurent status: status.json: 'pid' should be an "
                                     "integer, got a string")
    empty = tmp_path / "empty"
    empty.mkdir()
    result = gpurent("status", str(empty))
    assert result.returncode == 2 and "no status.json" in result.stderr


def test_help_answers() -> None:
    result = gpurent("status", "--help")
    assert result.returncode == 0 and "RUN_DIR" in result.stdout


def test_a_wrongly_typed_guard_json_is_unreadable_for_those_fields_only(tmp_path: Path) -> None:
    completed_run(tmp_path)
    (tmp_path / "guard.json").write_text(json.dumps({
        "state": "done", "when": "done", "then": "stop", "max_hours": "twelve",
        "pid": "77", "last_decision": "stopped the instance \x1b]0;title\x07\u202e",
        "outcome": ["not", "an", "object"]}))
    human = gpurent("status", str(tmp_path))
    assert human.returncode == 0, human.stderr
    guard_line = next(ln for ln in human.stdout.splitlines() if ln.startswith("guard"))
    assert guard_line == ("guard  guard done: stopped the instance  (unreadable in "
                          "guard.json: max_hours, pid, outcome)")
    as_json = gpurent("status", str(tmp_path), "--json")
    guard = json.loads(as_json.stdout)["guard"]
    assert guard["max_hours"] is None and guard["pid"] is None and guard["when"] == "done"
    assert guard["unreadable"] == ["max_hours", "pid", "outcome"]
    assert "\\u202e" not in as_json.stdout and "\x1b" not in as_json.stdout


def test_a_port_inside_the_target_is_refused_with_the_fix() -> None:
    """``HOST:PORT:PATH`` would silently go to port 22 with PATH ``PORT:PATH``."""
    out = gpurent("status", "box.example:9:/runs/x")
    assert out.returncode == 2
    assert out.stderr.strip().endswith("give it with -p: -p 9 box.example:/runs/x")
    assert "Traceback" not in out.stderr


def test_runs_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    out = gpurent("runs", str(tmp_path / "nope"))
    assert out.returncode == 2 and "no such directory" in out.stderr


def test_output_to_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    """``gpurent runs P | head -1``: the reader goes away after one line."""
    for i in range(400):
        completed_run(tmp_path / f"run{i:03d}")
    # A pipe of one page: the listing (over 16 KiB) cannot all fit in it before the
    # reader leaves, however fast the writer is.
    read_end, write_end = os.pipe()
    fcntl.fcntl(read_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen([str(GPURENT), "runs", str(tmp_path)], stdout=write_end,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    os.close(write_end)
    stdout = os.fdopen(read_end, "rb")
    assert proc.stderr is not None
    assert stdout.readline().startswith(b"NAME")
    stdout.close()  # what head does once it has its line
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141
    assert err == b""
