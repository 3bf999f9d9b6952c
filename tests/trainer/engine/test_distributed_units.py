"""The pieces of multi-process training that need no second process: the sharded sampler,
merged validation, the torchrun environment and how many workers a device= asks for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from trainer.datasets.loader import EpochSampler
from trainer.detector.evaluate import DetectionEvaluator
from trainer.engine.device import DeviceCaps
from trainer.engine.plan import TrainArgs, UsageError, _check_batch, _plan_world
from trainer.engine.world import DistributedError, World, torchrun_world


@pytest.mark.parametrize(("size", "world"), [(16, 2), (17, 2), (10, 4), (3, 4), (1, 2)])
def test_training_shards_are_equal_and_cover_the_epoch(size: int, world: int) -> None:
    shards = []
    for rank in range(world):
        sampler = EpochSampler(size, shuffle=True, seed=3, rank=rank, world=world)
        sampler.set_epoch(5)
        keys = list(sampler)
        assert len(keys) == len(sampler) == -(-size // world)
        assert {epoch for epoch, _ in keys} == {5}
        shards.append([i for _, i in keys])
    # Every image is in some shard; only the padding (at most world - 1 keys) repeats.
    flat = [i for shard in shards for i in shard]
    assert set(flat) == set(range(size))
    assert len(flat) - size == (-size) % world
    # Every rank drew the one-process order and took every world-th key from its rank.
    single = EpochSampler(size, shuffle=True, seed=3)
    single.set_epoch(5)
    order = [i for _, i in single]
    padded = (order * world)[: len(shards[0]) * world]
    assert shards == [padded[rank::world] for rank in range(world)]

def test_validation_shards_do_not_repeat_images() -> None:
    shards = [[i for _, i in EpochSampler(10, shuffle=False, rank=r, world=4, pad=False)]
              for r in range(4)]
    assert shards == [[0, 4, 8], [1, 5, 9], [2, 6], [3, 7]]
    assert [len(EpochSampler(10, shuffle=False, rank=r, world=4, pad=False))
            for r in range(4)] == [3, 3, 2, 2]


def test_merged_validation_shards_give_the_metrics_of_the_whole_set() -> None:
    rng = np.random.default_rng(0)
    images = []
    for _ in range(12):
        truth = np.column_stack([rng.integers(0, 3, 4), rng.uniform(0, 50, (4, 2)),
                                 rng.uniform(60, 100, (4, 2))])
        noise = rng.normal(0, 4, (4, 4))
        dets = np.column_stack([truth[:, 1:5] + noise, rng.uniform(0.1, 1, 4), truth[:, 0]])
        images.append((dets, truth))
    whole = DetectionEvaluator(3)
    shards = [DetectionEvaluator(3) for _ in range(3)]
    for i, (dets, truth) in enumerate(images):
        whole.add(dets, truth)
        shards[i % 3].add(dets, truth)
    for other in shards[1:]:
        shards[0].merge(other)
    expected, merged = whole.compute(), shards[0].compute()
    assert merged == pytest.approx(expected, abs=1e-12)
    assert 0 < expected["mAP50"] < 1


def test_torchrun_environment() -> None:
    assert torchrun_world({}) is None
    assert torchrun_world({"RANK": "0", "WORLD_SIZE": "2"}) is None
    assert torchrun_world({"RANK": "3", "WORLD_SIZE": "8", "LOCAL_RANK": "1"}) == \
        World(rank=3, local_rank=1, size=8)
    with pytest.raises(DistributedError, match="must be integers"):
        torchrun_world({"RANK": "a", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})
    with pytest.raises(DistributedError, match="do not describe"):
        torchrun_world({"RANK": "2", "WORLD_SIZE": "2", "LOCAL_RANK": "0"})


CPU = DeviceCaps("cpu")
FOUR_GPUS = DeviceCaps("cuda", 0, requested=(0, 1, 2, 3), names=("H100",) * 4)


@pytest.mark.parametrize(("caps", "nproc", "expected"), [
    (CPU, 0, ("single", 1)),
    (CPU, 1, ("single", 1)),
    (CPU, 2, ("spawn", 2)),
    (DeviceCaps("cuda", 0, requested=(0,)), 0, ("single", 1)),
    (FOUR_GPUS, 0, ("spawn", 4)),
    (FOUR_GPUS, 4, ("spawn", 4)),
])
def test_workers_per_device(caps: DeviceCaps, nproc: int, expected: tuple[str, int]) -> None:
    launch, size, world, planned = _plan_world(TrainArgs(nproc=nproc), caps, None)
    assert (launch, size) == expected and world is None and planned is caps


def test_nproc_must_match_the_listed_gpus() -> None:
    with pytest.raises(UsageError, match="GPUs get one worker each; list 2 GPUs"):
        _plan_world(TrainArgs(device="0,1,2,3", nproc=2), FOUR_GPUS, None)


def test_under_torchrun_the_environment_decides() -> None:
    world = torchrun_world({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert _plan_world(TrainArgs(device="cpu"), CPU, world) == ("torchrun", 2, world, CPU)
    # torchrun with one process is a plain run
    assert _plan_world(TrainArgs(device="cpu"), CPU, World(0, 0, 1))[:2] == ("single", 1)
    with pytest.raises(UsageError, match="set by torchrun"):
        _plan_world(TrainArgs(device="cpu", nproc=2), CPU, world)


def test_the_global_batch_must_split_evenly() -> None:
    _check_batch(64, 4)
    _check_batch(-1, 3)  # chosen per device, then multiplied
    with pytest.raises(UsageError, match=r"batch=10 .* 4 processes .* try batch=8"):
        _check_batch(10, 4)
    with pytest.raises(UsageError, match="try batch=2"):
        _check_batch(1, 2)


def test_a_stray_rank_variable_without_torchrun_is_a_plain_run(
        shapes_data: Path, tmp_path: Path) -> None:
    from trainer.engine.plan import build_plan, parse_args

    (tmp_path / "exp").mkdir()
    (tmp_path / "exp" / "metrics.jsonl").write_text("")  # a finished run holds exp
    args, given = parse_args([f"data={shapes_data}", f"project={tmp_path}", "device=cpu"])
    plan = build_plan(args, given, env={"RANK": "3"})
    # Not torchrun (no WORLD_SIZE, LOCAL_RANK): this process picks a fresh directory.
    assert (plan.launch, plan.world_size, plan.run_dir) == ("single", 1, tmp_path / "exp2")
