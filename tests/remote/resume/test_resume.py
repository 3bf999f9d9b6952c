"""Back after a stop, for real: a CPU run launched on a RunPod-named box (the real sshd,
its address from the provider stand-in) is cut off when the instance is stopped; while
it is stopped its address changes; ``gpurent resume`` starts it, finds the new address,
relaunches the run with ``resume=True`` and follows it to the end, and the run's
metrics continue at the next epoch with one row per epoch."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.fixtures.instance_targets_kit import instance_on, laptop
from tests.fixtures.resume_kit import gone, rows
from tests.fixtures.sshd import Sshd, free_port, make_server
from tests.fixtures.watch_log import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GPURENT = Path(sys.executable).with_name("gpurent")


def test_resume_brings_a_stopped_instance_back_to_training(
        provider_standin, shapes_data: Path, tmp_path: Path) -> None:
    box = make_server(tmp_path / "box")  # this box's sshd goes down with the instance
    moved: Sshd | None = None
    try:
        standin = provider_standin("runpod")
        iid = instance_on(standin, box)
        name = f"runpod:{iid}"
        known = tmp_path / "known_hosts"
        known.write_text(f"{name} {box.host_key_line}\n")
        env = {**laptop(tmp_path, box, known), "RUNPOD_API_KEY": standin.key,
               "GPURENT_RUNPOD_URL": standin.base_url, "OMP_NUM_THREADS": "1"}

        def gpurent(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                                  timeout=timeout, env={**os.environ, **env})

        project = Path(box.home) / "runs"
        run = project / "exp"
        launched = gpurent("launch", f"{name}:{project}", "name=exp",
                           f"data={shapes_data}", "epochs=4", "batch=8", "imgsz=64",
                           "workers=0", "device=cpu", "seed=0", "--json")
        assert launched.returncode == 0, launched.stderr
        pid = json.loads(launched.stdout)["pid"]
        assert wait_until(lambda: len(rows(run)) >= 1, 300), \
            (run / "console.log").read_text()[-2000:]

        # The provider stops the instance: the trainer dies with the box, unsaved.
        os.killpg(pid, signal.SIGKILL)
        assert wait_until(lambda: gone(pid), 30)
        box.sshd.stop()
        stopped = gpurent("instance", name, "stop", "--yes", "--interval", "0.05",
                          "--json")
        assert stopped.returncode == 0, stopped.stderr
        assert json.loads(stopped.stdout)["outcome"]["state"] == "stopped"
        before = [r["epoch"] for r in rows(run)]
        status = json.loads((run / "status.json").read_text())
        assert status["state"] == "running" and status["completed_epochs"] < 4

        # It will come back on another port, as stopped instances do.
        moved = Sshd(box.sshd.keys, box.host, free_port(), name="moved").start()
        standin.move_on_start(iid, box.host, moved.port, box.user)
        began = time.monotonic()
        resumed = gpurent("resume", name, str(run), "--interval", "0.05")
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        steps = [line for line in resumed.stdout.splitlines()
                 if re.match(r"\[ *\d+\.\ds\] ", line)]
        text = "\n".join(steps)
        # RunPod tells no price while stopped: the disk's $/h then, the GPU's once running.
        assert f"instance {iid} is stopped; starting it  ($0.0694/h)" in text
        assert "is running: billing $0.6900/h again  ($0.6900/h)" in text
        assert f"SSH answers at {box.user}@{box.host}:{moved.port}" in text
        assert f"relaunched {run} with resume=True" in text
        assert [float(s[1:].split("s]")[0]) for s in steps] == sorted(
            float(s[1:].split("s]")[0]) for s in steps)
        assert float(steps[-1][1:].split("s]")[0]) <= time.monotonic() - began

        after = json.loads((run / "status.json").read_text())
        assert after["state"] == "completed" and after["pid"] != pid
        # The metrics continue at the next epoch: one row per epoch, none lost or doubled.
        assert after["start_epoch"] in range(2, len(before) + 2)
        assert [r["epoch"] for r in rows(run)] == [1, 2, 3, 4]
        assert f"at epoch {after['start_epoch']}" in (run / "train.log").read_text()
    finally:
        if moved is not None:
            moved.stop()
        box.sshd.stop()
