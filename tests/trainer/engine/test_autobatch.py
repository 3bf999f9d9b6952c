"""Automatic batch size: the pure search over deterministic memory curves, the table it
logs, the CUDA budget arithmetic, and the memory seam driven by real CPU training steps."""

from __future__ import annotations

import copy
import random
from collections.abc import Callable

import pytest
import torch

from trainer.detector.loss import detection_loss
from trainer.detector.model import build_model
from trainer.engine.autobatch import (
    AutoBatchError,
    BatchChoice,
    Trial,
    format_table,
    measure_with,
    memory_budget,
    search_batch,
    synthetic_batch,
)

GIB = 2**30
BUDGET = int(0.8 * 80 * GIB)


class Counted:
    """A measure from a memory curve ``batch -> GiB`` (``None`` = out of memory) that
    records the batches it was asked for."""

    def __init__(self, curve: Callable[[int], float | None]) -> None:
        self.curve = curve
        self.calls: list[int] = []

    def __call__(self, batch: int) -> int | None:
        self.calls.append(batch)
        gib = self.curve(batch)
        return None if gib is None else int(gib * GIB)


def linear(batch: int) -> float:
    return 1 + 0.5 * batch


def rows(choice: BatchChoice) -> list[tuple[int, bool]]:
    return [(p.batch, p.fits) for p in choice.trials]


# ------------------------------------------------------------------ the pure search


def test_linear_memory_gives_the_largest_power_of_two_in_the_budget() -> None:
    measure = Counted(linear)  # 64 images: 33 GiB, 128: 65 GiB > 64 GiB
    choice = search_batch(measure, BUDGET)
    assert choice.batch == 64
    assert measure.calls == [1, 2, 4, 8, 16, 32, 64, 128]
    assert rows(choice) == [(b, True) for b in measure.calls[:-1]] + [(128, False)]
    assert choice.trials[-1].peak_bytes == 65 * GIB
    assert choice.budget_bytes == BUDGET
    assert choice.reason == ("batch 64 used 33.00 GiB of a 64.00 GiB budget; "
                             "128 needed 65.00 GiB")


def test_super_linear_memory_gives_a_smaller_batch() -> None:
    measure = Counted(lambda b: linear(b) + 0.01 * b * b)  # 32: 27.24 GiB, 64: 73.96 GiB
    choice = search_batch(measure, BUDGET)
    assert choice.batch == 32
    assert measure.calls == [1, 2, 4, 8, 16, 32, 64]
    assert rows(choice)[-2:] == [(32, True), (64, False)]


def test_out_of_memory_stops_below_the_threshold_even_with_budget_left() -> None:
    measure = Counted(lambda b: None if b >= 48 else 1 + 0.1 * b)
    choice = search_batch(measure, BUDGET)
    assert choice.batch == 32
    assert measure.calls == [1, 2, 4, 8, 16, 32, 64]
    assert choice.trials[-1] == Trial(64, None, False)
    assert choice.reason.endswith("; 64 ran out of memory")


def noisy(seed: int) -> Counted:
    rng = random.Random(seed)
    return Counted(lambda b: linear(b) * (1 + rng.uniform(-0.05, 0.05)))


def test_noise_never_picks_a_batch_that_failed_or_one_above_a_failure() -> None:
    budget = int(33.5 * GIB)  # batch 64 (33 GiB before noise) fits or not, by the noise
    chosen = set()
    for seed in range(20):
        choice = search_batch(noisy(seed), budget)
        chosen.add(choice.batch)
        picked = next(p for p in choice.trials if p.batch == choice.batch)
        assert picked.fits and picked.peak_bytes is not None and picked.peak_bytes <= budget
        assert all(p.fits for p in choice.trials[:-1])
        assert not choice.trials[-1].fits and choice.trials[-1].batch == 2 * choice.batch
        again = search_batch(noisy(seed), budget)
        assert again == choice
    assert chosen == {32, 64}


def test_the_limit_caps_the_batch_and_the_probes() -> None:
    measure = Counted(linear)
    choice = search_batch(measure, BUDGET, limit=48)
    assert choice.batch == 32
    assert measure.calls == [1, 2, 4, 8, 16, 32]
    assert all(p.fits for p in choice.trials)
    assert choice.reason.endswith("; 64 is above the limit of 48")


def test_start_is_the_first_probe_and_a_limit_below_it_is_probed_alone() -> None:
    measure = Counted(linear)
    assert search_batch(measure, BUDGET, start=8).batch == 64
    assert measure.calls == [8, 16, 32, 64, 128]
    measure = Counted(linear)
    assert search_batch(measure, BUDGET, start=8, limit=5).batch == 5
    assert measure.calls == [5]
    with pytest.raises(ValueError, match="at least 1"):
        search_batch(linear, BUDGET, limit=0)


@pytest.mark.parametrize(("curve", "failure"), [
    (lambda b: 70.0, "1 needed 70.00 GiB"),
    (lambda b: None, "1 ran out of memory"),
])
def test_batch_one_not_fitting_is_a_one_line_error_naming_the_budget(
        curve: Callable[[int], float | None], failure: str) -> None:
    measure = Counted(curve)
    with pytest.raises(AutoBatchError) as caught:
        search_batch(measure, BUDGET)
    message = str(caught.value)
    assert "\n" not in message
    assert failure in message and "64.00 GiB" in message
    assert measure.calls == [1]


def test_the_table_shows_every_trial_and_its_outcome() -> None:
    over = search_batch(Counted(linear), BUDGET)
    oom = search_batch(Counted(lambda b: None if b >= 4 else 1.0), BUDGET)
    lines = format_table(over)
    assert len(lines) == 1 + len(over.trials) + 1
    assert lines[1].split() == ["1", "1.50", "fits"]
    assert lines[-2].split() == ["128", "65.00", "over", "budget"]
    assert lines[-1] == over.reason
    assert format_table(oom)[-2].split() == ["4", "-", "out", "of", "memory"]


def test_cuda_budget_subtracts_other_processes_and_is_never_negative() -> None:
    total = 80 * GIB
    assert memory_budget(total, total, 0, 0.8) == int(0.8 * total)
    # 10 GiB reserved by this process does not count against it; 6 GiB of others does.
    assert memory_budget(total, 64 * GIB, 10 * GIB, 0.8) == int(0.8 * total) - 6 * GIB
    assert memory_budget(total, 0, 0, 0.8) == 0


# ------------------------------------------------------------------ the memory seam


class FakeOutOfMemory(RuntimeError):
    """What the CPU trial raises where a GPU would run out of memory."""


class FormulaMeter:
    """A :class:`trainer.engine.autobatch.MemoryMeter` whose peak is a formula of the batch the
    trial last ran and whose out-of-memory error is :class:`FakeOutOfMemory`; it records
    what was called."""

    def __init__(self) -> None:
        self.batch = 0
        self.events: list[str] = []

    def budget(self, fraction: float) -> int:
        return int(fraction * 10 * GIB)

    def reset(self) -> None:
        self.events.append("reset")

    def peak(self) -> int:
        self.events.append("peak")
        return GIB + self.batch * GIB // 2

    def release(self) -> None:
        self.events.append("release")

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, FakeOutOfMemory)


IMGSZ, NC = 64, 2
CPU = torch.device("cpu")


def training_trial(model: torch.nn.Module, meter: FormulaMeter, *, oom_from: int,
                   channels: int = 3) -> Callable[[int], None]:
    """One real training step of a copy of ``model`` at the given batch; from ``oom_from``
    images on it raises :class:`FakeOutOfMemory` after the forward pass."""
    def trial(batch: int) -> None:
        meter.batch = batch
        meter.events.append(f"trial {batch}")
        probe = copy.deepcopy(model).train()
        optimizer = torch.optim.AdamW(probe.parameters(), lr=1e-3)
        images, targets = synthetic_batch(batch, IMGSZ, NC, 3, CPU)
        logits, raw = probe(images[:, :channels])
        if batch >= oom_from:
            raise FakeOutOfMemory(f"batch {batch} does not fit")
        points, strides = probe.anchors(IMGSZ, CPU)
        loss, _ = detection_loss(logits, raw, targets, points, strides)
        loss.backward()
        optimizer.step()
    return trial


def test_synthetic_batch_is_deterministic_and_in_the_loss_format() -> None:
    images, targets = synthetic_batch(4, IMGSZ, NC, 5, CPU)
    assert images.shape == (4, 3, IMGSZ, IMGSZ) and images.dtype == torch.float32
    assert images.min() >= 0 and images.max() <= 1
    assert targets.shape == (20, 6)
    assert targets[:, 0].tolist() == [i for i in range(4) for _ in range(5)]
    assert set(targets[:, 1].tolist()) <= {0.0, 1.0}
    x0, y0, x1, y1 = targets[:, 2:].T
    assert bool(((x1 > x0 + 1) & (y1 > y0 + 1)).all())
    assert bool(((x0 >= 0) & (y0 >= 0) & (x1 <= IMGSZ) & (y1 <= IMGSZ)).all())
    again = synthetic_batch(4, IMGSZ, NC, 5, CPU)
    assert torch.equal(images, again[0]) and torch.equal(targets, again[1])


def test_real_training_steps_through_the_seam_choose_the_batch_and_leave_the_model() -> None:
    torch.manual_seed(0)
    model = build_model("n", nc=NC, imgsz=IMGSZ)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    meter = FormulaMeter()
    measure = measure_with(training_trial(model, meter, oom_from=4), meter)
    choice = search_batch(measure, meter.budget(0.8), limit=8)
    assert choice.batch == 2
    assert rows(choice) == [(1, True), (2, True), (4, False)]
    assert choice.trials[-1].peak_bytes is None
    assert meter.events == ["reset", "trial 1", "peak", "release",
                            "reset", "trial 2", "peak", "release",
                            "reset", "trial 4", "release"]
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_an_error_that_is_not_out_of_memory_propagates_after_the_release() -> None:
    meter = FormulaMeter()
    model = build_model("n", nc=NC, imgsz=IMGSZ)
    # Two channels instead of three: a real error from the first convolution.
    measure = measure_with(training_trial(model, meter, oom_from=99, channels=2), meter)
    with pytest.raises(RuntimeError) as caught:
        measure(1)
    assert not isinstance(caught.value, FakeOutOfMemory)
    assert meter.events == ["reset", "trial 1", "release"]


class GrowingMeter:
    """Each probe peaks one GiB above the last: 1, 2, 3, 4... GiB for batch 1, 2, 4, 8."""

    def __init__(self) -> None:
        self.probes = 0

    def budget(self, fraction: float) -> int:
        return int(fraction * 4.375 * GIB)  # 0.8 of it: 3.5 GiB

    def reset(self) -> None:
        self.probes += 1

    def peak(self) -> int:
        return self.probes * GIB

    def release(self) -> None:
        pass

    def is_oom(self, exc: BaseException) -> bool:
        return isinstance(exc, FakeOutOfMemory)


def test_the_engines_probe_trains_copies_at_growing_batches(
        caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from trainer.engine.device import DeviceCaps, choose_precision
    from trainer.engine.loop import choose_batch

    torch.manual_seed(0)
    model = build_model("n", NC, IMGSZ)
    before = copy.deepcopy(model.state_dict())
    batches: list[int] = []
    # Copies keep the hook: it sees the batch of every real step the probe runs.
    model.register_forward_pre_hook(lambda _m, inputs: batches.append(len(inputs[0])))
    caps = DeviceCaps("cpu")
    log = logging.getLogger("test.autobatch")
    caplog.set_level(logging.INFO, logger=log.name)
    choice = choose_batch(model, caps, choose_precision(caps), IMGSZ, NC, 3, 0.8, 64, log,
                          meter=GrowingMeter())
    assert choice is not None and choice.batch == 4
    assert batches == [1, 2, 4, 8]
    assert [p.fits for p in choice.trials] == [True, True, True, False]
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert caplog.messages[-1].startswith("batch=-1: batch 4 used 3.00 GiB of a 3.50 GiB")
    # Without a meter, the CPU has no memory to fit: the default, and the log says why.
    assert choose_batch(model, caps, choose_precision(caps), IMGSZ, NC, 3, 0.8, 64, log) is None
    assert "no GPU memory to fit" in caplog.messages[-1]
