"""Done when, second bullet: the acceptance of ``tests/remote/resume/test_elsewhere.py`` with a
LibreYOLO run (the stand-in ``tests.fixtures.fake_libreyolo`` on the boxes; the real one:
``bench/libreyolo_interop.sh``). Its push watcher pushes ``last.pt`` and the history at
milestones; box A is taken away mid-epoch (the engine and its watcher SIGKILLed, sshd
stopped, the provider stand-in says the instance exited); the fleet says so with the
Hub's milestone; ``gpurent resume ORG/REPO:NAME --on B`` restores it there and relaunches
``libreyolo train resume=True model=NAME/weights/last.pt`` with a new watcher: the
metrics hold epochs exactly 1..N, the Hub's final best.pt is B's, and the work lost is
at most one milestone interval. Real sshd boxes; stand-ins for the Hub and provider."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.fake_libreyolo import libreyolo_shim
from tests.fixtures.hub_standin import HubStandin
from tests.fixtures.instance_targets_kit import instance_on
from tests.fixtures.libreyolo_kit import data_yaml, kill
from tests.fixtures.resume_elsewhere_kit import frozen_when, hub_boxes, hub_epoch, laptop_env
from tests.fixtures.resume_kit import gone, rows
from tests.fixtures.watch_log import wait_until
from trainer import engines
from trainer.hub.autopush import live_watchers
from trainer.hub.ledger import sha256_file

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

GPURENT = Path(sys.executable).with_name("gpurent")
EPOCHS, PERIOD = 10, 3


def test_a_libreyolo_run_taken_away_resumes_on_another_box(
        provider_standin, hub_standin: HubStandin, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    libreyolo_shim(bin_dir, {"FAKE_LIBREYOLO_EPOCH_SECONDS": "0.6",
                             "FAKE_LIBREYOLO_SAVE_SECONDS": "0.02"})
    boxes = a, b = hub_boxes(tmp_path, hub_standin, box_path=[
        str(bin_dir), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])
    data = data_yaml(tmp_path)
    try:
        standin = provider_standin("runpod")
        ia, ib = instance_on(standin, a), instance_on(standin, b)
        env = laptop_env(tmp_path, standin, hub_standin, a, b, ia, ib)

        def gpurent(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                                  timeout=120, env=env)

        run_a = Path(a.home) / "runs" / "ly"
        launched = gpurent("launch", "--engine", "libreyolo", "--json",
                           f"runpod:{ia}:{Path(a.home) / 'runs'}", "name=ly", "model=yolox-n",
                           "pretrained=False", f"data={data}", f"epochs={EPOCHS}",
                           "eval_interval=1", "hub=org/ly", f"hub_period={PERIOD}")
        assert launched.returncode == 0, launched.stderr
        pid = json.loads(launched.stdout)["pid"]
        monkeypatch.setenv(engines.CACHE_ENV, f"{a.home}/.cache/gpurent")  # A's
        assert wait_until(lambda: live_watchers(run_a), 30), "no push watcher on A"
        watchers = live_watchers(run_a)

        # A milestone on the Hub (last.pt and the history), the run on past it.
        # The engine frozen (SIGSTOP) while that holds, so that no epoch ends between
        # the check and the kill on a loaded machine.
        def past_a_milestone() -> bool:
            safe = hub_epoch(hub_standin, "org/ly")
            return safe >= PERIOD and 0 < len(rows(run_a)) - safe < PERIOD

        assert wait_until(lambda: frozen_when(pid, past_a_milestone), 60), \
            Path(engines.beside_path(run_a, "push.log")).read_text()
        # Box A is taken away mid-epoch: the engine and its watcher die at once.
        for victim in (*watchers, pid):
            os.killpg(victim, signal.SIGKILL)
        assert wait_until(lambda: all(gone(p) for p in (*watchers, pid)), 30)
        done_on_a = len(rows(run_a))
        assert done_on_a < EPOCHS, "the run ended before it was taken away"
        a.sshd.stop()
        standin.take_away(ia)
        safe = hub_epoch(hub_standin, "org/ly")
        assert 0 < done_on_a - safe <= PERIOD  # lost work: at most one milestone interval
        pushed = hub_standin.repo("org/ly").files
        assert {"last.pt", "metrics.jsonl", "status.json", "train_config.yaml"} <= set(pushed)
        hub_rows = [json.loads(r) for r in hub_standin.read("org/ly", "metrics.jsonl")
                    .decode().splitlines()]
        assert [r["epoch"] for r in hub_rows] == list(range(1, safe + 1))

        # The interruption is reported, with the Hub's milestone as the last safe one.
        listed = gpurent("instances", "--json")
        assert listed.returncode == 0, listed.stderr
        [row] = [r for r in json.loads(listed.stdout)["rows"] if r["target"] == f"runpod:{ia}"]
        assert row["interrupted"] is not None, row["words"]
        assert re.search(rf"taken away by the provider .*ly: last safe checkpoint: epoch "
                         rf"{safe} on the Hub org/ly@", row["interrupted"]["words"]), row

        resumed = gpurent("resume", "org/ly:ly", "--on", f"runpod:{ib}", "--project",
                          str(Path(b.home) / "runs"), "--data", data, "--detach")
        assert resumed.returncode == 0, resumed.stdout[-3000:] + resumed.stderr[-3000:]
        assert f"last.pt of epoch {safe}" in resumed.stdout
        assert "LibreYOLO, its push watcher beside it" in resumed.stdout
        assert f"training again from epoch {safe + 1} of {EPOCHS}" in resumed.stdout

        run_b = Path(b.home) / "runs" / "ly"
        monkeypatch.setenv(engines.CACHE_ENV, f"{b.home}/.cache/gpurent")  # B's

        def finished() -> bool:
            status = json.loads((run_b / "status.json").read_text())
            return status["state"] == "completed" and not live_watchers(run_b)
        assert wait_until(finished, 60), (run_b / "train.log").read_text()[-2000:]
        assert [r["epoch"] for r in rows(run_b)] == list(range(1, EPOCHS + 1))
        for name in ("best.pt", "last.pt"):  # the final ones, with every epoch's row
            assert hub_standin.repo("org/ly").files[name].oid == \
                sha256_file(run_b / "weights" / name)
        hub_rows = [json.loads(r) for r in hub_standin.read("org/ly", "metrics.jsonl")
                    .decode().splitlines()]
        assert [r["epoch"] for r in hub_rows] == list(range(1, EPOCHS + 1))
        hub_status = json.loads(hub_standin.read("org/ly", "status.json"))
        assert hub_status["state"] == "completed"
        assert hub_status["pid"] == json.loads((run_b / "status.json").read_text())["pid"]
    finally:
        for box in boxes:
            box.sshd.stop()
        for box in boxes:
            monkeypatch.setenv(engines.CACHE_ENV, f"{box.home}/.cache/gpurent")
            for watcher in live_watchers(Path(box.home) / "runs" / "ly"):
                kill(watcher)
