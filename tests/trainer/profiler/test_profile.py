"""profile: real steps over a dataset that sleeps (dataloader-bound) and over an in-memory
dataset with a heavy model (not); the verdict rules; the command end to end on the shared
shapes dataset."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from tests.fixtures.shapes import TRAIN_IMAGES
from trainer.engine.device import DeviceCaps
from trainer.profiler import command as profile
from trainer.profiler.measure import (
    Batches,
    count_named,
    device_intervals,
    measure_gpu_busy,
    union_length,
)
from trainer.profiler.verdict import Measures, costs, judge, speedup_from_faster_gpu


class SleepyDataset(Dataset):
    """Small images that take 20 ms each to "load"."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(0.02)
        return torch.zeros(3, 16, 16), torch.tensor(index % 2)


def sgd_step(model: nn.Module) -> Callable[[Any], None]:
    """One real training step of ``model`` (forward, loss, backward, update)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def step(batch: tuple[torch.Tensor, torch.Tensor]) -> None:
        images, labels = batch
        loss = nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

    return step


def cpu_setup(loader: DataLoader, model: nn.Module, images: int) -> profile.Setup:
    """A profile ``Setup`` on the CPU around any loader and model."""
    config = {"model": "test", "data": "-", "batch": loader.batch_size, "imgsz": 16,
              "workers": 0, "precision": "fp32", "device": "cpu", "gpu": None, "run_dir": "-"}
    return profile.Setup(loader, sgd_step(model), DeviceCaps("cpu"), config, images)


def test_a_dataset_that_sleeps_is_dataloader_bound() -> None:
    loader = DataLoader(SleepyDataset(), batch_size=4)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 2))
    report = profile.profile_setup(cpu_setup(loader, model, 64), steps=4, warmup=1, price=None)
    assert report["verdict"] == "dataloader"
    assert report["timing"]["data_wait_fraction"] >= 0.2
    main = report["verdicts"][0]
    assert main["faster_gpu"].startswith("No") and any("workers" in x for x in main["levers"])
    # Without a GPU it says what it cannot tell instead of guessing.
    assert {x["name"] for x in report["cannot_tell"]} == {"compute", "host / launch",
                                                          "memory-pressure"}


def test_in_memory_data_with_a_heavy_model_is_not_dataloader_bound() -> None:
    data = TensorDataset(torch.randn(32, 3, 48, 48), torch.randint(0, 2, (32,)))
    loader = DataLoader(data, batch_size=8)
    model = nn.Sequential(
        nn.Conv2d(3, 48, 3, padding=1), nn.ReLU(), nn.Conv2d(48, 48, 3, padding=1), nn.ReLU(),
        nn.Conv2d(48, 48, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(48, 2))
    report = profile.profile_setup(cpu_setup(loader, model, 32), steps=3, warmup=1, price=1.8)
    assert report["verdict"] != "dataloader"
    assert report["verdict"] == "unknown" and "without a GPU" in report["why"]
    assert report["timing"]["data_wait_fraction"] < 0.2
    assert report["timing"]["images"] == 24 and report["timing"]["images_per_second"] > 0
    cost = report["cost"]
    assert cost["steps_per_epoch"] == 4 and cost["cost_per_epoch"] == pytest.approx(
        cost["epoch_seconds"] / 3600 * 1.8)


def test_batches_start_a_new_pass_when_the_loader_ends() -> None:
    batches = Batches([1, 2])
    assert [batches.next() for _ in range(5)] == [1, 2, 1, 2, 1] and batches.passes == 3
    with pytest.raises(ValueError, match="no batches"):
        Batches([]).next()


# --------------------------------------------------------------------------- verdict rules


@pytest.mark.parametrize(("measures", "verdict", "faster"), [
    (Measures(0.100, 0.040, gpu_busy=0.3, alloc_retries=0, peak_memory_fraction=0.5),
     "dataloader", "No"),
    (Measures(0.100, 0.005, gpu_busy=0.92, alloc_retries=0, peak_memory_fraction=0.5),
     "compute", "Yes"),
    (Measures(0.100, 0.005, gpu_busy=0.35, alloc_retries=0, peak_memory_fraction=0.5),
     "host / launch", "Little"),
    (Measures(0.100, 0.050, gpu_busy=0.40, alloc_retries=0, peak_memory_fraction=0.5),
     "dataloader", "No"),
    (Measures(0.100, 0.005, gpu_busy=0.95, alloc_retries=3, peak_memory_fraction=0.6),
     "memory-pressure", "Only a GPU with more memory"),
    (Measures(0.100, 0.005, gpu_busy=0.95, alloc_retries=0, peak_memory_fraction=0.97),
     "memory-pressure", "Only a GPU with more memory"),
    (Measures(0.100, 0.005, gpu_busy=0.5, alloc_retries=0, mallocs_per_step=12.0,
              peak_memory_fraction=0.5), "memory-pressure", "Only a GPU with more memory"),
])
def test_verdict_rules(measures: Measures, verdict: str, faster: str) -> None:
    result = judge(measures)
    assert result["verdict"] == verdict
    assert result["verdicts"][0]["faster_gpu"].startswith(faster)
    assert result["verdicts"][0]["levers"] and result["cannot_tell"] == []


def test_memory_pressure_comes_with_the_other_verdict() -> None:
    result = judge(Measures(0.1, 0.005, gpu_busy=0.9, alloc_retries=2, peak_memory_fraction=0.5))
    assert [v["name"] for v in result["verdicts"]] == ["memory-pressure", "compute"]
    assert result["gpu_2x_speedup"] == pytest.approx(1 / (0.1 + 0.45))


def test_cpu_box_can_tell_dataloader_but_not_compute() -> None:
    told = judge(Measures(0.1, 0.03))
    assert told["verdict"] == "dataloader" and told["gpu_busy_fraction"] is None
    unknown = judge(Measures(0.1, 0.01))
    assert unknown["verdict"] == "unknown" and unknown["verdicts"] == []
    assert {c["name"] for c in unknown["cannot_tell"]} == {"compute", "host / launch",
                                                           "memory-pressure"}


def test_speedup_and_costs() -> None:
    assert speedup_from_faster_gpu(1.0) == 2.0 and speedup_from_faster_gpu(0.0) == 1.0
    cost = costs(images_per_second=100.0, epoch_images=1000, price_per_hour=3.6, batch=16)
    assert cost["steps_per_epoch"] == 63 and cost["epoch_seconds"] == 10.0
    assert cost["cost_per_epoch"] == pytest.approx(0.01)
    assert cost["cost_per_100_epochs"] == pytest.approx(1.0)
    assert costs(100.0, 1000, None, 16)["cost_per_epoch"] is None


def test_union_of_kernel_intervals() -> None:
    assert union_length([(0, 10), (5, 15), (20, 25), (21, 22)]) == 20
    assert union_length([]) == 0


def test_gpu_window_code_path_on_cpu_events() -> None:
    # The CUDA window with the CPU as its "device": the same profiler and event code runs.
    from torch.profiler import ProfilerActivity

    data = TensorDataset(torch.randn(8, 3, 16, 16), torch.randint(0, 2, (8,)))
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 16 * 16, 2))
    window = measure_gpu_busy(Batches(DataLoader(data, batch_size=4)), sgd_step(model),
                              steps=3, sync=lambda: None, activities=[ProfilerActivity.CPU],
                              device="CPU")
    assert window.steps == 3 and window.busy_seconds > 0 and window.kernels > 0
    assert window.cuda_mallocs == 0


def test_profiler_event_extraction_on_real_events() -> None:
    # The GPU window reads torch.profiler events; the same code reads CPU events here.
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.randn(64, 64) @ torch.randn(64, 64)
    events = list(prof.events())
    spans = device_intervals(events, "CPU")
    assert spans and all(end >= start for start, end in spans)
    assert device_intervals(events, "CUDA") == []
    assert count_named(events, ("aten::mm",)) == 1


# --------------------------------------------------------------------------- the command


def test_command_end_to_end_writes_profile_json(shapes_data: Path, tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = profile.main([f"data={shapes_data}", "model=gpdet-n", "batch=2", "imgsz=32",
                         "workers=0", "device=cpu", "epochs=300", f"project={tmp_path}",
                         "name=p", "steps=2", "warmup=0", "price=2.0", "--json"])
    out = capsys.readouterr().out
    assert code == 0
    report = json.loads(out)
    assert report["schema"] == "gpurent.profile/1"
    assert report["verdict"] in ("unknown", "dataloader")
    assert report["config"]["model"] == "gpdet-n" and report["config"]["device"] == "cpu"
    assert report["timing"]["images"] == 4
    assert report["cost"]["epoch_images"] == TRAIN_IMAGES
    assert report["cost"]["price_per_hour"] == 2.0
    written = json.loads((tmp_path / "p" / "profile.json").read_text())
    assert written == report


@pytest.mark.parametrize(("args", "message"), [
    (["steps=0"], "steps='0': must be at least 1"),
    (["price=cheap"], "price='cheap': not a number"),
    (["bogus=1"], "unknown argument 'bogus'"),
    ([], "data= is required"),
])
def test_bad_arguments_exit_2(args: list[str], message: str,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert profile.main([*args, "device=cpu"]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_batch_minus_one_profiles_the_batch_train_would_choose(
        shapes_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainer.engine.autobatch import CPU_DEFAULT_BATCH

    code = profile.main([f"data={shapes_data}", "batch=-1", "imgsz=32", "workers=0",
                         "device=cpu", f"project={tmp_path}", "name=auto", "steps=1",
                         "warmup=0", "--json"])
    assert code == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"]["batch"] == CPU_DEFAULT_BATCH
    assert report["timing"]["images"] == CPU_DEFAULT_BATCH
