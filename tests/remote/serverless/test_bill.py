"""Modal's own bill (``remote/serverless/bill.py``) through the real ``modal billing report``
against the stand-in: the cost summed per ``gpurent_run`` tag through the last whole hour,
a run with no whole hour yet said so, a refused account said so (never "$0"), one report
per five minutes, and the bill in ``gpurent status`` and ``gpurent instances``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path

import pytest
from modal_proto import api_pb2

from remote.serverless.appfile import RUN_TAG, RUNS_VOLUME, ModalSpec
from remote.serverless.bill import HOUR, BillCache, fetch_bill
from remote.serverless.record import note_app
from tests.fixtures.modal_standin import App, ModalStandin, object_id
from tests.fixtures.paths import ROOT
from tests.fixtures.tui_runs import write_run

T4 = 0.59  # the stand-in's T4, dollars per hour


def add_app(modal: ModalStandin, name: str, tags: dict[str, str], created_at: float,
            gpu: str = "T4", stopped_at: float | None = None) -> App:
    """An app in the stand-in as a detached run leaves it, with one function on ``gpu``."""
    state = api_pb2.APP_STATE_DETACHED if stopped_at is None else api_pb2.APP_STATE_STOPPED
    app = App(object_id("ap"), name, tags, created_at, state=state, stopped_at=stopped_at)
    app.functions[object_id("fu")] = api_pb2.Function(resources=api_pb2.Resources(
        gpu_config=api_pb2.GPUConfig(gpu_type=gpu, count=1)))
    modal.apps[app.app_id] = app
    return app


def cost(created_at: float, through: float, per_hour: float = T4) -> Decimal:
    """What an app running since ``created_at`` costs by ``through``, as Modal rounds."""
    return Decimal(f"{per_hour * (through - created_at) / 3600:.6f}")


def gpurent(*words: str) -> subprocess.CompletedProcess[str]:
    """The headless ``gpurent`` command, in this test's environment."""
    return subprocess.run([sys.executable, "-m", "remote.cli", *words], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)


def test_the_bill_is_summed_per_run_through_the_last_whole_hour(modal: ModalStandin) -> None:
    hour = time.time() // HOUR * HOUR
    first = add_app(modal, "exp1", {RUN_TAG: "exp1"}, hour - 1.5 * HOUR)
    add_app(modal, "exp1-again", {RUN_TAG: "exp1"}, hour - 2 * HOUR, gpu="H100",
            stopped_at=hour - 1.75 * HOUR)
    add_app(modal, "exp2", {RUN_TAG: "exp2"}, hour - 0.5 * HOUR, stopped_at=hour - 0.25 * HOUR)
    add_app(modal, "not-ours", {"team": "vision"}, hour - 3 * HOUR)
    fresh = add_app(modal, "exp3", {RUN_TAG: "exp3"}, time.time())

    bill = fetch_bill(hour - 2 * HOUR)
    assert bill.refused == "" and bill.through is not None
    through = bill.through  # the hour may have turned since `hour`
    asked = modal.calls("WorkspaceBillingReport")[-1]
    assert asked.resolution == "h" and list(asked.tag_names) == [RUN_TAG]
    assert asked.start_timestamp.seconds == hour - 2 * HOUR
    # exp1: its two apps, each for its whole hours only; apps without the tag are not in it
    assert bill.spent["exp1"] == cost(first.created_at, through) + cost(0, 0.25 * HOUR, 3.95)
    assert bill.spent["exp2"] == cost(0, 0.25 * HOUR)
    assert set(bill.spent) == {"exp1", "exp2"}
    clock = time.strftime("%H:00 UTC", time.gmtime(through))
    assert bill.words("exp1", first.created_at) == \
        f"Modal's bill: ${bill.spent['exp1']:.2f} through {clock} (whole hours)"
    # a run launched within this hour has no whole hour billed yet: not "$0.00"
    said = bill.words("exp3", fresh.created_at)
    assert said.startswith("Modal's bill: none yet (whole hours only") and "$" not in said


def test_a_refused_account_is_told_never_billed_zero(modal: ModalStandin) -> None:
    modal.billing.refused = "billing reports are available on Team and Enterprise plans"
    bill = fetch_bill(time.time() - HOUR)
    assert bill.dollars("exp1") is None
    assert bill.words("exp1", time.time() - HOUR) == (
        "Modal's bill: not available (billing reports are available on Team and Enterprise "
        "plans)")


def test_one_report_is_asked_per_five_minutes_and_the_ui_never_waits(
        modal: ModalStandin) -> None:
    bills, since = BillCache(), time.time() // HOUR * HOUR - HOUR + 10
    assert bills.last(since) is None  # asked in the background
    deadline = time.monotonic() + 90
    while bills.last(since) is None:
        assert time.monotonic() < deadline, "the background report never came"
        time.sleep(0.1)
    bills.get(since)
    bills.get(since + 60)  # the same hour: the same report
    assert len(modal.calls("WorkspaceBillingReport")) == 1


def test_status_and_instances_show_modals_bill(modal: ModalStandin, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    hour = time.time() // HOUR * HOUR
    app = add_app(modal, "billed", {RUN_TAG: "exp1"}, hour - 0.5 * HOUR)
    spec = ModalSpec(app="billed", run="exp1", args=(), gpu="T4", timeout=4 * HOUR)
    note_app(spec, app.app_id, app.created_at)
    modal.volumes.ids[RUNS_VOLUME] = object_id("vo")
    write_run(modal.volumes.published(RUNS_VOLUME) / "billed" / "exp1", done=2, total=9)

    status = gpurent("status", "modal:billed", "--json")
    assert status.returncode == 0, status.stderr
    said = json.loads(status.stdout)["modal"]
    # through the hour the report was asked in (it may have turned since `hour`)
    hours = [hour, hour + HOUR]
    assert any(said["billed"] == float(cost(app.created_at, h)) and said["bill"] ==
               f"Modal's bill: ${cost(app.created_at, h):.2f} through "
               f"{time.strftime('%H:00 UTC', time.gmtime(h))} (whole hours)"
               for h in hours), said
    listed = gpurent("instances")
    assert "Modal's bill: $" in listed.stdout and "(whole hours)" in listed.stdout, \
        listed.stdout + listed.stderr
