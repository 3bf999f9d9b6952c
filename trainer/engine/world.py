"""Where this process stands in a run: its rank, the world size, and who takes the
signals. Torch-free: the plan reads torchrun's environment before torch is imported."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TORCHRUN_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


class DistributedError(ValueError):
    """A distributed setting that cannot work (one line)."""


@dataclass(frozen=True)
class World:
    """This process's place in the run. ``launcher_pid`` is the process that takes the
    signals for the whole run (our launcher), or ``None`` when this process takes its own
    (a single process, or torchrun's workers)."""

    rank: int = 0
    local_rank: int = 0
    size: int = 1
    launcher_pid: int | None = None

    @property
    def is_main(self) -> bool:
        """Whether this process writes the run directory."""
        return self.rank == 0


def torchrun_world(env: Mapping[str, str]) -> World | None:
    """The world torchrun describes in ``env``, or ``None`` when not under torchrun."""
    if not all(key in env for key in TORCHRUN_KEYS):
        return None
    try:
        rank, size, local = (int(env[key]) for key in TORCHRUN_KEYS)
    except ValueError:
        raise DistributedError("RANK, WORLD_SIZE and LOCAL_RANK must be integers "
                               f"(got {', '.join(env[k] for k in TORCHRUN_KEYS)})") from None
    if size < 1 or not 0 <= rank < size or local < 0:
        raise DistributedError(f"RANK={rank} WORLD_SIZE={size} LOCAL_RANK={local} do not "
                               "describe a process of the group")
    return World(rank, local, size)
