"""A Modal stop that says what happened: it waits until the app's containers have ended
and says the run's state and last checkpoint as read from the Volume, or says plainly
that a container still runs (and may bill) after its bound."""

from __future__ import annotations

import time
from pathlib import Path

from remote.serverless.record import record_for
from remote.serverless.stop import stop_modal
from tests.fixtures.modal_standin import ModalStandin
from tests.fixtures.modal_tiny import launch_detached

WAIT = 120.0


def tiny_app(path: Path, app: str) -> Path:
    """An app that commits a run's status at epoch 2 of 5 and its ``last.pt``, then
    waits; interrupted, it writes the stop (state ``stopped``) and commits again."""
    path.write_text(f'''\
import json, os, time
import modal
app = modal.App({app!r})
runs = modal.Volume.from_name("gpurent-runs", create_if_missing=True)
def status(state):
    json.dump({{"schema_version": 1, "state": state, "completed_epochs": 2,
               "total_epochs": 5, "updated_at": "2026-01-01T00:00:00Z"}},
              open("/runs/{app}/r/status.json", "w"))
@app.function(timeout=4 * 3600, volumes={{"/runs": runs}})
def train():
    os.makedirs("/runs/{app}/r/weights", exist_ok=True)
    open("/runs/{app}/r/weights/last.pt", "wb").write(b"x" * 1000)
    status("running")
    runs.commit()
    try:
        time.sleep(3600)
    except KeyboardInterrupt:
        status("stopped")
        runs.commit()
@app.local_entrypoint()
def main():
    call = train.spawn()
    print("gpurent-modal-spawned", app.app_id, call.object_id, flush=True)
''')
    return path


def launch(modal: ModalStandin, tmp_path: Path, app: str) -> None:
    """``modal run --detach`` the tiny app, recorded as ``gpurent launch`` records it;
    returns once its first status is committed."""
    launch_detached(tiny_app(tmp_path / f"{app}.py", app), app)
    status = modal.volumes.published("gpurent-runs") / app / "r" / "status.json"
    deadline = time.monotonic() + WAIT
    while not status.exists():
        assert time.monotonic() < deadline, "no committed status"
        time.sleep(0.1)


def test_a_stop_reports_the_containers_ended_and_the_runs_last_checkpoint(
        modal: ModalStandin, tmp_path: Path) -> None:
    """After ``AppStop`` the stop waits for the container's end, then reads the run's
    stop and its safe ``last.pt`` from the Volume."""
    launch(modal, tmp_path, "halt")
    record = record_for("halt")
    assert record is not None
    stopped = stop_modal(record, wait=WAIT)
    assert stopped.containers == []
    assert stopped.words.startswith(f"stopped: {record.app_id}'s containers have ended")
    assert stopped.run == ("the run stopped at epoch 2/5; last checkpoint safe (last.pt: in "
                           "the Volume (1000 bytes))")
    assert not any(c.running for c in modal.containers)
    assert modal.calls("AppStop")


def test_a_container_that_lingers_gets_the_still_running_words(
        modal: ModalStandin, tmp_path: Path) -> None:
    """A container still running after the bound is said to run, and perhaps to bill."""
    launch(modal, tmp_path, "linger")
    record = record_for("linger")
    assert record is not None
    modal.containers_linger = True
    said: list[str] = []
    stopped = stop_modal(record, wait=6.0, say=said.append)
    assert len(stopped.containers) == 1
    assert stopped.words.startswith(f"still running: 1 container of {record.app_id} still "
                                    "runs")
    assert "Modal may still bill it" in stopped.words
    assert said and said[0].startswith("waiting for Modal to end 1 container(s)")
    assert stopped.run.startswith("the run's last committed status says running at "
                                  "epoch 2/5")
