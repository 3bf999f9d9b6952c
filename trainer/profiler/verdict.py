"""The verdict rules of ``trainer profile`` (pure: numbers in, words out).

* ``memory-pressure``: the allocator retried (freed its cache to fit an allocation),
  hit an OOM, called cudaMalloc again and again in steady state, or peaked near the
  card's memory. Listed first when present: throughput read under pressure is unreliable.
* ``dataloader``: the step waited for data >= 20 % of its time.
* ``compute``: the GPU was busy >= 80 % of the step.
* ``host / launch``: neither; the GPU idles while Python and the CPU launch work.

Without a GPU-busy figure (a CPU-only box) only ``dataloader`` can be told; the others
are listed in ``cannot_tell`` with the reason, never guessed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

DATALOADER_FRACTION = 0.20
COMPUTE_BUSY = 0.80
#: Steady-state cudaMalloc calls per step above which the caching allocator is churning.
MALLOCS_PER_STEP = 5.0
#: Peak reserved memory over total above which the run sits at the OOM edge.
NEAR_FULL = 0.95

LEVERS: dict[str, list[str]] = {
    "dataloader": [
        "more loader workers (workers=N, up to the usable CPUs)",
        "cache decoded images in RAM, or keep the dataset on local disk, not a network volume",
        "lighter CPU-side augmentation, or images stored near the training size",
        "pin_memory and persistent workers (our trainer sets both)",
    ],
    "compute": [
        "AMP (bf16/fp16) to use the tensor cores",
        "channels_last memory format",
        "torch.compile to fuse kernels",
        "a smaller model or image size, if the accuracy allows",
    ],
    "host / launch": [
        "a larger batch: fewer launches per image",
        "CUDA graphs or torch.compile(mode='reduce-overhead')",
        "drop per-step .item()/.cpu() calls and per-step logging",
        "a box with a faster CPU",
    ],
    "memory-pressure": [
        "a smaller batch (with gradient accumulation to keep the effective batch)",
        "AMP to halve activation memory",
        "gradient checkpointing",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
    ],
}


@dataclass(frozen=True)
class Measures:
    """The inputs of the verdict. ``gpu_busy`` and the memory figures are ``None`` where
    they could not be measured (no GPU)."""

    step_seconds: float
    data_wait_seconds: float
    gpu_busy: float | None = None
    alloc_retries: int | None = None
    ooms: int | None = None
    mallocs_per_step: float | None = None
    peak_memory_fraction: float | None = None


def speedup_from_faster_gpu(busy: float, factor: float = 2.0) -> float:
    """Step speed-up when only the GPU-busy share of the step gets ``factor`` x faster."""
    busy = min(max(busy, 0.0), 1.0)
    return 1.0 / ((1.0 - busy) + busy / factor)


def _pct(x: float) -> str:
    return f"{x * 100:.0f} %"


def _memory_reasons(m: Measures) -> list[str]:
    reasons = []
    if m.alloc_retries:
        reasons.append(f"{m.alloc_retries} allocator retries")
    if m.ooms:
        reasons.append(f"{m.ooms} out-of-memory errors")
    if m.mallocs_per_step is not None and m.mallocs_per_step >= MALLOCS_PER_STEP:
        reasons.append(f"{m.mallocs_per_step:.0f} cudaMalloc calls per step")
    if m.peak_memory_fraction is not None and m.peak_memory_fraction >= NEAR_FULL:
        reasons.append(f"peak memory at {_pct(m.peak_memory_fraction)} of the card")
    return reasons


def _entry(name: str, why: str, faster_gpu: str) -> dict[str, Any]:
    return {"name": name, "why": why, "levers": LEVERS[name], "faster_gpu": faster_gpu}


def judge(m: Measures) -> dict[str, Any]:
    """``verdict`` (the main one, or ``unknown``), ``verdicts`` (every one that applies,
    main first, each with ``why``, ``levers`` and ``faster_gpu``), ``cannot_tell``
    (verdicts this box cannot decide, with the reason) and ``gpu_2x_speedup``."""
    wait = m.data_wait_seconds / m.step_seconds if m.step_seconds > 0 else 0.0
    verdicts: list[dict[str, Any]] = []
    cannot: list[dict[str, str]] = []
    no_gpu = "needs a GPU-busy measurement, which needs a CUDA GPU"

    memory_known = m.alloc_retries is not None or m.peak_memory_fraction is not None
    reasons = _memory_reasons(m)
    if reasons:
        verdicts.append(_entry(
            "memory-pressure", "allocator churn: " + ", ".join(reasons),
            "Only a GPU with more memory would help; a faster one with the same memory "
            "churns the same way."))
    elif not memory_known:
        cannot.append({"name": "memory-pressure", "reason": "needs CUDA allocator statistics"})

    if wait >= DATALOADER_FRACTION:
        verdicts.append(_entry(
            "dataloader", f"the step waits for data {_pct(wait)} of its time",
            f"No: the GPU already waits for data {_pct(wait)} of each step; a faster GPU "
            "would only wait longer."))

    if m.gpu_busy is None:
        cannot += [{"name": "compute", "reason": no_gpu},
                   {"name": "host / launch", "reason": no_gpu}]
    elif m.gpu_busy >= COMPUTE_BUSY:
        gain = speedup_from_faster_gpu(m.gpu_busy)
        verdicts.append(_entry(
            "compute", f"the GPU is busy {_pct(m.gpu_busy)} of the step",
            f"Yes: the GPU is busy {_pct(m.gpu_busy)} of each step, so a GPU twice as fast "
            f"would make steps about {gain:.1f}x faster."))
    elif wait < DATALOADER_FRACTION:
        verdicts.append(_entry(
            "host / launch",
            f"the GPU is busy only {_pct(m.gpu_busy)} of the step and data wait is "
            f"{_pct(wait)}: the CPU does not launch work fast enough",
            f"Little: the GPU is idle {_pct(1 - m.gpu_busy)} of each step waiting for the "
            "CPU; a faster GPU leaves that idle time as it is."))

    main = verdicts[0]["name"] if verdicts else "unknown"
    if main == "unknown":
        why = (f"data wait is {_pct(wait)} of the step, so the loader keeps up; whether the "
               "step is compute- or launch-bound cannot be told without a GPU")
    else:
        why = verdicts[0]["why"]
    gain_2x = speedup_from_faster_gpu(m.gpu_busy) if m.gpu_busy is not None else None
    return {"verdict": main, "why": why, "data_wait_fraction": wait,
            "gpu_busy_fraction": m.gpu_busy, "verdicts": verdicts, "cannot_tell": cannot,
            "gpu_2x_speedup": gain_2x}


def costs(images_per_second: float, epoch_images: int, price_per_hour: float | None,
          batch: int) -> dict[str, Any]:
    """Time (and, with a price, money) per epoch and per 100 epochs of training steps.
    Validation and checkpoint time are not included."""
    if images_per_second <= 0 or epoch_images <= 0:
        return {"epoch_images": epoch_images, "steps_per_epoch": None, "epoch_seconds": None,
                "price_per_hour": price_per_hour, "cost_per_epoch": None,
                "cost_per_100_epochs": None}
    steps = math.ceil(epoch_images / batch)
    seconds = epoch_images / images_per_second
    per_epoch = seconds / 3600 * price_per_hour if price_per_hour is not None else None
    return {"epoch_images": epoch_images, "steps_per_epoch": steps, "epoch_seconds": seconds,
            "price_per_hour": price_per_hour, "cost_per_epoch": per_epoch,
            "cost_per_100_epochs": per_epoch * 100 if per_epoch is not None else None}
