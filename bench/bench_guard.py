"""Benchmark: what the guard lets a box bill after the run is over, per provider.

    .venv/bin/python bench/bench_guard.py [--poll 2] [--outage 12] [--backoff 0.33]
        [--retry-max 4] [--settle 2] [--only vast:outage]

A real ``python -m trainer guard`` (armed through ``remote.runs.guard.arm_guard``, key on
stdin) watches a run directory whose trainer is a real process, and acts through the
provider stand-ins (not the providers), whose billing clocks (``Meter``) are the judge.
Three scenarios per provider:

* done and safe: the run completes with ``best.pt`` on the Hub (the Hub stand-in, which
  the guard asks before it destroys); ``--then destroy``;
* crash: the trainer is killed with SIGKILL, weights not pushed; ``--then stop`` (the
  TUI's default; Lambda cannot stop, so there it is ``--then destroy`` with nothing to
  lose);
* outage: the crash, while every API request answers 500 for ``--outage`` seconds.

Each row gives the seconds billed at the running price after the event (until the
clock switched to the disk or to nothing), those dollars, and the rate left. The
baseline, measured in the same run, is the provider's own floor: the same action called
directly (``trainer.providers.confirm``) on a fresh instance of the same stand-in, with
the same polling interval. The defaults compress the guard's own defaults (poll 30 s,
retry backoff 5 s doubling to 60 s, a 3-minute outage) by 15; ``--poll 30 --outage 180
--backoff 5 --retry-max 60`` runs them as they are (``--only`` picks one scenario).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remote.runs.guard import arm_guard  # noqa: E402
from remote.transport.local import LocalTransport  # noqa: E402
from tests.fixtures.guard_kit import guard_over, stop_guard, wait_until  # noqa: E402
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, record_push  # noqa: E402
from tests.fixtures.providers_standin import ProviderStandin  # noqa: E402
from trainer import runfiles  # noqa: E402
from trainer.providers import get_provider  # noqa: E402
from trainer.providers.confirm import destroy_and_confirm, stop_and_confirm  # noqa: E402
from trainer.text import money, rate  # noqa: E402


def make_run(run_dir: Path, pid: int, *, best: bool,
             pushed: HubStandin | None) -> runfiles.RunWriter:
    """A run at epoch 1 of 3 whose trainer is ``pid``; ``best.pt`` pushed to ``pushed``
    or not."""
    writer = runfiles.RunWriter(run_dir)
    writer.write_status({"state": "running", "pid": pid, "total_epochs": 3,
                         "completed_epochs": 1, "mean_epoch_seconds": 600.0,
                         "elapsed_seconds": 600.0, "best_epoch": 1})
    (run_dir / runfiles.LOG_FILE).write_text("2026-07-31 10:00:00 | INFO     | epoch 1\n")
    if best:
        path = writer.weights_dir / "best.pt"
        runfiles.atomic_write_bytes(path, b"\0" * 4096)
        if pushed is not None:
            record_push(pushed, run_dir, epoch=1)
    return writer


def scenario(work: Path, provider: str, kind: str, opts: argparse.Namespace,
             hub: HubStandin) -> dict:
    """One guard run; the billing after the event, from the stand-in's clock."""
    standin = ProviderStandin(provider, settle_polls=opts.settle)
    iid = standin.add_instance()
    run_dir = work / f"{provider}-{kind}"
    trainer = subprocess.Popen(["sleep", "3600"])
    can_stop = provider != "lambda"
    then = "destroy" if kind == "done" or not can_stop else "stop"
    writer = make_run(run_dir, trainer.pid, best=kind == "done" or can_stop,
                      pushed=hub if kind == "done" else None)
    try:
        arm_guard(LocalTransport(), str(run_dir), "done", then, None, provider, iid,
                  standin.key, send_account_key=True, hub_repos=["org/run"],
                  base_url=standin.base_url, poll=opts.poll,
                  retry_backoff=opts.backoff, retry_max=opts.retry_max,
                  confirm_timeout=180.0)
        time.sleep(opts.poll * 1.5)  # the guard has seen the run live
        if kind == "outage":
            standin.outage(opts.outage)
        if kind == "done":
            writer.write_status({"state": "completed", "pid": trainer.pid,
                                 "total_epochs": 3, "completed_epochs": 3, "best_epoch": 1})
        else:
            trainer.kill()
            trainer.wait()
        event = time.monotonic()
        final = wait_until("the guard", lambda: guard_over(run_dir), timeout=1800)
    finally:
        trainer.kill()
        trainer.wait()
        stop_guard(run_dir)
    meter = standin.meter(iid)
    seconds = meter.full_rate_seconds(event)
    row = {"provider": provider, "scenario": kind, "action": final["outcome"]["action"],
           "state": final["state"], "seconds": seconds,
           "usd": meter.usd(event, event + seconds), "rate_after": meter.rate_now,
           "price": meter.full, "baseline": baseline(standin, then, opts.poll)}
    if kind == "outage":
        row["after_recovery"] = seconds - opts.outage
    standin.close()
    return row


def baseline(standin: ProviderStandin, action: str, poll: float) -> float:
    """The provider's floor: the action called directly, confirmed at the same
    interval; seconds billed at the running price from the call."""
    iid = standin.add_instance()
    client = get_provider(standin.provider, standin.key, standin.base_url)
    start = time.monotonic()
    run = destroy_and_confirm if action == "destroy" else stop_and_confirm
    run(client, iid, timeout=60.0, interval=min(5.0, poll))
    return standin.meter(iid).full_rate_seconds(start)


def table(rows: list[dict], poll: float) -> str:
    """The Markdown table of BENCHMARKS.md."""
    out = ["| provider | after | guard did | billed at the running price | $ | "
           "floor (direct call) | ratio | rate left |", "|---|---|---|---|---|---|---|---|"]
    names = {"done": "done and safe", "crash": "crash (kill -9)", "outage": "crash + outage"}
    for r in rows:
        extra = f" ({r['after_recovery']:.1f} s after recovery)" if "after_recovery" in r \
            else ""
        out.append(f"| {r['provider']} | {names[r['scenario']]} | {r['action']} "
                   f"({r['state']}) | {r['seconds']:.1f} s = {r['seconds'] / poll:.1f} polls"
                   f"{extra} | {money(r['usd'], 4)} | {r['baseline']:.1f} s | "
                   f"{r['seconds'] / max(r['baseline'], 1e-3):.1f}x | {rate(r['rate_after'])} |")
    return "\n".join(out)


def main() -> int:
    """Run every scenario and print the table and the rows as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--poll", type=float, default=2.0)
    parser.add_argument("--outage", type=float, default=12.0)
    parser.add_argument("--backoff", type=float, default=1 / 3)
    parser.add_argument("--retry-max", type=float, default=4.0)
    parser.add_argument("--settle", type=int, default=2)
    parser.add_argument("--only", metavar="PROVIDER:SCENARIO")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_guard."))
    hub = HubStandin(work / "hub").start()
    # The guards inherit this environment: they confirm pushes with the Hub stand-in.
    os.environ.update(HF_ENDPOINT=hub.url, HF_TOKEN=VALID_TOKEN, HF_HOME=str(work / "hf"))
    runs = [(provider, kind) for provider in ("vast", "runpod", "lambda")
            for kind in ("done", "crash", "outage")]
    if opts.only:
        runs = [tuple(opts.only.split(":", 1))]  # type: ignore[misc]
    try:
        rows = [scenario(work, provider, kind, opts, hub) for provider, kind in runs]
    finally:
        hub.stop()
    print(table(rows, opts.poll))
    print(json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
