"""Benchmark: what training in several processes costs and gives, on the CPU (gloo).

    .venv/bin/python bench/bench_ddp.py [--epochs 3] [--calls 2000]

One run measures, on the same machine and shapes set:

1. throughput of ``nproc=1`` against ``nproc=2`` (same global batch, same epochs):
   images per second from each run's ``summary.json``, and the ratio;
2. the price of the per-step stop agreement: two gloo processes time ``--calls``
   ``Group.any(False)`` calls (one all-reduce of one int over TCP), and the median is
   divided by the two-process run's time per step.

On a GPU box the same agreement travels on a gloo side group, so its cost does not depend
on the GPU; only this ratio carries over, not the CPU throughput.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BATCH = 16


def train(work: Path, nproc: int, epochs: int) -> dict:
    """One run; its summary."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "trainer", "train", "model=n",
                    f"data={work / 'shapes/data.yaml'}", "imgsz=128", f"batch={BATCH}",
                    "workers=0", "device=cpu", f"nproc={nproc}", f"epochs={epochs}",
                    f"project={work}", f"name=p{nproc}", "val_period=100"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    return json.loads((work / f"p{nproc}" / "summary.json").read_text())


def _time_agreement(rank: int, store: str, calls: int, out: str) -> None:
    import torch

    from trainer.engine.collectives import Group
    from trainer.engine.world import World

    group = Group.join(World(rank, rank, 2), torch.device("cpu"), store)
    for _ in range(50):  # warm the connections
        group.any(False)
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        group.any(False)
        samples.append(time.perf_counter() - t0)
    if rank == 0:
        Path(out).write_text(json.dumps(samples))
    group.close()


def agreement_seconds(work: Path, calls: int) -> float:
    """Median seconds of one stop agreement between two gloo processes."""
    import torch.multiprocessing as mp

    out = work / "agreement.json"
    mp.start_processes(_time_agreement, args=((work / "store").as_uri(), calls, str(out)),
                       nprocs=2, start_method="spawn")
    return statistics.median(json.loads(out.read_text()))


def main() -> int:
    """Run the benchmark and print its result as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_ddp."))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "trainer", "shapes", str(work / "shapes"),
                    "--train", "256", "--val", "16", "--imgsz", "128"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    one, two = train(work, 1, opts.epochs), train(work, 2, opts.epochs)
    agree = agreement_seconds(work, opts.calls)
    step_seconds = BATCH / two["images_per_second"]  # both ranks step together
    print(json.dumps({
        "cpu_count": os.cpu_count(), "epochs": opts.epochs, "batch": BATCH,
        "images_per_second": {"nproc=1": round(one["images_per_second"], 1),
                              "nproc=2": round(two["images_per_second"], 1)},
        "nproc2_vs_nproc1": round(two["images_per_second"] / one["images_per_second"], 3),
        "stop_agreement_us": round(agree * 1e6, 1),
        "step_ms_nproc2": round(step_seconds * 1e3, 1),
        "agreement_share_of_step": round(agree / step_seconds, 5),
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
