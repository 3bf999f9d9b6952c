"""Callbacks and the Python API, with real (tiny) training runs in this process."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from trainer import Trainer
from trainer.engine.callbacks import EVENTS, CallbackContext, CallbackError, Callbacks, load_spec
from trainer.runfiles import read_status

TINY = {"imgsz": 64, "workers": 0, "seed": 0, "batch": 8, "project": "runs"}


class Recorder:
    """Remembers every event with the fields a callback would use."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    def hooks(self) -> dict[str, Any]:
        return {event: (lambda ctx, e=event: self.seen.append((e, self.fields(ctx))))
                for event in EVENTS}

    @staticmethod
    def fields(ctx: CallbackContext) -> dict[str, Any]:
        return {"epoch": ctx.epoch, "metrics": dict(ctx.metrics), "state": ctx.state,
                "row": ctx.row, "error": ctx.error, "rank": ctx.rank, "is_main": ctx.is_main,
                "model": ctx.model is not None, "ema": ctx.ema is not None,
                "run_dir": ctx.run_dir}


def test_events_come_in_order_with_what_they_describe(shapes_data: Path, in_tmp: Path) -> None:
    recorder = Recorder()
    result = Trainer("gpdet-n", callbacks=recorder.hooks()).train(
        data=shapes_data, epochs=2, name="cb", **TINY)
    assert result.ok and result.state == "completed" and result.error is None
    assert result.run_dir == Path("runs/cb") and result.best is not None
    assert result.summary["completed_epochs"] == 2
    assert [e for e, _ in recorder.seen] == [
        "on_train_start", "on_val_end", "on_train_epoch_end", "on_val_end",
        "on_train_epoch_end", "on_train_end"]
    start, val1, end1, _, end2, final = (f for _, f in recorder.seen)
    assert start["epoch"] is None and start["model"] and start["ema"] and start["is_main"]
    assert val1["epoch"] == 1 and set(val1["metrics"]) == {
        "precision", "recall", "mAP50", "mAP50-95"}
    assert end1["row"]["epoch"] == 1 and end2["row"]["epoch"] == 2
    assert end2["row"]["metrics/mAP50-95"] == end2["metrics"]["mAP50-95"]
    assert final["state"] == "completed" and final["epoch"] == 2 and final["error"] is None
    assert final["run_dir"] == result.run_dir


def test_a_raising_callback_is_logged_and_training_goes_on(
        shapes_data: Path, in_tmp: Path) -> None:
    def broken(ctx: CallbackContext) -> None:
        raise RuntimeError(f"boom in epoch {ctx.epoch}")

    def leaving(ctx: CallbackContext) -> None:
        sys.exit(3)

    trainer = Trainer("n")
    trainer.add_callback("on_train_epoch_end", broken)
    trainer.add_callback("on_train_start", leaving)
    result = trainer.train(data=shapes_data, epochs=2, name="broken", **TINY)
    assert result.state == "completed" and read_status(result.run_dir).get("completed_epochs") == 2
    log = (result.run_dir / "train.log").read_text()
    assert log.count("raised; training goes on") == 3
    assert "RuntimeError: boom in epoch 1" in log and "RuntimeError: boom in epoch 2" in log
    assert "SystemExit: 3" in log


def test_a_failed_run_calls_on_train_exception_then_on_train_end(
        shapes_data: Path, in_tmp: Path) -> None:
    data = in_tmp / "data"
    shutil.copytree(shapes_data.parent, data)
    for image in (data / "images/val").glob("*.png"):
        image.write_bytes(b"garbage")
    recorder = Recorder()
    result = Trainer("n", callbacks=recorder.hooks()).train(
        data=data / "data.yaml", epochs=2, name="fails", **TINY)
    assert not result.ok and result.exit_code == 1 and result.state == "failed"
    assert result.error["type"] == "DataError"
    assert [e for e, _ in recorder.seen] == ["on_train_start", "on_train_exception",
                                             "on_train_end"]
    error = recorder.seen[1][1]["error"]
    assert type(error).__name__ == "DataError" and "cannot read image" in str(error)
    assert recorder.seen[2][1]["state"] == "failed"
    assert recorder.seen[2][1]["error"] is error


def test_api_errors_are_one_line_value_errors_before_any_run(
        shapes_data: Path, in_tmp: Path) -> None:
    with pytest.raises(ValueError, match="epochs='0': must be at least 1"):
        Trainer().train(data=shapes_data, epochs=0)
    with pytest.raises(ValueError, match="give the model to Trainer"):
        Trainer().train(data=shapes_data, model="s")
    with pytest.raises(ValueError, match="unknown argument 'colour'"):
        Trainer().train(data=shapes_data, colour="red")
    with pytest.raises(CallbackError, match="unknown callback event 'on_epoch'"):
        Trainer().add_callback("on_epoch", print)
    # Several workers import callbacks by name: a lambda cannot travel.
    trainer = Trainer()
    trainer.add_callback("on_train_end", lambda ctx: None)
    with pytest.raises(CallbackError, match="module-level functions"):
        trainer.train(data=shapes_data, device="cpu", nproc=2, batch=8)
    assert not (in_tmp / "runs").exists()


def test_api_values_become_the_cli_keys(shapes_data: Path, in_tmp: Path) -> None:
    result = Trainer(Path("n")).train(data=str(shapes_data), epochs=1, name="types",
                                      exist_ok=True, hub=None, device="cpu", amp=False,
                                      **{k: v for k, v in TINY.items() if k != "batch"},
                                      batch=-1)
    summary = result.summary
    assert summary["args"]["exist_ok"] is True and summary["args"]["hub"] is None
    # batch=-1 on the CPU: the documented default, and the log says why.
    assert summary["batch"] == 16 and summary["autobatch"] is None
    assert summary["peak_memory_bytes"] is None
    assert read_status(result.run_dir).get("batch") == 16
    log = (result.run_dir / "train.log").read_text()
    assert "batch=-1: training on the CPU, where there is no GPU memory to fit" in log
    assert json.loads((result.run_dir / "summary.json").read_text())["args"]["batch"] == -1


@pytest.fixture
def callback_module(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    """An importable module ``cbmod`` with event functions, a dict, an object and a
    plain function."""
    module = types.ModuleType("cbmod")

    def on_train_start(ctx: Any) -> None: ...
    def on_train_end(ctx: Any) -> None: ...
    def plain(ctx: Any) -> None: ...

    class Hooks:
        def on_val_end(self, ctx: Any) -> None: ...

    module.on_train_start, module.on_train_end, module.plain = on_train_start, on_train_end, plain
    module.table = {"on_val_end": [plain, plain], "on_train_exception": plain}
    module.hooks = Hooks()
    module.nothing = 42
    monkeypatch.setitem(sys.modules, "cbmod", module)
    return module


def counts(callbacks: Callbacks) -> dict[str, int]:
    """How many callbacks each event has."""
    return {event: len(found) for event, found in callbacks.registered.items() if found}


def test_callback_specs(callback_module: types.ModuleType) -> None:
    assert counts(load_spec("cbmod")) == {"on_train_start": 1, "on_train_end": 1}
    assert counts(load_spec("cbmod:table")) == {"on_val_end": 2, "on_train_exception": 1}
    assert counts(load_spec("cbmod:hooks")) == {"on_val_end": 1}
    assert counts(load_spec("cbmod:plain")) == {"on_train_epoch_end": 1}
    assert counts(load_spec("cbmod:hooks, cbmod:plain")) == {"on_val_end": 1,
                                                             "on_train_epoch_end": 1}


@pytest.mark.parametrize(("spec", "message"), [
    ("no_such_module_xyz:f", "cannot import 'no_such_module_xyz' (ModuleNotFoundError"),
    ("cbmod:missing", "cbmod has no 'missing'"),
    ("cbmod:nothing", "found none of on_train_start"),
])
def test_bad_callback_specs_are_one_line_errors(callback_module: types.ModuleType, spec: str,
                                                message: str) -> None:
    with pytest.raises(CallbackError) as info:
        load_spec(spec)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_bad_callbacks_argument_stops_train_before_a_run_directory(
        shapes_data: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainer.engine.command import main

    assert main([f"data={shapes_data}", "callbacks=no_such_module_xyz", "workers=0"]) == 2
    assert "train: callbacks=no_such_module_xyz: cannot import" in capsys.readouterr().err
    assert not (in_tmp / "runs").exists()
