"""The measurement core of ``trainer profile``: time real steps over any batch iterable.

Two windows, never mixed:

1. **Honest window** (``measure_steps``): no synchronisation inside the loop. Data wait
   is the time blocked in ``next(iterator)``; step time is the wall time of the whole
   window divided by its steps, with one synchronisation at each end (so queued GPU
   work is paid for inside the window). Syncing each step would serialise the GPU and
   give the loader workers slack, hiding exactly the starvation we look for.
2. **GPU window** (``measure_gpu_busy``, CUDA only): a few more steps under
   ``torch.profiler``; the union of kernel intervals per step is the GPU-busy time, and
   cudaMalloc calls per step show allocator churn. Its wall time is not used: the busy
   fraction is busy time over the honest step time.

Nothing here knows about models or datasets: callers pass a batch iterable and a step
function, so tests drive it with a dataset that sleeps or a heavy model.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class StepTiming:
    """What the honest window measured (seconds are per step)."""

    steps: int
    warmup: int
    step_seconds: float
    data_wait_seconds: float
    data_wait_max_seconds: float
    images: int
    images_per_second: float

    @property
    def data_wait_fraction(self) -> float:
        """Share of the step spent blocked on the loader."""
        return self.data_wait_seconds / self.step_seconds if self.step_seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, the fraction included."""
        return {**asdict(self), "data_wait_fraction": self.data_wait_fraction}


def batch_len(batch: Any) -> int:
    """Images in a batch: the first dimension of the batch (or of its first element)."""
    first = batch[0] if isinstance(batch, (list, tuple)) else batch
    shape = getattr(first, "shape", None)
    return int(shape[0]) if shape else len(first)


class Batches:
    """An endless iterator over ``source``: a new pass (epoch) starts when one ends, and
    the cost of starting it is data wait like any other."""

    def __init__(self, source: Iterable[Any]) -> None:
        self.source = source
        self._it: Iterator[Any] = iter(source)
        self.passes = 1

    def next(self) -> Any:
        """The next batch, starting a new pass when the current one is exhausted."""
        try:
            return next(self._it)
        except StopIteration:
            self._it = iter(self.source)
            self.passes += 1
            try:
                return next(self._it)
            except StopIteration:
                raise ValueError("the data loader yields no batches") from None


def measure_steps(batches: Batches, step: Callable[[Any], None], *, steps: int, warmup: int,
                  sync: Callable[[], None] | None = None,
                  size: Callable[[Any], int] = batch_len,
                  clock: Callable[[], float] = time.perf_counter) -> StepTiming:
    """Run ``warmup`` untimed steps, then time ``steps`` steps without synchronising inside
    the loop (``sync``, when given, runs once before and once after the window)."""
    if steps < 1 or warmup < 0:
        raise ValueError("steps must be >= 1 and warmup >= 0")
    for _ in range(warmup):
        step(batches.next())
    if sync:
        sync()
    waits = []
    images = 0
    start = clock()
    for _ in range(steps):
        t0 = clock()
        batch = batches.next()
        waits.append(clock() - t0)
        images += size(batch)
        step(batch)
    if sync:
        sync()
    wall = clock() - start
    step_s = wall / steps
    return StepTiming(steps=steps, warmup=warmup, step_seconds=step_s,
                      data_wait_seconds=sum(waits) / steps, data_wait_max_seconds=max(waits),
                      images=images, images_per_second=images / wall if wall > 0 else 0.0)


def measure_validation(loader: Any, validate: Callable[[Iterable[Any]], None],
                       batches: int, sync: Callable[[], None] | None = None,
                       clock: Callable[[], float] = time.perf_counter) -> float:
    """Seconds one validation pass over ``loader`` takes: the wait for its first batch
    (the loader's workers starting) once, plus ``validate`` timed over up to ``batches``
    batches, scaled to the loader's length."""
    total = len(loader)
    if total == 0 or batches < 1:
        return 0.0
    start = clock()
    it = iter(loader)
    taken = [next(it)]
    startup = clock() - start
    start = clock()
    taken += [next(it) for _ in range(min(batches, total) - 1)]
    del it  # the rest of the pass is not needed
    if sync:
        sync()
    validate(taken)
    if sync:
        sync()
    return startup + (clock() - start) / len(taken) * total


# --------------------------------------------------------------------------- GPU window


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping ``(start, end)`` intervals (kernels on
    several streams overlap; the GPU is busy once, not twice)."""
    total = 0.0
    cur_start = cur_end = None
    for start, end in sorted(intervals):
        if cur_end is None or start > cur_end:
            if cur_end is not None and cur_start is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    if cur_end is not None and cur_start is not None:
        total += cur_end - cur_start
    return total


#: Device-side activities that are not SM work: copies, and annotations that span gaps.
NOT_COMPUTE = frozenset({"gpu_memcpy", "gpu_memset", "gpu_user_annotation"})


def device_intervals(events: Iterable[Any], device: str = "CUDA") -> list[tuple[float, float]]:
    """``(start_us, end_us)`` of the profiler events that ran on ``device``: for ``"CUDA"``
    the kernels. Memory copies are left out (a faster GPU does not speed them up), and so
    are GPU-side annotations (``record_function`` spans, which cover idle gaps)."""
    out = []
    for event in events:
        if getattr(event.device_type, "name", str(event.device_type)) != device:
            continue
        if getattr(event, "activity_type", None) in NOT_COMPUTE or event.name.startswith(
                ("Memcpy", "Memset")):
            continue
        out.append((float(event.time_range.start), float(event.time_range.end)))
    return out


def count_named(events: Iterable[Any], names: tuple[str, ...]) -> int:
    """How many profiler events are called one of ``names`` (e.g. ``cudaMalloc``)."""
    return sum(1 for e in events if e.name in names)


@dataclass
class GpuWindow:
    """What the profiled window measured (per step)."""

    steps: int
    busy_seconds: float
    kernels: float
    cuda_mallocs: float

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return asdict(self)


def measure_gpu_busy(batches: Batches, step: Callable[[Any], None], *, steps: int,
                     sync: Callable[[], None], activities: list[Any] | None = None,
                     device: str = "CUDA") -> GpuWindow:
    """Run ``steps`` more steps under ``torch.profiler`` (CPU and CUDA activity unless
    ``activities`` says otherwise) with ``sync`` at both ends; return the busy time of
    ``device`` and the cudaMalloc calls, per step. Batches are fetched before the window:
    loading is what the honest window measures, not this one."""
    from torch.profiler import ProfilerActivity, profile

    batch_list = [batches.next() for _ in range(steps)]
    chosen = activities or [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    sync()
    with profile(activities=chosen) as prof:
        for batch in batch_list:
            step(batch)
        sync()
    events = list(prof.events())
    intervals = device_intervals(events, device)
    return GpuWindow(steps=steps, busy_seconds=union_length(intervals) / 1e6 / steps,
                     kernels=len(intervals) / steps,
                     cuda_mallocs=count_named(events, ("cudaMalloc", "cudaMallocAsync")) / steps)


def cuda_memory(torch: Any, device: Any) -> dict[str, Any]:
    """Allocator figures for the memory-pressure verdict: retries (the allocator freed its
    cache and tried again), OOMs, peak reserved bytes and the device's total."""
    stats = torch.cuda.memory_stats(device)
    total = torch.cuda.get_device_properties(device).total_memory
    peak = torch.cuda.max_memory_reserved(device)
    return {"alloc_retries": int(stats.get("num_alloc_retries", 0)),
            "ooms": int(stats.get("num_ooms", 0)),
            "peak_reserved_bytes": int(peak), "total_bytes": int(total),
            "peak_fraction": peak / total if total else None}
