"""Benchmarks of watching and pulling over SSH through an 80 ms link (run by hand, as root).

    .venv/bin/python bench/ssh_watch.py [--changes 20] [--idle 60] [--pull-mb 1024]

The box is a network namespace with its own sshd (``tests.fixtures.netbox``); the laptop
reaches it through ``DelayRelay`` (40 ms each way). Measured in one run, so the ratios
compare like with like:

1. status change -> event latency: the bench rewrites the run's status.json at random
   moments and times when each observer first sees the new value: the ``Watcher``
   (follower over one exec channel), SFTP polling every 2 s on a kept connection
   (LibreYOLO's web monitor cadence), and a fresh OpenSSH ``ssh host cat status.json``
   every second. All three watch the same changes at the same time.
2. bytes on the wire per idle minute (counted in the relay) for the same three.
3. the follower's CPU and RSS on the box (from /proc), idle and while changes arrive.
4. pulling a file (default 1 GiB) with ``SSHTransport.download`` and ``pull_weights``
   against OpenSSH ``scp`` over the same link (relay in its own process).

Prints a JSON object and the markdown rows for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remote.link.bootstrap import bootstrap_box  # noqa: E402
from remote.watch.events import StatusEvent  # noqa: E402
from remote.watch.watcher import Watcher  # noqa: E402
from remote.weights.pull import pull_weights  # noqa: E402
from tests.fixtures.netbox import netbox_session  # noqa: E402
from tests.fixtures.sshd import SSHServer  # noqa: E402
from trainer import runfiles  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")


def pct(values: list[float], q: float) -> float:
    """The ``q`` quantile (0..1) of ``values``, nearest rank."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


class Seen:
    """First arrival time of each status value, per observer."""

    def __init__(self) -> None:
        self.first: dict[int, float] = {}
        self.lock = threading.Lock()

    def saw(self, value: object) -> None:
        if isinstance(value, int):
            with self.lock:
                self.first.setdefault(value, time.monotonic())


def sftp_poller(server: SSHServer, path: str, seen: Seen, stop: threading.Event,
                every: float = 2.0) -> None:
    """Poll status.json over SFTP every ``every`` s on one kept connection."""
    with server.connect() as transport:
        next_at = time.monotonic()
        while not stop.is_set():
            read = runfiles.parse_status(transport.read(path))
            seen.saw(read.get("current_epoch"))
            next_at += every
            stop.wait(max(0.0, next_at - time.monotonic()))


def ssh_cat_poller(server: SSHServer, path: str, seen: Seen, stop: threading.Event,
                   every: float = 1.0) -> None:
    """Run a fresh OpenSSH ``ssh host cat status.json`` every ``every`` s."""
    next_at = time.monotonic()
    while not stop.is_set():
        out = subprocess.run(server.ssh_command("cat", path), capture_output=True,
                             timeout=30).stdout
        seen.saw(runfiles.parse_status(out).get("current_epoch"))
        next_at += every
        stop.wait(max(0.0, next_at - time.monotonic()))


def follower_pid(run_dir: str) -> int | None:
    """The box-side ``trainer follow`` process for ``run_dir`` (same machine here)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"follow" in cmd and run_dir.encode() in cmd and b"trainer" in cmd:
            return int(proc.name)
    return None


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def bench_watch(box, changes: int, idle: float) -> dict:
    """Latency, idle bytes and follower cost; see the module doc."""
    server = box.server
    run_dir = Path(server.home) / "runs" / "bench"
    writer = runfiles.RunWriter(run_dir)
    status = {"state": "running", "pid": os.getpid(), "total_epochs": 10_000,
              "current_epoch": 0, "completed_epochs": 0, "mean_epoch_seconds": 3600.0}
    writer.write_status(status)
    with server.connect() as transport:
        bootstrap_box(transport, preflight=False)
        prefix = transport.trainer_prefix
    rtt_samples = []
    with server.connect() as transport:
        for _ in range(5):
            t0 = time.monotonic()
            transport.stat(str(run_dir / "status.json"))
            rtt_samples.append(time.monotonic() - t0)

    def connect():
        transport = server.connect(timeout=30.0)
        transport.trainer_prefix = prefix
        return transport

    watcher_seen = Seen()

    def on_event(event) -> None:
        if isinstance(event, StatusEvent):
            watcher_seen.saw(event.read.get("current_epoch"))

    watcher = Watcher(connect, str(run_dir), on_event)
    watcher.start()
    deadline = time.monotonic() + 30
    while 0 not in watcher_seen.first and time.monotonic() < deadline:
        time.sleep(0.05)
    status_path = str(run_dir / "status.json")
    stop = threading.Event()
    sftp_seen, cat_seen = Seen(), Seen()
    threads = [threading.Thread(target=sftp_poller, args=(server, status_path, sftp_seen, stop)),
               threading.Thread(target=ssh_cat_poller, args=(server, status_path, cat_seen,
                                                             stop))]
    for t in threads:
        t.start()
    time.sleep(3)
    fpid = follower_pid(str(run_dir))
    cpu0, t_cpu0 = (cpu_seconds(fpid), time.monotonic()) if fpid else (0.0, 0.0)
    written: dict[int, float] = {}
    rng = random.Random(4)
    for i in range(1, changes + 1):
        time.sleep(rng.uniform(2.3, 3.5))
        status.update(current_epoch=i, completed_epochs=i)
        written[i] = time.monotonic()
        writer.write_status(status)
    time.sleep(4)
    active_cpu = ((cpu_seconds(fpid) - cpu0) / (time.monotonic() - t_cpu0)) if fpid else None
    stop.set()
    for t in threads:
        t.join()

    def lat(seen: Seen) -> dict:
        values = [seen.first[i] - written[i] for i in written if i in seen.first]
        return {"n": len(values), "missed": len(written) - len(values),
                "p50": pct(values, 0.5), "p95": pct(values, 0.95),
                "mean": statistics.fmean(values)}

    result = {"rtt_s": statistics.median(rtt_samples), "latency": {
        "watcher": lat(watcher_seen), "sftp_poll_2s": lat(sftp_seen),
        "ssh_cat_1s": lat(cat_seen)}}

    # Idle: only the watcher's connection is on the relay now.
    time.sleep(2)
    box.relay.reset_counters()
    fpid = follower_pid(str(run_dir)) or fpid
    cpu0, t0 = cpu_seconds(fpid), time.monotonic()
    time.sleep(idle)
    span = time.monotonic() - t0
    result["idle_bytes_per_min"] = {"watcher": box.relay.bytes_total * 60 / span}
    result["follower"] = {"idle_cpu_percent": 100 * (cpu_seconds(fpid) - cpu0) / span,
                          "active_cpu_percent": None if active_cpu is None
                          else 100 * active_cpu, "rss_mb": rss_mb(fpid)}
    watcher.stop()
    for name, target in (("sftp_poll_2s", sftp_poller), ("ssh_cat_1s", ssh_cat_poller)):
        time.sleep(1)
        stop = threading.Event()
        thread = threading.Thread(target=target, args=(server, status_path, Seen(), stop))
        box.relay.reset_counters()
        t0 = time.monotonic()
        thread.start()
        time.sleep(idle / 2)
        stop.set()
        thread.join()
        result["idle_bytes_per_min"][name] = box.relay.bytes_total * 60 / (time.monotonic() - t0)
    return result


def bench_pull(box, megabytes: int) -> dict:
    """Download a file through a relay process: scp, SSHTransport.download, pull."""
    server = box.server
    weights = Path(server.home) / "runs" / "pull" / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    big = weights / "best.pt"
    with open(big, "wb") as fh:
        for _ in range(megabytes):
            fh.write(os.urandom(1 << 20))
    size = big.stat().st_size
    relay = subprocess.Popen([sys.executable, "-m", "tests.fixtures.netbox", box.box_ip, "22",
                              str(box.delay)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        port = int(relay.stdout.readline())
        link = SSHServer(**{**server.__dict__, "port": port})
        from tests.fixtures.sshd import write_known_host

        write_known_host(Path(link.known_hosts), "127.0.0.1", port, link.host_key_line)
        out = Path(tempfile.mkdtemp(prefix="gpurent-pull-"))
        timings = {}
        t0 = time.monotonic()
        subprocess.run(["scp", "-q", *link.openssh_options(), "-P", str(port),
                        f"{link.user}@127.0.0.1:{big}", str(out / "scp.bin")], check=True,
                       timeout=900)
        timings["scp"] = time.monotonic() - t0
        (out / "scp.bin").unlink()
        with link.connect() as transport:
            t0 = time.monotonic()
            transport.download(str(big), str(out / "ours.bin"), resume=False)
            timings["download"] = time.monotonic() - t0
            (out / "ours.bin").unlink()
            t0 = time.monotonic()
            pull_weights(transport, str(weights.parent), out / "pulled")
            timings["pull_weights"] = time.monotonic() - t0
        big.unlink()
        shutil.rmtree(out, ignore_errors=True)
        return {"bytes": size, "seconds": timings,
                "mb_per_s": {k: size / v / 1e6 for k, v in timings.items()},
                "download_vs_scp": timings["scp"] / timings["download"]}
    finally:
        relay.terminate()
        relay.wait(10)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--changes", type=int, default=20)
    p.add_argument("--idle", type=float, default=60.0)
    p.add_argument("--pull-mb", type=int, default=1024)
    p.add_argument("--delay", type=float, default=0.040, help="one-way delay, s")
    args = p.parse_args()
    data_dir = tempfile.mkdtemp(prefix="gpurent-bench-data-")
    os.environ["GPURENT_DATA_DIR"] = data_dir  # keep the real pull ledger clean
    try:
        with netbox_session(args.delay) as box:
            result = {"one_way_delay_s": args.delay, "watch": bench_watch(box, args.changes,
                                                                          args.idle)}
            if args.pull_mb:
                result["pull"] = bench_pull(box, args.pull_mb)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
