"""Automatic batch size (``batch=-1``): the largest power of two whose training step fits.

The search is pure: it takes a :data:`Measure` (batch -> peak bytes, ``None`` for out of
memory) and a budget, and tries ``start``, ``2 * start``, ... up to ``limit``, stopping at
the first failure. Only batches below that failure can be chosen, so noise in the
measurements can only make the choice smaller, never pick a size that failed.

A device's memory enters through :class:`MemoryMeter`; :class:`CudaMemory` is the CUDA one,
and :func:`measure_with` turns a training step at a given batch into a :data:`Measure`.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass
from typing import Optional, Protocol

import torch

#: Batch used when there is no GPU memory to fit (CPU training).
CPU_DEFAULT_BATCH = 16
#: Largest batch the search tries, per device.
MAX_BATCH = 1024

#: batch -> peak bytes of a training step at that batch, or ``None`` when it ran out of memory.
Measure = Callable[[int], Optional[int]]

_GIB = 2**30


class AutoBatchError(ValueError):
    """No batch fits (one-line message), e.g. even batch 1 does not fit."""


@dataclass(frozen=True)
class Trial:
    """One row of the trial table; ``peak_bytes`` is ``None`` when it ran out of memory."""

    batch: int
    peak_bytes: int | None
    fits: bool


@dataclass(frozen=True)
class BatchChoice:
    """The chosen batch, the budget it was fitted to, every trial and a one-line reason."""

    batch: int
    budget_bytes: int
    trials: tuple[Trial, ...]
    reason: str


def _gib(n: int) -> str:
    return f"{n / _GIB:.2f} GiB"


def _outcome(trial: Trial) -> str:
    if trial.fits:
        return "fits"
    return "out of memory" if trial.peak_bytes is None else "over budget"


def _failure(trial: Trial) -> str:
    if trial.peak_bytes is None:
        return f"{trial.batch} ran out of memory"
    return f"{trial.batch} needed {_gib(trial.peak_bytes)}"


def search_batch(measure: Measure, budget_bytes: int, *, limit: int = MAX_BATCH,
                 start: int = 1) -> BatchChoice:
    """Try ``start``, ``2 * start``, ... (at most ``limit``) until one runs out of memory or
    peaks above ``budget_bytes``; choose the largest that fitted.

    ``limit`` is a hard cap (e.g. the training images per device): when it is below
    ``start``, ``limit`` alone is tried. Raises :class:`AutoBatchError` when the first
    trial does not fit."""
    if start < 1 or limit < 1:
        raise ValueError(f"start and limit must be at least 1, got start={start}, "
                         f"limit={limit}")
    trials: list[Trial] = []
    batch = min(start, limit)
    while batch <= limit:
        peak = measure(batch)
        fits = peak is not None and peak <= budget_bytes
        trials.append(Trial(batch, peak, fits))
        if not fits:
            break
        batch *= 2
    *fitted, last = trials
    if not last.fits and not fitted:
        raise AutoBatchError(f"even batch {last.batch} does not fit: "
                             f"{_failure(last)}, the budget is {_gib(budget_bytes)}")
    if last.fits:
        chosen, why_not_more = last, f"{last.batch * 2} is above the limit of {limit}"
    else:
        chosen, why_not_more = fitted[-1], _failure(last)
    assert chosen.peak_bytes is not None  # it fitted
    reason = (f"batch {chosen.batch} used {_gib(chosen.peak_bytes)} of a "
              f"{_gib(budget_bytes)} budget; {why_not_more}")
    return BatchChoice(chosen.batch, budget_bytes, tuple(trials), reason)


def format_table(choice: BatchChoice) -> list[str]:
    """The trial table for the log (batch, peak memory in GiB, outcome), then the reason."""
    lines = [f"{'batch':>6}  {'peak GiB':>9}  result"]
    for trial in choice.trials:
        peak = "-" if trial.peak_bytes is None else f"{trial.peak_bytes / _GIB:.2f}"
        lines.append(f"{trial.batch:>6}  {peak:>9}  {_outcome(trial)}")
    lines.append(choice.reason)
    return lines


class MemoryMeter(Protocol):
    """The seam between the search and a device's memory."""

    def budget(self, fraction: float) -> int:
        """Bytes the trials may use."""
        ...

    def reset(self) -> None:
        """Prepare a trial: free cached memory and reset the peak statistics."""
        ...

    def peak(self) -> int:
        """Peak bytes since the last :meth:`reset`."""
        ...

    def release(self) -> None:
        """Free what a trial left behind (also after running out of memory)."""
        ...

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the device ran out of memory."""
        ...


def memory_budget(total: int, free: int, reserved_by_us: int, fraction: float) -> int:
    """``fraction`` of ``total`` bytes less what other processes use (the memory that is
    neither free nor reserved by this process's allocator); never negative."""
    others = max(0, total - free - reserved_by_us)
    return max(0, int(fraction * total) - others)


class CudaMemory:
    """:class:`MemoryMeter` for one CUDA device, from ``torch.cuda``'s allocator statistics."""

    def __init__(self, device: torch.device | int) -> None:
        self.device = device

    def budget(self, fraction: float) -> int:
        """``fraction`` of the device's memory less what other processes use."""
        free, total = torch.cuda.mem_get_info(self.device)
        return memory_budget(total, free, torch.cuda.memory_reserved(self.device), fraction)

    def reset(self) -> None:
        """Collect garbage, empty the allocator's cache and reset its peak statistics."""
        gc.collect()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        """Peak bytes reserved by the allocator since :meth:`reset`: what it held, cached
        blocks included, so fragmentation counts against the budget."""
        return torch.cuda.max_memory_reserved(self.device)

    def release(self) -> None:
        """Same as :meth:`reset`."""
        self.reset()

    def is_oom(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a CUDA out-of-memory error."""
        return isinstance(exc, torch.OutOfMemoryError)


def _ran_out_of_memory(trial: Callable[[int], None], batch: int, meter: MemoryMeter) -> bool:
    try:
        trial(batch)
    except Exception as exc:
        if meter.is_oom(exc):
            return True
        raise
    return False


def measure_with(trial: Callable[[int], None], meter: MemoryMeter) -> Measure:
    """A :data:`Measure` that runs ``trial(batch)`` (a training step at ``batch``) between
    ``meter.reset()`` and ``meter.release()`` and returns ``meter.peak()``, or ``None`` when
    the trial ran out of memory. Other errors propagate, after the release."""
    def measure(batch: int) -> int | None:
        meter.reset()
        try:
            # The OOM is caught in a helper whose frame, and so the traceback holding the
            # step's tensors, is gone before the release frees their memory.
            peak = None if _ran_out_of_memory(trial, batch, meter) else meter.peak()
        finally:
            meter.release()
        return peak
    return measure


def synthetic_batch(batch: int, imgsz: int, nc: int, boxes_per_image: int,
                    device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """A deterministic batch as the loss expects it: images ``(batch, 3, imgsz, imgsz)`` float
    in ``[0, 1]`` and ``(batch * boxes_per_image, 6)`` targets ``image class x0 y0 x1 y1`` in
    pixels, with classes in ``[0, nc)`` and boxes 2 px to half the image on a side.

    The images are drawn on ``device`` itself: at batch 1024 and 640 px they are 5 GB,
    which the host need not hold."""
    if imgsz < 4:
        raise ValueError(f"imgsz must be at least 4, got {imgsz}")
    images = torch.rand((batch, 3, imgsz, imgsz), device=device,
                        generator=torch.Generator(device).manual_seed(0))
    generator = torch.Generator().manual_seed(0)
    n = batch * boxes_per_image
    image = torch.arange(batch).repeat_interleave(boxes_per_image).float()
    cls = torch.randint(0, nc, (n,), generator=generator).float()
    size = 2 + torch.rand((n, 2), generator=generator) * (imgsz / 2 - 2)
    corner = torch.rand((n, 2), generator=generator) * (imgsz - size)
    targets = torch.cat((image[:, None], cls[:, None], corner, corner + size), dim=1)
    return images, targets.to(device)
