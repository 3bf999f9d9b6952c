"""Benchmark: writing the run files costs under 1 % of epoch time.

    .venv/bin/python bench/bench_runfiles.py [--epochs 3] [--repeat 200]

One run measures both sides. It trains a small shapes set for a few epochs (a deliberately
short epoch, so the ratio is a worst case) and then:

1. reads the engine's own account from ``train.log``: the time spent in status.json,
   metrics.jsonl, results.csv and summary.json writes (and, separately, checkpoints)
   against the sum of epoch times;
2. replays one epoch's writes (an atomic status.json and one metrics/results row, as the
   engine does per epoch) ``--repeat`` times into a scratch run directory with the run's
   real status and rows, and divides the median by the run's mean epoch time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from trainer.runfiles import RunWriter  # noqa: E402

ENGINE_LINE = re.compile(r"run files took ([\d.]+)s \(([\d.]+)% of epoch time\), "
                         r"checkpoints ([\d.]+)s \(([\d.]+)%\)")


def main() -> int:
    """Run the benchmark and print its result as JSON (exit 1 when over 1 %)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=200)
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_runfiles."))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "trainer", "shapes", str(work / "shapes"),
                    "--train", "128", "--val", "32", "--imgsz", "128"], env=env, check=True,
                   stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "trainer", "train", "model=n",
                    f"data={work / 'shapes/data.yaml'}", "imgsz=128", "batch=16", "workers=1",
                    f"epochs={opts.epochs}", f"project={work / 'runs'}", "name=r"],
                   env=env, check=True, stdout=subprocess.DEVNULL)
    run = work / "runs" / "r"
    log = (run / "train.log").read_text()
    match = ENGINE_LINE.search(log)
    if match is None:
        print("no run-file account in train.log", file=sys.stderr)
        return 1
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    status = json.loads((run / "status.json").read_text())
    mean_epoch = statistics.mean(r["time"] for r in rows)

    scratch = RunWriter(work / "replay")
    costs = []
    for i in range(opts.repeat):
        row = {**rows[i % len(rows)], "epoch": i + 1}
        t0 = time.perf_counter()
        scratch.append_metrics(row)
        scratch.write_status(status)
        costs.append(time.perf_counter() - t0)
    per_epoch = statistics.median(costs)
    report = {
        "epochs": len(rows), "mean_epoch_seconds": round(mean_epoch, 3),
        "load": [round(x, 2) for x in os.getloadavg()],
        "engine_run_files_seconds": float(match.group(1)),
        "engine_run_files_percent": float(match.group(2)),
        "engine_checkpoint_seconds": float(match.group(3)),
        "engine_checkpoint_percent": float(match.group(4)),
        "replay_per_epoch_ms": round(per_epoch * 1000, 3),
        "replay_p95_ms": round(sorted(costs)[int(0.95 * len(costs))] * 1000, 3),
        "replay_percent_of_epoch": round(100 * per_epoch / mean_epoch, 4),
    }
    report["passed"] = (report["engine_run_files_percent"] < 1.0
                        and report["replay_percent_of_epoch"] < 1.0)
    print(json.dumps(report, indent=2))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
