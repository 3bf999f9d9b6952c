"""Trainer pieces on their own: the device seam (the CUDA choices, taken on a CPU), the
key=value arguments, run-directory naming and history, the loss and the model family."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.fixtures.paths import ROOT
from trainer.detector.loss import detection_loss, pad_targets
from trainer.detector.model import SIZES, ModelError, build_model, parameter_count, parse_model_name
from trainer.engine.device import (
    DeviceCaps,
    DeviceError,
    Precision,
    choose_precision,
    cpu_threads,
    loader_share,
    memory_format,
    parse_device,
    probe,
    to_device,
)
from trainer.engine.plan import UsageError, parse_args
from trainer.engine.rundir import RunDirError, choose_run_dir
from trainer.runfiles import RunWriter, trim_history

GPU_BF16 = DeviceCaps("cuda", 0, bf16=True, names=("H100",))
GPU_OLD = DeviceCaps("cuda", 0, bf16=False, names=("T4",))
CPU = DeviceCaps("cpu")


# ------------------------------------------------------------------ the device seam


def test_precision_is_bf16_where_supported_else_fp16_with_a_scaler() -> None:
    assert choose_precision(GPU_BF16) == Precision("cuda", torch.bfloat16, False)
    assert choose_precision(GPU_OLD) == Precision("cuda", torch.float16, True)
    assert choose_precision(CPU) == Precision("cpu", None, False)
    assert choose_precision(GPU_BF16, amp=False).dtype is None
    assert [choose_precision(c).label for c in (GPU_BF16, GPU_OLD, CPU)] == \
        ["bf16", "fp16", "fp32"]


def test_channels_last_on_cuda_only() -> None:
    assert memory_format(GPU_BF16) == torch.channels_last
    assert memory_format(CPU) == torch.contiguous_format


def test_cpu_training_threads_leave_cores_to_the_loader() -> None:
    assert cpu_threads(2, 0, {}) == 2
    assert cpu_threads(2, 1, {}) == 1
    assert cpu_threads(16, 8, {}) == 8
    assert cpu_threads(2, 8, {}) == 1
    assert cpu_threads(2, 0, {"OMP_NUM_THREADS": "1"}) is None


def test_train_and_profile_share_the_host_alike() -> None:
    # workers=8 on a 2-core box: 2 loader workers and 1 thread, as the run will have.
    assert loader_share(8, CPU, cpu_count=2, env={}) == (2, 1)
    assert loader_share(8, CPU, world_size=2, cpu_count=16, env={}) == (8, 1)
    assert loader_share(0, CPU, cpu_count=4, env={}) == (0, 4)
    assert loader_share(8, GPU_BF16, cpu_count=4, env={}) == (4, None)


@pytest.mark.parametrize(("text", "parsed"), [
    ("", ("auto", ())), ("cpu", ("cpu", ())), ("0", ("cuda", (0,))),
    ("0,1", ("cuda", (0, 1))), ("cuda:1", ("cuda", (1,))), ("CUDA", ("cuda", (0,))),
])
def test_device_values_parse(text: str, parsed: tuple) -> None:
    assert parse_device(text) == parsed


@pytest.mark.parametrize("text", ["gpu0", "-1", "0,x", "cuda:"])
def test_bad_device_values_are_refused(text: str) -> None:
    with pytest.raises(DeviceError, match="use cpu, 0"):
        parse_device(text)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a GPU-less box")
def test_asking_for_a_gpu_on_a_cpu_box_is_a_one_line_error() -> None:
    with pytest.raises(DeviceError, match="torch sees none") as info:
        probe("0")
    assert "\n" not in str(info.value)
    assert probe("").kind == "cpu"


@pytest.mark.parametrize("precision", [
    Precision("cpu", torch.bfloat16, False),  # the bf16 autocast path, on the CPU
    Precision("cpu", torch.float16, True),  # fp16 autocast with the gradient scaler
])
def test_amp_train_step_through_the_seam(precision: Precision) -> None:
    torch.manual_seed(0)
    model = build_model("n", 2, 32).to(memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = precision.scaler()
    assert scaler.is_enabled() == precision.use_scaler
    images = torch.randint(0, 255, (2, 3, 32, 32), dtype=torch.uint8)
    targets = torch.tensor([[0, 1, 2, 2, 20, 20], [1, 0, 5, 10, 15, 30]], dtype=torch.float)
    images, targets = to_device(images, targets, CPU, torch.channels_last)
    assert images.dtype == torch.float32 and images.max() <= 1.0
    assert images.is_contiguous(memory_format=torch.channels_last)
    before = [p.detach().clone() for p in model.parameters()]
    points, strides = model.anchors(32, images.device)
    with precision.autocast():
        logits, raw = model(images)
    assert logits.dtype == precision.dtype
    loss, parts = detection_loss(logits, raw, targets, points, strides)
    assert torch.isfinite(loss) and parts.shape == (2,)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    changed = any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    if precision.use_scaler:
        # fp16: the scaler starts at 2**16, so this loss overflows fp16 gradients: the step
        # is skipped and the scale backs off (without a scaler it would write inf weights).
        assert not changed and scaler.get_scale() == 2.0**15
    else:
        assert changed


# ------------------------------------------------------------------ arguments


def test_key_value_arguments_parse_with_types() -> None:
    args, given = parse_args(["model=s", "data=d.yaml", "epochs=5", "batch=4", "imgsz=96",
                              "exist_ok=True", "resume=False", "lr0=0.01", "hub=org/name",
                              "hub_period=2", "device=cpu", "nproc=2",
                              "batch_fraction=0.5", "callbacks=a.b:c"])
    assert (args.model, args.epochs, args.batch, args.imgsz) == ("s", 5, 4, 96)
    assert args.exist_ok is True and args.resume is False and args.lr0 == 0.01
    assert args.hub == "org/name" and args.hub_period == 2
    assert (args.nproc, args.batch_fraction, args.callbacks) == (2, 0.5, "a.b:c")
    assert given == {"model", "data", "epochs", "batch", "imgsz", "exist_ok", "resume", "lr0",
                     "hub", "hub_period", "device", "nproc", "batch_fraction", "callbacks"}
    assert parse_args(["batch=-1"])[0].batch == -1
    assert parse_args(["resume=runs/a/weights/last.pt"])[0].resume == "runs/a/weights/last.pt"


@pytest.mark.parametrize(("argv", "message"), [
    (["epochs=0"], "epochs='0': must be at least 1"),
    (["epochs=ten"], "epochs='ten': not a number"),
    (["imgsz=100"], "multiple of 32"),
    (["batch=0"], "must be at least 1, or -1 for the largest that fits"),
    (["batch=-2"], "must be at least 1, or -1"),
    (["batch_fraction=0.99"], "between 0.1 and 0.95"),
    (["nproc=-1"], "must be at least 0"),
    (["lr0=nan"], "lr0='nan'"),
    (["exist_ok=maybe"], "expected True or False"),
    (["hub=justaname"], "expected ORG/NAME"),
    (["name=a/b"], "plain folder name"),
    (["colour=red"], "unknown argument 'colour'"),
    (["epochs"], "expected key=value"),
    (["epochs=1", "epochs=2"], "given twice"),
])
def test_bad_arguments_are_one_line_errors(argv: list[str], message: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_args(argv)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_train_help_and_arguments_do_not_import_torch() -> None:
    code = ("import sys, trainer.engine.plan, trainer.engine.command, trainer.datasets.shapes,"
            " trainer.detector.evaluate, trainer.runfiles\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


# ------------------------------------------------------------------ model family


def test_model_names_and_sizes() -> None:
    assert [parse_model_name(n) for n in ("n", "gpdet-s", "GPDET_m", "gpdetn")] == \
        ["n", "s", "m", "n"]
    with pytest.raises(ModelError, match="unknown model 'yolo11n'"):
        parse_model_name("yolo11n")
    counts = [parameter_count(build_model(size, 3)) for size in SIZES]
    assert counts == sorted(counts) and len(set(counts)) == 3
    model = build_model("n", 3, 96).eval()
    logits, raw = model(torch.zeros(2, 3, 96, 96))
    anchors = sum((96 // s) ** 2 for s in (8, 16, 32))
    assert logits.shape == (2, anchors, 3) and raw.shape == (2, anchors, 4)
    boxes, scores = model.decode(logits, raw, 96)
    assert boxes.min() >= 0 and boxes.max() <= 96 and scores.max() < 0.2  # prior bias


# ------------------------------------------------------------------ the loss


def test_targets_pad_per_image() -> None:
    targets = torch.tensor([[1, 2, 0, 0, 5, 5], [0, 1, 1, 1, 4, 4], [1, 0, 2, 2, 9, 9.0]])
    cls, boxes, mask = pad_targets(targets, 3)
    assert cls.tolist() == [[1, 0], [2, 0], [0, 0]]
    assert mask.tolist() == [[True, False], [True, True], [False, False]]
    assert boxes[1, 1].tolist() == [2, 2, 9, 9]


def test_loss_falls_when_the_model_fits_one_image(in_tmp: Path) -> None:
    # One torch thread (``in_tmp``), as the runs get on a shared machine: with more
    # OpenMP threads than free cores each barrier spins (``cpu_threads``), and on a busy
    # machine these 25 steps ran past the 300 s timeout.
    torch.manual_seed(0)
    model = build_model("n", 2, 64)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.003)
    images = torch.zeros(1, 3, 64, 64)
    images[:, 0, 10:40, 12:44] = 1.0
    targets = torch.tensor([[0, 1, 12, 10, 44, 40.0]])
    points, strides = model.anchors(64, images.device)
    losses = []
    for _ in range(25):
        logits, raw = model(images)
        loss, _ = detection_loss(logits, raw, targets, points, strides)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]
    # An image without boxes has a class loss only.
    logits, raw = model(images)
    _, parts = detection_loss(logits, raw, torch.zeros(0, 6), points, strides)
    assert parts[0] == 0 and parts[1] > 0


# ------------------------------------------------------------------ run directories


def write_status(run: Path, **fields) -> None:
    """A status.json with the given fields."""
    RunWriter(run).write_status(fields)


def test_run_names_increment_like_libreyolo(tmp_path: Path) -> None:
    project = tmp_path / "runs"
    assert choose_run_dir(str(project), "exp", False) == project / "exp"
    write_status(project / "exp", state="completed", pid=1)
    assert choose_run_dir(str(project), "exp", False) == project / "exp2"
    write_status(project / "exp2", state="failed", pid=1)
    assert choose_run_dir(str(project), "exp", False) == project / "exp3"
    assert choose_run_dir(str(project), "exp", True) == project / "exp"
    # A folder made for console.log by the launcher holds no run yet: it is used as is.
    (project / "fresh").mkdir()
    (project / "fresh" / "console.log").write_text("")
    assert choose_run_dir(str(project), "fresh", False) == project / "fresh"


def test_a_live_run_is_never_reused(tmp_path: Path) -> None:
    project = tmp_path / "runs"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        write_status(project / "live", state="running", pid=sleeper.pid)
        assert choose_run_dir(str(project), "live", False) == project / "live2"
        with pytest.raises(RunDirError, match=f"holds a live run \\(pid {sleeper.pid}\\)"):
            choose_run_dir(str(project), "live", True)
    finally:
        sleeper.kill()
        sleeper.wait()
    # Its pid gone, the same directory is a dead run and exist_ok may take it.
    assert choose_run_dir(str(project), "live", True) == project / "live"


def test_trim_history_keeps_rows_up_to_the_checkpoint(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    for epoch in (1, 2, 3):
        writer.append_metrics({"epoch": epoch, "train/loss": 1.0 / epoch})
    with open(tmp_path / "metrics.jsonl", "ab") as fh:
        fh.write(b'{"epoch": 4, "train/lo')  # torn by a crash mid-write
    assert trim_history(tmp_path, 2) == 1
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]
    csv_rows = (tmp_path / "results.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in csv_rows] == ["epoch", "1", "2"]


def test_a_loader_workers_error_becomes_one_line() -> None:
    from trainer.datasets.loader import DataError
    from trainer.engine.report import error_message

    # What torch's DataLoader raises in the main process for an error in a worker.
    relayed = DataError("Caught DataError in DataLoader worker process 0.\n"
                        "Original Traceback (most recent call last):\n"
                        '  File "x.py", line 1, in f\n'
                        "trainer.datasets.loader.DataError: cannot read image /d/a.png: bad\n")
    assert error_message(relayed) == "cannot read image /d/a.png: bad"
    assert error_message(ValueError("plain message")) == "plain message"
    assert error_message(RuntimeError()) == "RuntimeError"


# ------------------------------------------------------------------ early signals


def test_a_signal_before_training_is_acted_on_when_training_starts() -> None:
    import logging
    import os
    import signal

    from trainer.engine.stopping import EarlySignals, GracefulStop

    before = signal.getsignal(signal.SIGTERM)
    with EarlySignals() as early:
        os.kill(os.getpid(), signal.SIGTERM)
        assert early.received == [signal.SIGTERM]
        stop = GracefulStop(logging.getLogger("test.early"))
        stop.install()
        assert stop.requested and stop.signum == signal.SIGTERM
        stop.restore()
        assert signal.getsignal(signal.SIGTERM) is early
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_second_signal_before_training_exits_at_once() -> None:
    """At least REPEAT_SECONDS after the first (the clock is the handler's: no sleeps);
    sooner it repeats the stop (``test_a_repeated_stop_does_not_throw_away_the_save``)."""
    code = ("import os, signal, time\n"
            "from trainer.engine.stopping import EarlySignals\n"
            "clock = iter([100.0, 101.5, 110.0]).__next__\n"
            "with EarlySignals(clock=clock) as early:\n"
            "    os.kill(os.getpid(), signal.SIGINT)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    print('kept', early.received, flush=True)\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n"
            "    time.sleep(5)\n"
            "print('still here')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 128 + 15 and "still here" not in out.stdout
    assert f"kept [{int(signal.SIGINT)}]" in out.stdout  # the repeat at 1.5 s did not exit


def test_a_repeated_stop_does_not_throw_away_the_save() -> None:
    """A second stop 1.5 s after the first (a double press, `gpurent stop` twice) is the
    same stop: the run goes on to its final save; one 10 s later forces the exit."""
    code = ("import logging, os, signal, sys\n"
            "from trainer.engine.stopping import GracefulStop\n"
            "logging.basicConfig(stream=sys.stdout, level=logging.INFO, "
            "format='%(message)s')\n"
            "clock = iter([100.0, 101.5, 110.0]).__next__\n"
            "stop = GracefulStop(logging.getLogger('t'), on_force=lambda s: print("
            "'forced', flush=True), clock=clock)\n"
            "stop.install()\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "print('saving last.pt', stop.requested, flush=True)\n"
            "os.kill(os.getpid(), signal.SIGTERM)\n"
            "print('not reached')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert "SIGTERM again 1.5s after the first: already stopping" in out.stdout
    assert "saving last.pt True" in out.stdout
    assert out.returncode == 128 + 15 and "forced" in out.stdout
    assert "not reached" not in out.stdout
