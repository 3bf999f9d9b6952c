"""A Modal run's estimate before its launch (``gpurent profile modal:APP ...``): a probe
app measures a few real steps on the GPU asked for, against the Modal stand-in with the
real ``modal`` client and CLI, and proposes the run's timeout from what it measured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures.modal_standin import ModalStandin
from tests.fixtures.paths import ROOT


def gpurent(*words: str) -> subprocess.CompletedProcess[str]:
    """The headless ``gpurent`` command."""
    return subprocess.run([sys.executable, "-m", "remote.cli", *words], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=300)


def apps_running() -> list[str]:
    """The app ids Modal lists as running."""
    from remote.serverless.client import list_apps

    return [a.app_id for a in list_apps() if a.running]


def test_a_probe_measures_on_the_gpu_asked_and_proposes_a_timeout(
        modal: ModalStandin, shapes_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe reaches Modal as its own short app (the GPU asked, a 15-minute timeout,
    the same Volumes), runs the doctor and ``trainer profile`` for real, and ends; the
    proposal is the measured epoch times the epochs with a margin, in whole 5 minutes;
    nothing of the probe is recorded as a run."""
    shutil.copytree(shapes_data.parent, modal.volumes.published("gpurent-cache") / "shapes")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    done = gpurent("profile", "--json", "modal:shapes", "model=n", "imgsz=64", "epochs=40",
                   "batch=4", "workers=0", "data=/cache/shapes/data.yaml", "gpu=T4")
    assert done.returncode == 0, done.stderr[-2000:]
    said = json.loads(done.stdout)
    epoch = said["report"]["cost"].get("epoch_total_seconds",
                                       said["report"]["cost"]["epoch_seconds"])
    proposal = said["proposal"]
    assert proposal["seconds"] % 300 == 0
    assert proposal["seconds"] >= epoch * 40 * 1.5 + said["waited"]
    assert proposal["timeout"] == f"{proposal['seconds'] // 60}m" or \
        proposal["timeout"] == f"{proposal['seconds'] // 3600}h"
    fn = modal.calls("FunctionCreate")[0].function
    assert fn.timeout_secs == 900 and fn.resources.gpu_config.gpu_type == "T4"
    assert sorted(m.mount_path for m in fn.volume_mounts) == ["/cache", "/runs"]
    assert said["app_id"] not in apps_running()  # the probe's app ended with its report
    intents = Path(os.environ["XDG_STATE_HOME"]) / "gpurent" / "intents.json"
    assert not intents.exists() or "shapes-probe" not in intents.read_text()


def test_a_probe_that_the_dataset_refuses_says_why_in_one_line(
        modal: ModalStandin, shapes_data: Path) -> None:
    """A dataset the doctor refuses ends the probe: the CLI says so in one line, taken from
    the app's own output, and no probe app is left running."""
    broken = modal.volumes.published("gpurent-cache") / "broken"
    shutil.copytree(shapes_data.parent, broken)
    shutil.rmtree(broken / "images")
    done = gpurent("profile", "modal:shapes", "model=n", "imgsz=64", "epochs=2", "batch=4",
                   "workers=0", "data=/cache/broken/data.yaml", "gpu=cpu")
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert "the probe ended without a report" in last and "doctor refused" in last, last
    assert apps_running() == []
