"""The TUI on a LibreYOLO run (written by the stand-in ``tests.fixtures.fake_libreyolo``):
the metric columns first without the ``-1.0`` placeholders, a key to cycle the charted
metric, the header's metric name the final status dropped, and the launch form's
LibreYOLO defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Input, Select

from tests.fixtures.paths import ROOT
from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from trainer import runfiles
from tui.dialogs.launch import LaunchForm
from tui.widgets.header import RunHeader
from tui.widgets.metrics import (
    MetricsPane,
    latest_columns,
    metric_columns,
    next_column,
    series,
)

pytestmark = pytest.mark.anyio
SIZE = (150, 46)


def libreyolo_run(project: Path, name: str = "ly", epochs: int = 4) -> Path:
    """A completed run written by the stand-in (validated every epoch)."""
    project.mkdir(parents=True, exist_ok=True)
    data = project.parent / "data.yaml"
    data.write_text("nc: 1\n")
    env = {**os.environ, "FAKE_LIBREYOLO_EPOCH_SECONDS": "0.01",
           "FAKE_LIBREYOLO_SAVE_SECONDS": "0"}
    done = subprocess.run([sys.executable, str(ROOT / "tests/fixtures/fake_libreyolo.py"),
                           "train", "model=yolox-n", "pretrained=False", f"data={data}",
                           f"epochs={epochs}", "eval_interval=1", "project=.", f"name={name}"],
                          cwd=project, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return project / name


def test_columns_put_metrics_first_and_leave_placeholders_out() -> None:
    row = {"epoch": 3, "time": 1.0, "train/loss": 2.0, "validated": True,
           "best_metric_name": "metrics/mAP50-95", "train/iou_loss": 0.5,
           "metrics/precision": 0.2, "metrics/mAP50-95": 0.3, "metrics/mAP_large": -1.0,
           "metrics/AR1": float("nan"), "speed/total_ms": 7.0, "lr/group0": 0.01}
    assert latest_columns(row) == ["metrics/mAP50-95", "metrics/precision", "train/loss",
                                   "train/iou_loss"]
    rows = [{"epoch": 1, "train/loss": 3.0}, row,
            {**row, "metrics/mAP75": 0.1, "metrics/precision": -1.0}]
    columns = metric_columns(rows)
    assert columns == ["metrics/mAP50-95", "metrics/precision", "metrics/mAP75",
                       "train/iou_loss"]  # the loss parts after the metrics
    assert [next_column(columns, c) for c in (None, *columns)] == [
        "metrics/mAP50-95", "metrics/precision", "metrics/mAP75", "train/iou_loss",
        "metrics/mAP50-95"]
    assert next_column([], None) is None


def test_a_number_past_a_floats_range_is_no_value_for_the_charts() -> None:
    """A history row may hold an integer of 400 digits (``parse_metrics`` reads it): the
    charts leave it out, as they leave out NaN, and never raise ``OverflowError``."""
    huge = 10 ** 400
    rows = runfiles.parse_metrics(
        f'{{"epoch": 1, "metrics/mAP50": {huge}, "train/loss": 2.0}}\n'
        f'{{"epoch": {huge}, "metrics/mAP50": 0.5, "train/loss": 1.0}}\n'.encode()).rows
    assert latest_columns(rows[0]) == ["train/loss"]
    assert metric_columns(rows) == ["metrics/mAP50"]
    assert series(rows, "metrics/mAP50") == ([2.0], [0.5])  # the epoch unreadable: its row


async def test_a_libreyolo_run_in_the_panes(tmp_path: Path) -> None:
    run = libreyolo_run(tmp_path / "runs")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(MetricsPane)
        await until(pilot, lambda: len(pane.rows) == 4)
        latest = str(pane.query_one("#latest").content)
        assert latest.startswith("epoch 4  mAP50-95 ")
        assert "mAP_large" not in latest and "speed" not in latest and "lr" not in latest
        assert latest.index("precision") < latest.index("loss")
        header = box.query_one(RunHeader)
        await until(pilot, lambda: "metrics/mAP50-95" in
                    header.query_one("#times").text.plain)  # dropped from its status
        assert pane.chosen_metric() == "metrics/mAP50-95"
        await pilot.press("m")
        await until(pilot, lambda: pane.chosen_metric() == "metrics/precision")
        for _ in range(len(metric_columns(pane.rows)) - 1):
            await pilot.press("m")
        await until(pilot, lambda: pane.chosen_metric() == "metrics/mAP50-95")
        # Placeholder columns (always -1.0 on this dataset) are not among the choices.
        assert "metrics/mAP_large" not in metric_columns(pane.rows)


async def test_launch_form_switches_to_libreyolo(tmp_path: Path) -> None:
    run = libreyolo_run(tmp_path / "runs")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm))
        form = app.screen
        model = form.query_one("#f-model", Input)
        assert model.value == "n"
        form.query_one("#engine", Select).value = "libreyolo"
        await until(pilot, lambda: model.value == "yolox-n")
        form.query_one("#f-hub", Input).value = "org/ly"
        form.offline = True
        form.offer_pretrained()

        def preview() -> str:
            return str(form.query_one("#command").content)

        # The preview follows the fields after a refresh: wait for it, not for a time
        # (for both: the box's own Hub check may have offered pretrained=False already).
        await until(pilot, lambda: "pretrained=False" in preview()
                    and "trainer push --watch" in preview())
        assert form.query_one("#f-extra", Input).value == "pretrained=False"
        command = preview()
        assert "libreyolo train model=yolox-n" in command and "pretrained=False" in command
        assert "hub=" not in command and "trainer push --watch" in command
        assert ".gpurent/" in command
        # The box's checks come back after the switch (here: for a new data path, on
        # this GPU-less machine): what a CPU changes is set, the engine's model stays.
        form.query_one("#f-data", Input).value = str(tmp_path / "none" / "data.yaml")
        await until(pilot, lambda: bool(form.doctor_blocks), timeout=120)
        assert form.query_one("#f-device", Input).value == "cpu"
        assert model.value == "yolox-n"
        form.query_one("#engine", Select).value = "trainer"
        await until(pilot, lambda: model.value == "n")
        await pilot.press("escape")
