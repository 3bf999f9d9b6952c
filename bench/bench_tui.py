"""TUI benchmarks (results go to docs/BENCHMARKS.md, section "TUI").

1. Log flood: a real run directory whose train.log grows at 50,000 lines/s for 10 s
   (a separate writer process), watched by the app through the real Watcher and
   ``trainer follow`` on LocalTransport. Measured: how far the log pane is behind the
   file (each line carries its write time), key-press handling time during the flood
   against the same on an idle app, and the process RSS.
2. ``gpurent-tui --help`` wall time against ``python -c pass`` (interpreter start).
3. Start to the first status on screen over the loopback OpenSSH server (connect,
   bootstrap with preflight, watcher), against ``ssh host true`` with OpenSSH.

    .venv/bin/python bench/bench_tui.py [--seconds 10] [--rate 50000] [--no-ssh]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from textual import events  # noqa: E402

from tests.fixtures.tui_runs import write_run  # noqa: E402
from tui.app import GpurentApp  # noqa: E402
from tui.box.view import BoxView  # noqa: E402
from tui.spec import BoxSpec  # noqa: E402

WRITER = r"""
import sys, time
path, rate, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
tick = 0.01
per_tick = max(1, int(rate * tick))
n = 0
start = time.time()
with open(path, "a", buffering=1 << 20) as fh:
    while True:
        now = time.time()
        if now - start >= seconds:
            break
        due = int((now - start) * rate)
        lines = []
        while n < due:
            lines.append(f"{now:.6f} | INFO     | step {n} loss 0.{n % 997:03d} lr 0.001 "
                         f"imgs/s 812.3\n")
            n += 1
        fh.write("".join(lines))
        fh.flush()
        time.sleep(tick)
print(n)
"""


def median_time(argv: list[str], runs: int = 7) -> float:
    """Median wall time of a command."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, capture_output=True, cwd=ROOT, timeout=60)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


async def key_latency(pilot, app, samples: int) -> list[float]:
    """Seconds from a key event entering the app's queue until its binding has run
    (the 'f' key toggles follow), polled every 2 ms. Pressed twice per sample, so
    follow ends where it was."""
    pane = app.query_one(BoxView).log_pane
    out = []
    for _ in range(samples * 2):
        before = pane.follow
        t0 = time.perf_counter()
        app.post_message(events.Key("f", "f"))
        while pane.follow == before:
            if time.perf_counter() - t0 > 10:
                raise SystemExit("a key press was not handled within 10 s")
            await asyncio.sleep(0.002)
        out.append(time.perf_counter() - t0)
        await asyncio.sleep(0.1)
    return out


async def flood(seconds: float, rate: int) -> dict:
    """The log-flood measurement."""
    proc = psutil.Process()
    with tempfile.TemporaryDirectory(prefix="gpurent-bench-") as tmp:
        run = write_run(Path(tmp) / "runs" / "flood", done=2, total=100, state="running",
                        pid=None)
        app = GpurentApp([BoxSpec("local", "local", project=str(run.parent))])
        async with app.run_test(size=(160, 46)) as pilot:
            box = app.query_one(BoxView)
            deadline = time.monotonic() + 60
            while box.state.status is None or not box.log_pane.log.lines:
                if time.monotonic() > deadline:
                    raise SystemExit("the app never showed the run")
                await asyncio.sleep(0.1)
            idle_keys = await key_latency(pilot, app, 5)
            seeded = box.log_pane.feed.received_lines
            writer = subprocess.Popen([sys.executable, "-c", WRITER, str(run / "train.log"),
                                       str(rate), str(seconds)], stdout=subprocess.PIPE,
                                      text=True)
            lags, keys, rss = [], [], []
            next_key = time.monotonic() + 0.5
            while writer.poll() is None:
                await asyncio.sleep(0.1)
                lines = box.log_pane.log.lines
                if lines:
                    with contextlib.suppress(ValueError):  # a line of the seeded log
                        lags.append(time.time() - float(lines[-1].split(" | ", 1)[0]))
                rss.append(proc.memory_info().rss)
                if time.monotonic() >= next_key:
                    keys += await key_latency(pilot, app, 1)
                    next_key = time.monotonic() + 0.5
            written = int(writer.communicate()[0])
            # Drain: how long until the pane shows the last line written.
            t_end = time.time()
            while box.log_pane.feed.received_lines < written + seeded and \
                    time.time() - t_end < 30:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            catch_up = time.time() - t_end
            shown = len(box.log_pane.log.lines)
            received = box.log_pane.feed.received_lines
    return {"written": written, "received": received, "shown": shown,
            "lag_max": max(lags), "lag_p50": statistics.median(lags),
            "catch_up": catch_up, "key_idle_p50": statistics.median(idle_keys),
            "key_flood_p50": statistics.median(keys), "key_flood_max": max(keys),
            "rss_max_mb": max(rss) / 2**20}


async def first_status_ssh() -> dict:
    """Start to first status over the loopback sshd (bootstrap included)."""
    from tests.fixtures.sshd import make_server

    with tempfile.TemporaryDirectory(prefix="gpurent-bench-ssh-") as tmp:
        server = make_server(Path(tmp) / "sshd")
        try:
            project = Path(tmp) / "runs"
            write_run(project / "exp1", done=3, total=10, state="completed")
            baseline = median_time(server.ssh_command("true"), runs=5)
            options = (("known_hosts", server.known_hosts),
                       ("identity_files", (server.key_path,)), ("allow_agent", False),
                       ("ssh_config", server.ssh_config))
            results = []
            for _ in range(2):  # the first run uploads the trainer, the second finds it
                app = GpurentApp([BoxSpec("ssh", f"{server.user}@{server.host}",
                                          port=server.port, project=str(project),
                                          ssh_options=options)])
                t0 = time.perf_counter()
                async with app.run_test(size=(160, 46)):
                    box = app.query_one(BoxView)
                    while box.state.status is None:
                        if time.perf_counter() - t0 > 180:
                            raise SystemExit("no status over ssh within 180 s")
                        await asyncio.sleep(0.02)
                    results.append(time.perf_counter() - t0)
        finally:
            server.sshd.stop()
    return {"ssh_true": baseline, "first_status_cold": results[0],
            "first_status_warm": results[1]}


def main() -> int:
    """Run the benchmarks and print a Markdown table."""
    parser = argparse.ArgumentParser(description="gpurent-tui benchmarks")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rate", type=int, default=50_000)
    parser.add_argument("--no-ssh", action="store_true")
    args = parser.parse_args()
    py = median_time([sys.executable, "-c", "pass"])
    helpt = median_time([sys.executable, "-m", "tui.main", "--help"])
    f = asyncio.run(flood(args.seconds, args.rate))
    rows = [
        ("log flood: lines written", f"{f['written']:,} in {args.seconds:g} s "
         f"({f['written'] / args.seconds:,.0f}/s)", ""),
        ("log pane behind the file, max", f"{f['lag_max']:.2f} s", "< 1 s"),
        ("log pane behind the file, median", f"{f['lag_p50']:.2f} s", ""),
        ("pane caught up after the writer stopped", f"{f['catch_up']:.2f} s", ""),
        ("lines received by the pane", f"{f['received']:,}", "all"),
        ("key press handled, idle app (median)", f"{f['key_idle_p50'] * 1000:.0f} ms", ""),
        ("key press handled during the flood (median / max)",
         f"{f['key_flood_p50'] * 1000:.0f} / {f['key_flood_max'] * 1000:.0f} ms "
         f"({f['key_flood_p50'] / f['key_idle_p50']:.1f}x idle)", "< 100 ms"),
        ("RSS of the app process, max", f"{f['rss_max_mb']:.0f} MB", "< 300 MB"),
        ("`gpurent-tui --help`", f"{helpt * 1000:.0f} ms ({helpt / py:.1f}x "
         f"`python -c pass` = {py * 1000:.0f} ms)", ""),
    ]
    if not args.no_ssh:
        s = asyncio.run(first_status_ssh())
        rows += [("start to first status, loopback sshd, first connect (trainer upload)",
                  f"{s['first_status_cold']:.1f} s ({s['first_status_cold'] / s['ssh_true']:.0f}x "
                  f"`ssh host true` = {s['ssh_true'] * 1000:.0f} ms)", ""),
                 ("start to first status, trainer already on the box",
                  f"{s['first_status_warm']:.1f} s ({s['first_status_warm'] / s['ssh_true']:.0f}x "
                  "`ssh host true`)", "")]
    print("| measure | result | target |\n|---|---|---|")
    for name, value, target in rows:
        print(f"| {name} | {value} | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
