"""Done when, first bullet: a CPU run on box A pushes at milestones; A is taken away
mid-epoch (its processes SIGKILLed, its sshd stopped, the provider stand-in says the
instance exited); ``gpurent resume ORG/REPO:NAME --on B`` continues it on box B from the
Hub: the metrics hold epochs exactly 1..N, the Hub's final best.pt is B's, and the work
lost is at most one milestone interval; the guard and the lease armed on A from the
laptop move to B. The interruption is reported: `gpurent instances`
and `gpurent watchdog --once` say it in words with the last safe checkpoint on the Hub,
and the watchdog tells a webhook once. Real sshd boxes, real training; stand-ins only
for the Hub and the provider."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.hub_standin import HubStandin
from tests.fixtures.instance_targets_kit import instance_on
from tests.fixtures.resume_elsewhere_kit import frozen_when, hub_boxes, hub_epoch, laptop_env
from tests.fixtures.resume_kit import gone, rows
from tests.fixtures.watch_log import wait_until
from tests.fixtures.webhook import Webhook
from trainer.hub.ledger import sha256_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GPURENT = Path(sys.executable).with_name("gpurent")
EPOCHS, PERIOD = 10, 2


def test_a_run_taken_away_resumes_on_another_box(
        provider_standin, hub_standin: HubStandin, shapes_data: Path, tmp_path: Path) -> None:
    boxes = a, b = hub_boxes(tmp_path, hub_standin)
    try:
        standin = provider_standin("runpod")
        ia, ib = instance_on(standin, a), instance_on(standin, b)
        env = laptop_env(tmp_path, standin, hub_standin, a, b, ia, ib, OMP_NUM_THREADS="1")

        def gpurent(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                                  timeout=240, env=env)

        run_a = Path(a.home) / "runs" / "exp"
        launched = gpurent("launch", f"runpod:{ia}:{Path(a.home) / 'runs'}", "name=exp",
                           f"data={shapes_data}", f"epochs={EPOCHS}", "batch=8",
                           "imgsz=64", "workers=0", "device=cpu", "seed=0", "hub=org/exp",
                           f"hub_period={PERIOD}", "--json")
        assert launched.returncode == 0, launched.stderr
        pid = json.loads(launched.stdout)["pid"]
        # A's guard and lease, armed from this laptop: they move with the run.
        armed = gpurent("guard", f"runpod:{ia}:{run_a}", "arm", "--when", "done", "--then",
                        "stop", "--provider", "runpod", "--instance", ia,
                        "--send-account-key", "--base-url", standin.base_url, "--poll", "300")
        assert armed.returncode == 0, armed.stderr
        leased = gpurent("lease", f"runpod:{ia}", "6h", "--laptop-only", "--json")
        assert leased.returncode == 0, leased.stderr
        given = json.loads(leased.stdout)["lease"]["until"]

        # One milestone on the Hub, and the run on past it: an epoch after it is done.
        # Frozen (SIGSTOP) once the Hub holds its latest milestone, so that an upload
        # still under way on a loaded machine does not count as lost work.
        def after_its_milestone() -> bool:
            done, safe = len(rows(run_a)), hub_epoch(hub_standin, "org/exp")
            return safe >= PERIOD and PERIOD < done <= safe + PERIOD

        assert wait_until(lambda: frozen_when(pid, after_its_milestone), 120), \
            (run_a / "console.log").read_text()[-2000:]

        # Box A is taken away mid-epoch: nothing on it runs again, and nothing answers.
        os.killpg(pid, signal.SIGKILL)
        guard_a = json.loads((run_a / "guard.json").read_text())["pid"]
        os.killpg(os.getpgid(guard_a), signal.SIGKILL)
        assert wait_until(lambda: gone(pid) and gone(guard_a), 30)
        # What the box says it completed (its status; a kill between an epoch's metrics row
        # and its status leaves the row one ahead, and the laptop sees the status).
        done_on_a = json.loads((run_a / "status.json").read_text())["completed_epochs"]
        assert done_on_a <= len(rows(run_a)) < EPOCHS, "the run ended before it was taken away"
        # The fleet sees the run dead at its last epoch while A still answers.
        seen = gpurent("instances", "--json")
        assert seen.returncode == 0, seen.stderr
        a.sshd.stop()
        standin.take_away(ia)
        safe = hub_epoch(hub_standin, "org/exp")
        assert len(rows(run_a)) - safe <= PERIOD  # lost work: at most one milestone interval

        # The interruption is reported: the fleet's words, then the watchdog's, told once.
        listed = gpurent("instances", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = [r for r in json.loads(listed.stdout)["rows"] if r["target"] == f"runpod:{ia}"]
        taken = row["interrupted"]
        assert taken is not None and "runpod says EXITED" in taken["how"], row["words"]
        assert taken["runs"][0]["hub"]["epoch"] == safe, taken["runs"][0]["hub"]
        commit = taken["runs"][0]["hub"]["commit"]
        assert re.search(rf"taken away by the provider at \d\d:\d\d UTC .*exp: last safe "
                         rf"checkpoint: epoch {safe} on the Hub org/exp@{commit[:7]}, "
                         rf"{done_on_a - safe} epoch\(s\) lost \(seen at epoch {done_on_a} "
                         rf"on the box, its run dead\)", taken["words"]), taken["words"]
        hook = Webhook()
        first, again = (gpurent("watchdog", "--once", "--json", "--notify", hook.url)
                        for _ in range(2))
        assert first.returncode == 0 and again.returncode == 0, first.stderr + again.stderr
        said = f"last safe checkpoint: epoch {safe} on the Hub org/exp@{commit[:7]}"
        assert f"runpod:{ia}: taken away by the provider" in first.stderr and said in first.stderr
        [decision] = json.loads(first.stdout)["decisions"]
        assert decision["trigger"] == "interrupted" and decision["target"] == f"runpod:{ia}"
        assert json.loads(again.stdout)["decisions"] == [] and "taken" not in again.stderr
        assert wait_until(lambda: hook.posts, 10)
        [post] = hook.posts  # one episode, told once
        assert post["trigger"] == "interrupted" and post["target"] == f"runpod:{ia}"
        assert said in post["text"]

        resumed = gpurent("resume", "org/exp:exp", "--on", f"runpod:{ib}", "--project",
                          str(Path(b.home) / "runs"), "--data", str(shapes_data),
                          "--old-price", "0.5")
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        steps = "\n".join(line for line in resumed.stdout.splitlines()
                          if re.match(r"\[ *\d+\.\ds\] ", line))
        assert "preflight passed" in steps
        assert f"last.pt of epoch {safe}" in steps
        # exact: the fleet saw A's run dead at its last epoch; priced at --old-price
        assert (f"work after epoch {safe} is lost: {done_on_a - safe} epoch(s), exact (this "
                f"laptop saw the old box's run dead at epoch {done_on_a}), plus the epoch in "
                f"progress") in steps
        assert "the new box bills $0.6900/h, $0.1900/h more than the old one" in steps
        assert f"training again from epoch {safe + 1} of {EPOCHS}" in steps
        assert f"lease moved from runpod:{ia} to runpod:{ib}: until " in steps
        assert f"guard armed here as on runpod:{ia}: --when done --then stop" in steps
        moved = json.loads(gpurent("lease", f"runpod:{ib}", "--json").stdout)
        assert moved["lease"]["then"] == "stop"
        assert abs(moved["lease"]["until"] - given) < 1.0  # what A had left, not 6 h again
        assert json.loads(gpurent("lease", f"runpod:{ia}", "--json").stdout)["lease"] is None

        run_b = Path(b.home) / "runs" / "exp"
        status = json.loads((run_b / "status.json").read_text())
        assert status["state"] == "completed" and status["start_epoch"] == safe + 1
        assert [r["epoch"] for r in rows(run_b)] == list(range(1, EPOCHS + 1))
        best = run_b / "weights" / "best.pt"
        assert hub_standin.repo("org/exp").files["best.pt"].oid == sha256_file(best)
        assert json.loads(hub_standin.read("org/exp", "status.json"))["pid"] == status["pid"]
        guard_b = json.loads((run_b / "guard.json").read_text())
        assert guard_b["when"] == "done" and guard_b["then"] == "stop" and \
            guard_b["instance"] == ib
    finally:
        for box in boxes:
            box.sshd.stop()
        for run in (Path(b.home) / "runs" / "exp",):  # the guard re-armed on B
            guard = run / "guard.json"
            if guard.exists() and not gone(json.loads(guard.read_text())["pid"]):
                os.killpg(os.getpgid(json.loads(guard.read_text())["pid"]), signal.SIGKILL)
