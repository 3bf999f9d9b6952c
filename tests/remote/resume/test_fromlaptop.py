"""``gpurent resume PROVIDER:ID:RUN_DIR --on B`` (the run named by its path on the old
box) from the laptop's verified copy when it is
newer than the Hub's milestone: a CPU run on box A pushes every 4 epochs; the laptop
pulls ``last.pt`` and the history after a later epoch (``gpurent pull``); A is taken
away; the resume uploads the laptop's copy to B, says why, and B's metrics hold epochs
exactly 1..N. With a Hub newer than the copy, the Hub is chosen. Real sshd boxes, real
training; stand-ins only for the Hub and the provider."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from remote.resume.fromlaptop import choose
from remote.weights.ckptepoch import checkpoint_epoch
from remote.weights.lastsafe import HubCopy
from tests.fixtures.hub_standin import HubStandin
from tests.fixtures.instance_targets_kit import instance_on
from tests.fixtures.resume_elsewhere_kit import hub_boxes, hub_epoch, laptop_env
from tests.fixtures.resume_kit import gone, rows
from tests.fixtures.watch_log import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GPURENT = Path(sys.executable).with_name("gpurent")
EPOCHS, PERIOD = 8, 3


def test_the_laptops_newer_copy_resumes_on_another_box(
        provider_standin, hub_standin: HubStandin, shapes_data: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    boxes = a, b = hub_boxes(tmp_path, hub_standin)
    try:
        standin = provider_standin("runpod")
        ia, ib = instance_on(standin, a), instance_on(standin, b)
        env = laptop_env(tmp_path, standin, hub_standin, a, b, ia, ib, OMP_NUM_THREADS="1")
        env.pop("GPURENT_DATA_DIR", None)

        def gpurent(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                                  timeout=240, env=env)

        runs_a = Path(a.home) / "runs"
        run_a = runs_a / "exp"
        launched = gpurent("launch", f"runpod:{ia}:{runs_a}", "name=exp",
                           f"data={shapes_data}", f"epochs={EPOCHS}", "batch=8",
                           "imgsz=64", "workers=0", "device=cpu", "seed=0", "hub=org/exp",
                           f"hub_period={PERIOD}", "--json")
        assert launched.returncode == 0, launched.stderr
        pid = json.loads(launched.stdout)["pid"]

        def held_past_a_milestone() -> bool:
            """A held still (SIGSTOP) with its last.pt and history at one epoch past the
            Hub's milestone; else let go again."""
            safe, done = hub_epoch(hub_standin, "org/exp"), len(rows(run_a))
            if safe < PERIOD or done % PERIOD == 0 or safe != done // PERIOD * PERIOD:
                return False  # no milestone yet, one due, or one still on its way
            os.killpg(pid, signal.SIGSTOP)
            if checkpoint_epoch(str(run_a / "weights" / "last.pt")) == len(rows(run_a)) \
                    and hub_epoch(hub_standin, "org/exp") == safe:
                return True
            os.killpg(pid, signal.SIGCONT)
            return False

        # One milestone on the Hub and the run past it, held still while the laptop
        # pulls its last.pt and history; then A is taken away.
        assert wait_until(held_past_a_milestone, 120), \
            (run_a / "console.log").read_text()[-2000:]
        pulled = gpurent("pull", f"runpod:{ia}:{run_a}", str(tmp_path / "pulled"),
                         "--file", "last.pt", "--file", "metrics.jsonl",
                         "--file", "results.csv", "--json")
        assert pulled.returncode == 0, pulled.stderr
        os.killpg(pid, signal.SIGKILL)
        assert wait_until(lambda: gone(pid), 30)
        a.sshd.stop()
        standin.take_away(ia)
        files = {f["name"]: f["local_path"] for f in json.loads(pulled.stdout)["files"]}
        mine, safe = checkpoint_epoch(files["last.pt"]), hub_epoch(hub_standin, "org/exp")
        assert mine is not None and safe < mine, (safe, mine)
        assert [r["epoch"] for r in rows(Path(files["metrics.jsonl"]).parent)][:mine] == \
            list(range(1, mine + 1))

        # Named by its path on the old box: the laptop's intents know its Hub repository.
        unknown = gpurent("resume", f"runpod:{ia}:{runs_a}/other", "--on", f"runpod:{ib}")
        assert unknown.returncode == 2 and "launched no run at" in unknown.stderr, \
            unknown.stderr
        resumed = gpurent("resume", f"runpod:{ia}:{run_a}", "--on", f"runpod:{ib}", "--project",
                          str(Path(b.home) / "runs"), "--data", str(shapes_data))
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        steps = "\n".join(line for line in resumed.stdout.splitlines()
                          if re.match(r"\[ *\d+\.\ds\] ", line))
        assert (f"from this laptop: the laptop's copy of epoch {mine} is newer than the "
                f"Hub's epoch {safe}") in steps, steps
        assert f"uploaded the laptop's verified copy into {Path(b.home) / 'runs' / 'exp'}: " \
               f"last.pt of epoch {mine}" in steps, steps
        assert f"training again from epoch {mine + 1} of {EPOCHS}" in steps, steps

        run_b = Path(b.home) / "runs" / "exp"
        status = json.loads((run_b / "status.json").read_text())
        assert status["state"] == "completed" and status["start_epoch"] == mine + 1
        assert [r["epoch"] for r in rows(run_b)] == list(range(1, EPOCHS + 1))
        results = (run_b / "results.csv").read_text().splitlines()
        assert [line.split(",")[0].strip() for line in results[1:]] == \
            [str(e) for e in range(1, EPOCHS + 1)]

        # The Hub newer than the laptop's copy (B's final push): the Hub is chosen.
        monkeypatch.setenv("HOME", env["HOME"])
        monkeypatch.delenv("GPURENT_DATA_DIR", raising=False)
        final = hub_epoch(hub_standin, "org/exp")
        source = choose(HubCopy("org/exp", "c0ffee", final), "exp", str(runs_a))
        assert source.copy is None and source.why == \
            f"the Hub's epoch {final} is as new as the laptop's copy of epoch {mine} or newer"
        assert choose(HubCopy("org/exp", "c0ffee", safe), "exp", str(runs_a)).copy is not None
    finally:
        for box in boxes:
            box.sshd.stop()

