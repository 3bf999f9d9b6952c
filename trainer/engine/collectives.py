"""The collectives of a multi-process run (NCCL between GPUs, gloo between CPU
processes), behind one small class that is the identity for a single process."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from trainer.engine.world import World


def backend_for(device_kind: str) -> str:
    """NCCL between GPUs, gloo between CPU processes."""
    return "nccl" if device_kind == "cuda" else "gloo"


class Group:
    """The collectives of a run. With one process every operation is the identity, so the
    engine calls them unconditionally.

    Small control messages (the stop flag, metric states, the batch size) travel on a
    gloo group over TCP even when training uses NCCL: reading a value back from a GPU
    collective would synchronise the host with the GPU at every step."""

    def __init__(self, world: World | None = None) -> None:
        self.world = world or World()
        self._control: Any = None

    @property
    def active(self) -> bool:
        """Whether there are other processes to talk to."""
        return self.world.size > 1

    @classmethod
    def join(cls, world: World, device: torch.device, init_method: str = "env://") -> Group:
        """Join the process group of ``world`` (``env://``: torchrun's MASTER_ADDR/PORT)."""
        group = cls(world)
        if not group.active:
            return group
        kwargs: dict[str, Any] = {}
        if device.type == "cuda":
            torch.cuda.set_device(device)
            kwargs["device_id"] = device
        dist.init_process_group(backend_for(device.type), init_method=init_method,
                                rank=world.rank, world_size=world.size, **kwargs)
        group._control = (dist.new_group(backend="gloo") if device.type == "cuda"
                          else dist.group.WORLD)
        return group

    def close(self) -> None:
        """Leave the process group."""
        if self.active and dist.is_initialized():
            dist.destroy_process_group()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any rank (every rank gets the same answer)."""
        if not self.active:
            return flag
        value = torch.tensor([int(flag)], dtype=torch.int32)
        dist.all_reduce(value, op=dist.ReduceOp.MAX, group=self._control)
        return bool(value.item())

    def min_int(self, value: int) -> int:
        """The smallest ``value`` over the ranks."""
        if not self.active:
            return value
        tensor = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(tensor, op=dist.ReduceOp.MIN, group=self._control)
        return int(tensor.item())

    def sum_(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the ranks, in place on every rank."""
        if self.active:
            dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
        return tensor

    def gather(self, obj: Any) -> list[Any] | None:
        """Every rank's ``obj`` on rank 0 (in rank order); ``None`` elsewhere."""
        if not self.active:
            return [obj]
        out: list[Any] | None = [None] * self.world.size if self.world.is_main else None
        dist.gather_object(obj, out, dst=0, group=self._control)
        return out

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank."""
        if not self.active:
            return obj
        box = [obj]
        dist.broadcast_object_list(box, src=0, group=self._control)
        return box[0]

    def sync_buffers(self, module: nn.Module) -> None:
        """Give every rank rank 0's buffers (batch-norm statistics are updated by each
        rank's own batches after DDP's broadcast at the start of each forward)."""
        if self.active:
            for buffer in module.buffers():
                dist.broadcast(buffer, src=0)
