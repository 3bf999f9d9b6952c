"""Several training processes, for real: two gloo workers on the CPU through the same code
path as one worker per GPU (spawned by our launcher, or started by torchrun)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.trainer_run_kit import load, trainer_env, wait_for
from trainer.runfiles import read_status

BASE = ["model=n", "imgsz=64", "workers=0", "seed=0", "device=cpu"]
ARGS = [*BASE, "callbacks=tests.fixtures.rank_probe"]


def probes(folder: Path, what: str) -> dict[int, dict[str, Any]]:
    """What each rank's callbacks wrote (see tests/fixtures/rank_probe.py)."""
    return {int(p.name[4]): json.loads(p.read_text()) for p in folder.glob(f"rank*.{what}.json")}


def launch(argv: list[str], cwd: Path, probe_dir: Path) -> subprocess.Popen[str]:
    """Start ``argv`` in its own session, as the launcher on the box does (setsid)."""
    probe_dir.mkdir(exist_ok=True)
    return subprocess.Popen(argv, cwd=cwd, env={**trainer_env(), "RANK_PROBE_DIR": str(probe_dir)},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def finish(proc: subprocess.Popen[str], timeout: float = 240) -> str:
    """Wait for ``proc``; kill its whole session if it hangs."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"timed out:\n{out}")
    return out


def alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@contextlib.contextmanager
def stoppable_run(shapes_data: Path, tmp_path: Path, name: str,
                  epochs: int) -> Iterator[subprocess.Popen[str]]:
    """A two-worker run at batch 2 (8 steps per worker and epoch) for a test to stop; its
    whole session is killed if the test ends first."""
    proc = launch(trainer_cmd(*ARGS, "nproc=2", f"data={shapes_data}", f"epochs={epochs}",
                              "batch=2", "project=runs", f"name={name}"),
                  tmp_path, tmp_path / "probe")
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def trainer_cmd(*args: str) -> list[str]:
    """``python -m trainer train ARGS``."""
    return [sys.executable, "-m", "trainer", "train", *args]


def test_two_workers_train_one_model_and_only_rank_0_writes(
        shapes_data: Path, tmp_path: Path) -> None:
    proc = launch(trainer_cmd(*ARGS, "nproc=2", f"data={shapes_data}", "epochs=2",
                              "batch=8", "project=runs", "name=ddp"), tmp_path, tmp_path / "probe")
    out = finish(proc)
    assert proc.returncode == 0, out
    run = tmp_path / "runs" / "ddp"
    status = read_status(run)
    assert status.get("state") == "completed" and status.get("world_size") == 2
    assert status.get("batch") == 8 and status.get("pid") == proc.pid  # the launcher
    assert "batch 8 (2 processes x 4)" in (run / "train.log").read_text()

    ends = probes(tmp_path / "probe", "end")
    assert sorted(ends) == [0, 1]
    assert ends[0]["state"] == ends[1]["state"] == "completed"
    assert ends[0]["run_dir"] == ends[1]["run_dir"]
    # DDP averaged the same gradients on both ranks: identical weights, and the batch
    # norm statistics and the EMA copy agree after the end-of-epoch sync.
    for key in ("parameters", "buffers", "ema"):
        assert ends[0][key] == ends[1][key], key
    assert ends[0]["pid"] != ends[1]["pid"] != proc.pid

    # Rank 0 alone wrote the run directory: one run, one history row per epoch.
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["ddp"]
    assert sorted(p.name for p in run.iterdir()) == [
        "metrics.jsonl", "results.csv", "status.json", "summary.json", "train.log", "weights"]
    assert [json.loads(line)["epoch"] for line in
            (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["batch"] == 8
    assert summary["images_per_second"] > 0
    assert load(run / "weights/best.pt")["train_args"]["nproc"] == 2


def test_a_stop_from_the_laptop_reaches_every_worker_and_resume_finishes(
        shapes_data: Path, tmp_path: Path) -> None:
    from remote.runs.stop import stop_run
    from remote.transport.local import LocalTransport

    run = tmp_path / "runs" / "stop"
    with stoppable_run(shapes_data, tmp_path, "stop", epochs=3) as proc:
        wait_for(lambda: (read_status(run).get("completed_epochs") or 0) >= 1, 180,
                 "the end of epoch 1", proc)
        workers = [p["pid"] for p in probes(tmp_path / "probe", "start").values()]
        assert len(workers) == 2
        # What the TUI's stop key does: SIGTERM to the group of status.json's pid.
        result = stop_run(LocalTransport(), str(run), timeout=60)
        out = finish(proc, 30)
    assert result.outcome == "stopped", result.detail
    assert proc.returncode == 0, out
    status = read_status(run)
    assert status.get("state") == "stopped" and status.get("completed_epochs") < 3
    ends = probes(tmp_path / "probe", "end")
    assert {r: e["state"] for r, e in ends.items()} == {0: "stopped", 1: "stopped"}
    assert out.count("SIGTERM received") == 2  # each worker got the signal once
    assert not any(alive(pid) for pid in workers)

    again = launch(trainer_cmd("resume=True", "project=runs", "name=stop", "nproc=2"),
                   tmp_path, tmp_path / "probe")
    out = finish(again)
    assert again.returncode == 0, out
    status = read_status(run)
    assert status.get("state") == "completed" and status.get("world_size") == 2
    assert [json.loads(line)["epoch"] for line in
            (run / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3]


def test_a_stop_while_the_workers_start_is_kept_until_they_can_act(
        shapes_data: Path, tmp_path: Path) -> None:
    run = tmp_path / "runs" / "early"
    with stoppable_run(shapes_data, tmp_path, "early", epochs=30) as proc:
        # The workers exist but are still importing torch; no status.json yet.
        wait_for(lambda: "launcher pid" in _read(run / "train.log"), 120,
                 "the workers to start", proc)
        assert not (run / "status.json").exists()
        os.killpg(proc.pid, signal.SIGTERM)
        out = finish(proc, 120)
    assert proc.returncode == 0, out
    status = read_status(run)
    assert status.get("state") == "stopped" and status.get("completed_epochs") == 0, out
    assert out.count("SIGTERM received") == 2 and "second signal" not in out
    # Acted on at the first step the workers agree on (the first, unless the forwarded
    # signal came late on a loaded machine).
    assert load(run / "weights/last.pt")["train_state"]["partial_step"] >= 1


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def test_a_failing_worker_fails_the_run_with_its_own_error(
        shapes_data: Path, tmp_path: Path) -> None:
    data = tmp_path / "data"
    subprocess.run(["cp", "-r", str(shapes_data.parent), str(data)], check=True)
    # Validation is split by rank without shuffling: rank 1 reads the second image.
    val = sorted((data / "images/val").iterdir())
    val[1].write_bytes(b"not an image")
    proc = launch(trainer_cmd(*ARGS, "nproc=2", f"data={data / 'data.yaml'}", "epochs=2", "batch=8",
                              "project=runs", "name=bad"), tmp_path, tmp_path / "probe")
    out = finish(proc)
    assert proc.returncode == 1, out
    status = read_status(tmp_path / "runs/bad")
    error = status.get("error")
    assert status.get("state") == "failed", status.fields
    assert error["type"] == "DataError", error
    assert error["message"].startswith("rank 1: cannot read image") and val[1].name in \
        error["message"]
    workers = [p["pid"] for p in probes(tmp_path / "probe", "start").values()]
    assert len(workers) == 2 and not any(alive(pid) for pid in workers)


def test_under_torchrun_the_processes_join_its_group(shapes_data: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "trainer", "train", *ARGS, f"data={shapes_data}", "epochs=1", "batch=8",
           "project=runs", "name=tr"]
    proc = launch(cmd, tmp_path, tmp_path / "probe")
    out = finish(proc)
    assert proc.returncode == 0, out
    run = tmp_path / "runs" / "tr"
    status = read_status(run)
    assert status.get("state") == "completed" and status.get("world_size") == 2
    ends = probes(tmp_path / "probe", "end")
    assert sorted(ends) == [0, 1] and ends[0]["parameters"] == ends[1]["parameters"]
    # Rank 0 chose the run directory and told rank 1; nothing else was created.
    assert ends[1]["run_dir"] == ends[0]["run_dir"] == "runs/tr"
    assert [p.name for p in (tmp_path / "runs").iterdir()] == ["tr"]
    assert status.get("pid") == ends[0]["pid"]  # torchrun's worker takes its own signals


def test_a_batch_that_does_not_split_is_refused_before_any_process_starts(
        shapes_data: Path, tmp_path: Path) -> None:
    result = subprocess.run(trainer_cmd(*BASE, "nproc=2", "batch=7", f"data={shapes_data}",
                                        "project=runs"),
                            cwd=tmp_path, env=trainer_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "train: batch=7 is the batch over all 2 processes and must split evenly between "
        "them; try batch=8"]
    assert not (tmp_path / "runs").exists()



SCRIPT = '''
import json, os, sys
from trainer import Trainer

def on_train_end(ctx):
    with open(os.path.join(os.environ["RANK_PROBE_DIR"], f"api{ctx.rank}.json"), "w") as fh:
        json.dump({"rank": ctx.rank, "state": ctx.state, "world_size": ctx.world_size}, fh)

if __name__ == "__main__":
    result = Trainer("n", callbacks={"on_train_end": on_train_end}).train(
        data=sys.argv[1], epochs=1, batch=8, imgsz=64, workers=0, device="cpu", nproc=2,
        project="runs", name="api")
    print("RESULT", result.state, result.summary["world_size"], result.exit_code)
'''


def test_the_python_api_spawns_workers_from_a_guarded_script(
        shapes_data: Path, tmp_path: Path) -> None:
    script = tmp_path / "train_script.py"
    script.write_text(SCRIPT)
    proc = launch([sys.executable, str(script), str(shapes_data)], tmp_path,
                  tmp_path / "probe")
    out = finish(proc)
    assert proc.returncode == 0, out
    assert "RESULT completed 2 0" in out and out.count("RESULT") == 1  # workers did not rerun
    written = sorted(p.name for p in (tmp_path / "probe").iterdir())
    assert written == ["api0.json", "api1.json"]
    for name in written:
        assert json.loads((tmp_path / "probe" / name).read_text())["state"] == "completed"
