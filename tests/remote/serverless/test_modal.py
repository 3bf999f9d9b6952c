"""Serverless training on Modal (``modal:APP``), against the Modal stand-in
(``tests/fixtures/modal_standin.py``) with the real ``modal`` client and CLI: a launch
refused without a finite timeout, a real CPU training run launched detached, watched
through the runs Volume and pushed to the Hub stand-in, found again by a laptop that
quit, listed in the fleet; a stop and a timeout, with what each left safe."""

from __future__ import annotations

import asyncio
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.modal_standin import ModalStandin
from tests.fixtures.modal_tiny import launch_detached
from tests.fixtures.paths import ROOT

WAIT = 240.0


def dataset_tar(folder: Path) -> bytes:
    """``folder`` as a tar with its ``data.yaml`` at the top (``tar cf - -C folder .``)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add(folder, arcname=".")
    return buf.getvalue()


def gpurent(*words: str, env: dict[str, str] | None = None,
            timeout: float = WAIT) -> subprocess.CompletedProcess[str]:
    """The headless ``gpurent`` command."""
    return subprocess.run([sys.executable, "-m", "remote.cli", *words], cwd=ROOT,
                          env=env or {**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=timeout)


def wait_for(what: str, check, limit: float = WAIT) -> None:  # noqa: ANN001
    """Wait until ``check()`` holds (a busy machine gets ``limit`` seconds)."""
    deadline = time.monotonic() + limit
    while not check():
        assert time.monotonic() < deadline, f"no {what} in {limit:g}s"
        time.sleep(0.2)


def test_a_modal_launch_needs_a_finite_timeout_within_modals_24_hours(
        modal: ModalStandin) -> None:
    """No timeout, ``timeout=0`` or more than 24 h: refused in one line, before Modal is
    asked anything; without the ``modal`` client a ``modal:`` target says how to get it."""
    base = ["launch", "modal:shapes", "name=r1", "data=/cache/shapes/data.yaml"]
    for extra, said in (([], "timeout= is required"), (["timeout=0"], "at least 1s"),
                        (["timeout=25h"], "more than Modal's limit of 24h")):
        done = gpurent(*base, *extra)
        assert done.returncode == 2, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and said in lines[0], done.stderr
    assert modal.requests == []
    hidden = subprocess.run(
        [sys.executable, "-c", "import sys; sys.modules['modal'] = None; "
         "from remote.cli import main; sys.exit(main(sys.argv[1:]))", *base, "timeout=4h"],
        cwd=ROOT, capture_output=True, text=True, timeout=WAIT)
    assert hidden.returncode != 0
    assert "pip install 'gpurent-tui[modal]'" in hidden.stderr, hidden.stderr


@pytest.mark.slow
def test_a_modal_run_is_launched_detached_watched_through_its_volume_and_pushed(
        modal: ModalStandin, hub_standin: HubStandin, shapes_data: Path,
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """One real CPU run of our trainer, on a private Hub dataset tar staged into the cache
    Volume by the app: the launch reaches Modal with the timeout, GPU
    and Volumes asked; the CLI that launched it is gone while it trains (a laptop that
    quit) and a new command finds it again through the intents; the fleet lists it with
    its timeout left and dollars; `gpurent follow` watches it to the end through the
    Volume (committed at each status write); milestones reach the Hub stand-in."""
    hub_standin.add_file("org/shapes", "shapes.tar", dataset_tar(shapes_data.parent),
                         private=True)
    modal.secrets["gpurent-hf"] = {"HF_TOKEN": VALID_TOKEN}
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    modal.gpus_free.clear()  # the function waits for a GPU until the TUI watches
    modal.volumes.commit_limit = 1  # and the first status stays until the TUI has seen it
    done = gpurent("launch", "modal:shapes", "name=r1", "model=n", "imgsz=64", "epochs=2",
                   "batch=4", "workers=0", "seed=0", "stage=org/shapes/shapes.tar",
                   "gpu=T4", "timeout=4h", "hub=org/modal", "hub_period=1", "--json")
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout)
    assert re.fullmatch(r"ap-[A-Za-z0-9]{22}", said["app_id"])
    fn = modal.calls("FunctionCreate")[0].function
    assert fn.timeout_secs == 4 * 3600
    assert fn.resources.gpu_config.gpu_type == "T4"
    assert sorted(m.mount_path for m in fn.volume_mounts) == ["/cache", "/runs"]
    app_file = Path(said["app_file"])
    assert app_file.is_relative_to(Path(os.environ["XDG_STATE_HOME"]))
    assert VALID_TOKEN not in app_file.read_text()
    intents = json.loads((Path(os.environ["XDG_STATE_HOME"]) / "gpurent" /
                          "intents.json").read_text())
    assert intents["modal:shapes"]["modal"]["app_id"] == said["app_id"]

    # The launching CLI has exited; the detached app trains on.
    listed = json.loads(gpurent("instances", "--json").stdout or "{}")
    assert any(r.get("target") == "modal:shapes" and r.get("timeout_left", 0) > 3 * 3600
               and "dollars" in r for r in listed.get("modal", [])), listed
    assert asyncio.run(watch_in_tui("modal:shapes", modal)) == 2
    follow = gpurent("follow", "modal:shapes/r1")
    assert follow.returncode == 0, follow.stderr[-2000:]
    assert "completed after 2/2 epochs" in follow.stderr + follow.stdout
    commits = [name for _, name in modal.volumes.commits if name == "gpurent-runs"]
    assert len(commits) >= 3  # the first status, each epoch's, the end
    staged = modal.volumes.published("gpurent-cache") / "datasets" / "org--shapes"
    assert (staged / "data.yaml").is_file()  # staged once into the cache Volume
    status = gpurent("status", "modal:shapes/r1", "--json")
    summary = json.loads(status.stdout)
    assert summary["state"] == "completed" and summary["modal"]["timed_out"] is False
    hub = json.loads(hub_standin.read("org/modal", "status.json"))
    assert hub["state"] == "completed"


async def watch_in_tui(target: str, modal: ModalStandin) -> int:
    """Open ``gpurent-tui TARGET``, let the held function start, watch the run to its end
    through the Volume, and return how many epochs the metrics pane shows."""
    from tests.fixtures.screen import flat, screen_text
    from tui.box.view import BoxView
    from tui.main import app_from_args
    from tui.widgets.metrics import MetricsPane

    app = app_from_args([target])
    async with app.run_test(size=(160, 48)) as pilot:
        box = app.query_one(BoxView)
        modal.gpus_free.set()
        deadline = time.monotonic() + WAIT
        seen_live = False
        while not (box.state.status is not None
                   and box.state.status.health.verdict == "completed"
                   and len(box.query_one(MetricsPane).rows) == 2
                   and any("completed after 2/2 epochs" in line
                           for line in box.log_pane.log_view.lines)):
            assert time.monotonic() < deadline, flat(screen_text(app))
            if box.state.status is not None and box.state.status.read.get("state") == "running":
                seen_live, modal.volumes.commit_limit = True, None
            await pilot.pause(0.1)
        assert seen_live  # watched while it trained, not only read at the end
        assert "completed" in flat(screen_text(app))
        # Modal's own bill, asked in the background: a run of minutes has no whole hour
        while "Modal's bill: none yet (whole hours only" not in flat(screen_text(app)):
            assert time.monotonic() < deadline, flat(screen_text(app))
            await pilot.pause(0.1)
        return len(box.query_one(MetricsPane).rows)


async def fleet_screen() -> str:
    """The fleet screen of ``gpurent-tui`` with no provider account: its text once the
    Modal apps launched from here are listed."""
    from remote.billing.accounts import NoAccounts
    from tests.fixtures.screen import until_shown
    from tui.app import GpurentApp

    def no_accounts() -> None:
        raise NoAccounts()

    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = no_accounts
    async with app.run_test(size=(160, 48)) as pilot:
        return await until_shown(pilot, "Modal apps launched from here", "modal:tiny",
                                 "before its timeout", timeout=WAIT)


def tiny_app(path: Path, app: str, run: str) -> Path:
    """An app that writes a run's status and ``last.pt`` into the runs Volume, commits,
    then sleeps (a trainer that never ends), printing what gpurent's apps print."""
    path.write_text(f'''
import json, os, time
import modal
app = modal.App({app!r})
runs = modal.Volume.from_name("gpurent-runs", create_if_missing=True)
@app.function(timeout=4 * 3600, volumes={{"/runs": runs}})
def train():
    run = "/runs/{app}/{run}"
    os.makedirs(run + "/weights", exist_ok=True)
    open(run + "/weights/last.pt", "wb").write(b"x" * 1000)
    json.dump({{"schema_version": 1, "state": "running", "completed_epochs": 1,
               "total_epochs": 9, "updated_at": "2026-01-01T00:00:00Z"}},
              open(run + "/status.json", "w"))
    runs.commit()
    time.sleep(3600)
@app.local_entrypoint()
def main():
    call = train.spawn()
    print("gpurent-modal-spawned", app.app_id, call.object_id, flush=True)
''')
    return path


def launch_tiny(modal: ModalStandin, tmp_path: Path, app: str) -> str:
    """Launch a tiny app with ``modal run --detach`` and record it as ``gpurent launch``
    records its apps (the laptop's intents); its app id."""
    return launch_detached(tiny_app(tmp_path / f"{app}.py", app, "r"), app)


def test_a_stop_ends_the_app_and_a_timeout_is_named_with_what_was_saved(
        modal: ModalStandin, tmp_path: Path) -> None:
    """The fleet screen lists the running app with its timeout left and dollars;
    `gpurent stop modal:APP` ends the app and names the checkpoint safe in the Volume;
    an app that runs into its timeout is shown as "timed out at 4h" with its checkpoint
    still in the Volume."""
    launch_tiny(modal, tmp_path, "tiny")
    wait_for("a committed status", lambda: (modal.volumes.published("gpurent-runs") /
                                            "tiny/r/status.json").exists())
    fleet = asyncio.run(fleet_screen())
    assert "modal:tiny" in fleet and "timeout of 4h in 3h59m" in fleet, fleet
    assert "at most $0.19 more before its timeout" in fleet, fleet
    stop = gpurent("stop", "modal:tiny")
    assert stop.returncode == 0, stop.stderr
    assert "stopped" in stop.stdout and "last.pt: in the Volume (1000 bytes)" in stop.stdout
    assert modal.calls("AppStop")

    modal.clock_scale = 1 / 3600  # a 4-hour timeout ends in 4 s
    launch_tiny(modal, tmp_path, "late")
    app = next(a for a in modal.apps.values() if a.name == "late")
    wait_for("the timeout", lambda: app.stopped_at is not None)
    status = gpurent("status", "modal:late/r")
    assert status.returncode == 0, status.stderr
    assert "timed out at 4h" in status.stdout, status.stdout
    assert "last.pt" in status.stdout
