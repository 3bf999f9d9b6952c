"""Twelve hours of the off-box watchdog on a simulated clock (``tests.fixtures.
watchdog_sim``), for several seeds: how late each billing that was due ended, what was
stopped while it trained, what never ended, and the faults met. Prints a Markdown table
for docs/BENCHMARKS.md.

    .venv/bin/python bench/watchdog_soak.py [SEEDS]
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fixtures.providers_standin import ProviderStandin  # noqa: E402
from tests.fixtures.watchdog_sim import Sim  # noqa: E402


def one(seed: int) -> dict:
    """One simulated run in a state directory of its own."""
    os.environ["XDG_STATE_HOME"] = tempfile.mkdtemp(prefix="soak-")
    made: list[ProviderStandin] = []

    def make(provider: str, **options: object) -> ProviderStandin:
        made.append(ProviderStandin(provider, **options))
        return made[-1]

    started = time.monotonic()
    sim = Sim(make, seed=seed)
    sim.run()
    for standin in made:
        standin.close()
    return {**sim.report(), "wall_s": time.monotonic() - started}


def main() -> None:
    """Run the seeds and print the table."""
    seeds = [int(s) for s in (sys.argv[1:] or ["1", "2", "3"])]
    print("| seed | passes | instances | billings due | ended | never ended | late median "
          "| late max | live runs stopped | faults (429/5xx/hang) | requests | 429s met "
          "| wall |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for seed in seeds:
        r = one(seed)
        f = r["faults_injected"]
        print(f"| {seed} | {r['passes']} | {r['instances']} | {r['owed']} | {r['ended']} "
              f"| {len(r['never_ended'])} | {r['late_median_s']:.0f} s "
              f"| {r['late_max_s']:.0f} s | {len(r['live_runs_stopped'])} "
              f"| {f.get('429', 0)}/{f.get('502', 0)}/{f.get('timeout', 0)} "
              f"| {r['requests']} | {r['rate_limited']} | {r['wall_s']:.0f} s |")


if __name__ == "__main__":
    main()
