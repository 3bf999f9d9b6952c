"""The device seam: every CUDA-specific choice of the engine is made here, from plain
capability flags, so that the choices are unit-tested on a machine without a GPU.

``device=`` follows ``libreyolo train``: ``cpu``, ``0``, ``0,1``, ``cuda:0`` or empty for
"the first GPU when there is one". With several GPUs listed, :mod:`trainer.engine.launcher`
runs one worker per GPU, each with the caps of its own device.
"""

from __future__ import annotations

import contextlib
import os
import socket
from dataclasses import dataclass, field
from typing import Any

import torch

from trainer import trainargs


class DeviceError(ValueError):
    """A ``device=`` value that cannot be used here (one-line message)."""


@dataclass(frozen=True)
class DeviceCaps:
    """What the chosen device can do. ``kind`` is ``cpu`` or ``cuda``."""

    kind: str
    index: int | None = None
    bf16: bool = False
    names: tuple[str, ...] = ()
    requested: tuple[int, ...] = field(default_factory=tuple)

    @property
    def is_cuda(self) -> bool:
        """Whether the device is a CUDA GPU."""
        return self.kind == "cuda"

    @property
    def torch_device(self) -> torch.device:
        """The ``torch.device``."""
        return torch.device("cuda", self.index) if self.is_cuda else torch.device("cpu")


@dataclass(frozen=True)
class Precision:
    """How the forward pass runs: autocast dtype (``None`` = full fp32) and whether a
    gradient scaler guards fp16 gradients against underflow."""

    device_type: str
    dtype: torch.dtype | None
    use_scaler: bool

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The autocast context of the forward pass (a no-op in fp32)."""
        if self.dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(self.device_type, dtype=self.dtype)

    def scaler(self) -> torch.amp.GradScaler:
        """A gradient scaler, enabled only for fp16."""
        return torch.amp.GradScaler(self.device_type, enabled=self.use_scaler)

    @property
    def label(self) -> str:
        """``fp32``, ``bf16`` or ``fp16``."""
        return {None: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}[self.dtype]


def parse_device(value: str) -> tuple[str, tuple[int, ...]]:
    """``("cpu", ())`` or ``("cuda", (indices...))``; ``("auto", ())`` for an empty value
    (``trainer.trainargs.parse_device``, whose ``ValueError`` is a ``DeviceError`` here)."""
    try:
        return trainargs.parse_device(value)
    except ValueError as exc:
        raise DeviceError(str(exc)) from None


def probe(value: str) -> DeviceCaps:
    """Resolve ``device=`` against this machine's torch."""
    kind, indices = parse_device(value)
    available = torch.cuda.is_available()
    if kind == "auto":
        kind, indices = ("cuda", (0,)) if available else ("cpu", ())
    if kind == "cpu":
        return DeviceCaps("cpu")
    if not available:
        raise DeviceError(f"device={value!r} asks for a GPU but torch sees none "
                          f"(torch {torch.__version__}); use device=cpu")
    count = torch.cuda.device_count()
    missing = [i for i in indices if i >= count]
    if missing:
        raise DeviceError(f"device={value!r}: GPU {missing[0]} does not exist "
                          f"(this machine has {count})")
    index = indices[0]
    names = tuple(torch.cuda.get_device_name(i) for i in indices)
    return DeviceCaps("cuda", index, bf16=torch.cuda.is_bf16_supported(), names=names,
                      requested=indices)


def choose_precision(caps: DeviceCaps, amp: bool = True) -> Precision:
    """bf16 autocast where the GPU supports it, else fp16 with a gradient scaler; fp32 on
    the CPU (CPU autocast is slower than fp32 for these small convolutions)."""
    if not caps.is_cuda or not amp:
        return Precision(caps.kind, None, False)
    if caps.bf16:
        return Precision("cuda", torch.bfloat16, False)
    return Precision("cuda", torch.float16, True)


def memory_format(caps: DeviceCaps) -> torch.memory_format:
    """channels_last on CUDA (tensor cores want NHWC), contiguous on the CPU."""
    return torch.channels_last if caps.is_cuda else torch.contiguous_format


def cpu_threads(cpu_count: int, workers: int, env: dict[str, str]) -> int | None:
    """Intra-op threads for training on the CPU: the cores the loader workers leave free
    (at least one), or ``None`` to keep torch's choice when ``OMP_NUM_THREADS`` is set.

    On a shared or busy machine, more OpenMP threads than free cores spin at every barrier
    while one of them waits for a core: a step then takes many times longer."""
    if env.get("OMP_NUM_THREADS"):
        return None
    return max(1, cpu_count - workers)


def loader_share(workers: int, caps: DeviceCaps, world_size: int = 1,
                 cpu_count: int | None = None,
                 env: dict[str, str] | None = None) -> tuple[int, int | None]:
    """``(loader workers, intra-op threads)`` a training process uses: at most one loader
    worker per core of its share of the host, and on the CPU the cores they leave free
    (``cpu_threads``; ``None``: keep torch's choice). ``train`` and ``profile`` both ask
    here, so that a profile measures the configuration the run will have."""
    cpus = max(1, ((os.cpu_count() if cpu_count is None else cpu_count) or 1) // world_size)
    used = min(workers, cpus)
    threads = None if caps.is_cuda else cpu_threads(
        cpus, used, dict(os.environ) if env is None else env)
    return used, threads


def configure_backends(caps: DeviceCaps) -> None:
    """Let cuDNN pick the fastest kernels (input sizes are fixed) and allow TF32."""
    if caps.is_cuda:
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True


def to_device(images: torch.Tensor, targets: torch.Tensor, caps: DeviceCaps,
              fmt: torch.memory_format) -> tuple[torch.Tensor, torch.Tensor]:
    """Move a batch to the device (non-blocking from pinned memory on CUDA) and scale the
    uint8 images to float in ``[0, 1]`` there, where it is cheap."""
    device = caps.torch_device
    images = images.to(device, non_blocking=caps.is_cuda)
    targets = targets.to(device, non_blocking=caps.is_cuda)
    images = images.float().div_(255.0).contiguous(memory_format=fmt)
    return images, targets


def peak_memory_bytes(caps: DeviceCaps) -> int | None:
    """The most GPU memory the allocator held since the last reset (``None`` on the CPU),
    what ``nvidia-smi`` shows as this process's share, less the CUDA context."""
    return torch.cuda.max_memory_reserved(caps.torch_device) if caps.is_cuda else None


def host_info(caps: DeviceCaps) -> dict[str, Any]:
    """``status.json``'s ``host``: hostname and GPU names."""
    return {"hostname": socket.gethostname(), "gpus": list(caps.names),
            "device": "cpu" if not caps.is_cuda else f"cuda:{caps.index}",
            "cpu_count": os.cpu_count()}
