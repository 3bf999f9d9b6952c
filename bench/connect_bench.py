"""Seconds that matter, through an 80 ms link, against OpenSSH in the same run (as root).

    .venv/bin/python bench/connect_bench.py [--repeat 5] [--pull-mb 200,1024] [--no-pull]

The box is a network namespace with its own sshd (``tests.fixtures.netbox``) behind
``DelayRelay`` (40 ms each way); the laptop reaches it as ``box`` through an
``~/.ssh/config`` alias in a throwaway HOME. Every figure is a median of ``--repeat``
runs and is divided by an OpenSSH baseline measured in the same run:

* ``gpurent status box:RUN --json`` and the TUI from its process start until the run's
  state is on screen (trainer not on the box yet: ``cold``; already there: ``warm``)
  against ``ssh box cat RUN/status.json``;
* ``gpurent runs box:P`` and the TUI until every run of ``P`` is listed, for projects of
  100 and 500 runs, against ``ssh box 'cat P/*/status.json'``;
* the TUI on a run whose ``train.log`` is 220 MB: time until the log's tail is on screen
  against the time to its first status, and the bytes the link carried until then, next
  to the same for a small log;
* ``pull_weights`` (verified: sha256 here and on the box) of a 200 MB and a 1 GB file
  against OpenSSH ``scp`` (throughput; the relay runs in its own process here).

The TUI runs as ``gpurent-tui`` does (``tui.main``: arguments, the early SSH connection,
then the app), headless, in a child process (``bench/tui_start.py``) that prints when the
status, the runs and the log reach the screen.

Prints a JSON object and the markdown table for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LOG_MB = 220


# ----------------------------------------------------------------------------- parent


def median_time(cmd: list[str], env: dict[str, str] | None = None, n: int = 5) -> float:
    """Median wall time of running ``cmd`` ``n`` times (each must succeed)."""
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, env=env, timeout=600)
        times.append(time.perf_counter() - t0)
        if done.returncode != 0:
            raise SystemExit(f"{cmd[:4]} failed: {done.stderr.decode()[-500:]}")
    return statistics.median(times)


def tui_times(env: dict[str, str], args: list[str], relay=None) -> dict[str, float]:
    """One TUI start: seconds from the process start to each event, and the bytes the
    link carried until the last one."""
    if relay is not None:
        relay.reset_counters()
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("tui_start.py")),
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True, cwd=ROOT)
    out: dict[str, float] = {}
    assert proc.stdout is not None
    for line in proc.stdout:
        word, _, when = line.strip().partition(" ")
        if word == "done":
            if relay is not None:
                out["bytes"] = relay.bytes_total
            break
        out[word] = float(when) - t0
    proc.wait(60)
    if "status" not in out:
        raise SystemExit(f"the TUI showed no status: {proc.stderr.read()[-2000:]}")
    return out


def med(samples: list[dict[str, float]], key: str) -> float:
    """The median of one key over samples."""
    return statistics.median(s[key] for s in samples)


def make_projects(home: Path) -> dict[str, Path]:
    """A small run, projects of 100 and 500 runs, and a run with a 220 MB log."""
    from tests.fixtures.tui_runs import write_run

    small = write_run(home / "small" / "r1", done=3, total=10, state="completed")
    for n in (100, 500):
        for i in range(n):
            write_run(home / f"p{n}" / f"exp{i}", done=2, total=10, state="completed")
    big = write_run(home / "big" / "r1", done=3, total=10, state="completed")
    line = "2026-07-31 10:00:00 | INFO     | step {:>9} loss 0.4321 lr 0.001 imgs/s 812.3\n"
    with open(big / "train.log", "a", encoding="utf-8") as fh:
        written, step = 0, 0
        while written < LOG_MB * 1_000_000:
            chunk = "".join(line.format(step + k) for k in range(10_000))
            fh.write(chunk)
            written += len(chunk)
            step += 10_000
        fh.write("the last line of the big log\n")
    with open(small / "train.log", "a", encoding="utf-8") as fh:
        fh.write("the last line of the small log\n")
    os.sync()  # measure with the 220 MB written back, not while the disk is busy with it
    return {"small": small, "p100": home / "p100", "p500": home / "p500", "big": big}


def laptop(tmp: Path, server, state: str) -> dict[str, str]:
    """An environment whose HOME's ssh config names the box ``box``."""
    home = tmp / "laptop"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "config").write_text(
        f"Host box\n  HostName {server.host}\n  Port {server.port}\n  User {server.user}\n"
        f"  IdentityFile {server.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {server.known_hosts}\n")
    return {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
            "XDG_STATE_HOME": str(tmp / state), "XDG_CONFIG_HOME": str(tmp / "config"),
            "GPURENT_DATA_DIR": str(tmp / "data"), "HF_HOME": str(tmp / "hf")}


def bench_link(box, repeat: int) -> dict:
    """Status, runs, TUI start and the big log; see the module doc."""
    server = box.server
    tmp = Path(tempfile.mkdtemp(prefix="gpurent-connect-bench-"))
    projects = make_projects(Path(server.home))
    gpurent = str(ROOT / ".venv" / "bin" / "gpurent")
    env = laptop(tmp, server, "state")
    small = str(projects["small"])
    r: dict = {"rtt_ms": 2 * box.delay * 1000}
    r["ssh_cat"] = median_time(server.ssh_command("cat", f"{small}/status.json"), n=repeat)
    r["status"] = median_time([gpurent, "status", f"box:{small}", "--json"], env, repeat)
    for n in (100, 500):
        p = projects[f"p{n}"]
        r[f"ssh_cat_{n}"] = median_time(server.ssh_command("sh", "-c",
                                                           f"'cat {p}/*/status.json'"),
                                        n=repeat)
        r[f"runs_{n}"] = median_time([gpurent, "runs", f"box:{p}", "--json"], env, repeat)

    tui = ["box", "--project", str(projects["small"].parent), "--run", "r1",
           "--want-log", "the last line of the small log"]
    cold, first = [], []
    for k in range(repeat):
        # A box this laptop has not met, without our package; the laptop's own caches
        # (the package's hash and tarball) are warm, as after any earlier use.
        for old in Path(server.home, ".cache", "gpurent").glob("trainer-*"):
            shutil.rmtree(old)
        state = tmp / f"cold{k}" / "gpurent"
        state.mkdir(parents=True)
        for cached in (tmp / "state" / "gpurent").glob("*"):
            if cached.name != "boxes.json":
                shutil.copy(cached, state / cached.name)
        cold.append(tui_times(laptop(tmp, server, f"cold{k}"), tui, box.relay))
    for k in range(max(2, repeat // 2)):  # and a laptop that never ran gpurent either
        for old in Path(server.home, ".cache", "gpurent").glob("trainer-*"):
            shutil.rmtree(old)
        first.append(tui_times(laptop(tmp, server, f"first{k}"), tui, box.relay))
    warm = [tui_times(env, tui, box.relay) for _ in range(repeat)]
    r["tui_cold"], r["tui_warm"] = med(cold, "status"), med(warm, "status")
    r["tui_first_ever"] = med(first, "status")
    r["small_log"], r["small_bytes"] = med(warm, "log"), med(warm, "bytes")
    for n in (100, 500):
        project = ["box", "--project", str(projects[f"p{n}"]), "--want-runs", str(n)]
        runs = [tui_times(env, project, box.relay) for _ in range(repeat)]
        r[f"tui_{n}_status"], r[f"tui_{n}_runs"] = med(runs, "status"), med(runs, "runs")
    big = ["box", "--project", str(projects["big"].parent), "--run", "r1",
           "--want-log", "the last line of the big log"]
    bigs = [tui_times(env, big, box.relay) for _ in range(repeat)]
    r["big_status"], r["big_log"], r["big_bytes"] = (med(bigs, "status"), med(bigs, "log"),
                                                     med(bigs, "bytes"))
    shutil.rmtree(tmp, ignore_errors=True)
    return r


def bench_pull(box, sizes_mb: list[int]) -> dict:
    """``pull_weights`` against scp for each size (the relay in its own process)."""
    from remote.weights.pull import pull_weights
    from tests.fixtures.sshd import SSHServer, write_known_host

    server = box.server
    weights = Path(server.home) / "runs" / "pull" / "weights"
    weights.mkdir(parents=True, exist_ok=True)
    relay = subprocess.Popen([sys.executable, "-m", "tests.fixtures.netbox", box.box_ip, "22",
                              str(box.delay)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    out = Path(tempfile.mkdtemp(prefix="gpurent-pull-"))
    results = {}
    try:
        port = int(relay.stdout.readline())
        link = SSHServer(**{**server.__dict__, "port": port})
        write_known_host(Path(link.known_hosts), "127.0.0.1", port, link.host_key_line)
        for mb in sizes_mb:
            big = weights / "best.pt"
            with open(big, "wb") as fh:
                for _ in range(mb):
                    fh.write(os.urandom(1 << 20))
            t0 = time.monotonic()
            subprocess.run(["scp", "-q", *link.openssh_options(), "-P", str(port),
                            f"{link.user}@127.0.0.1:{big}", str(out / "scp.bin")],
                           check=True, timeout=1800)
            scp = time.monotonic() - t0
            (out / "scp.bin").unlink()
            with link.connect() as transport:
                t0 = time.monotonic()
                pull_weights(transport, str(weights.parent), out / "pulled", files=("best.pt",))
                pull = time.monotonic() - t0
            shutil.rmtree(out / "pulled")
            results[mb] = {"scp": scp, "pull": pull, "scp_mb_s": mb * 1.048576 / scp,
                           "pull_mb_s": mb * 1.048576 / pull}
            big.unlink()
    finally:
        relay.terminate()
        relay.wait(10)
        shutil.rmtree(out, ignore_errors=True)
    return results


def table(r: dict, pulls: dict) -> str:
    """The markdown rows."""
    rows = ["| measure | gpurent | OpenSSH baseline | ratio | target |", "|---|---|---|---|---|"]

    def row(name: str, ours: float, base: float, base_name: str, target: str) -> None:
        rows.append(f"| {name} | {ours:.2f} s | {base:.2f} s ({base_name}) | "
                    f"{ours / base:.2f}x | {target} |")

    cat = r["ssh_cat"]
    row("`gpurent status box:RUN --json`", r["status"], cat, "`ssh box cat`", "<= 1.15x")
    row("TUI start -> run state on screen, trainer not on the box", r["tui_cold"], cat,
        "`ssh box cat`", "<= 2.0x")
    row("the same, on a laptop that never ran gpurent either", r["tui_first_ever"], cat,
        "`ssh box cat`", "")
    row("TUI start -> run state on screen, trainer on the box", r["tui_warm"], cat,
        "`ssh box cat`", "<= 1.3x")
    for n in (100, 500):
        base = r[f"ssh_cat_{n}"]
        row(f"`gpurent runs` of {n} runs", r[f"runs_{n}"], base, "`cat P/*/status.json`",
            "<= 1.5x")
        row(f"TUI start -> all {n} runs listed", r[f"tui_{n}_runs"], base,
            "`cat P/*/status.json`", "<= 1.5x")
    rows.append(f"| TUI: log tail on screen, {LOG_MB} MB log | {r['big_log']:.2f} s | "
                f"{r['big_status']:.2f} s (its first status) | "
                f"{r['big_log'] / r['big_status']:.2f}x | <= 2x |")
    rows.append(f"| TUI: log tail on screen, small log | {r['small_log']:.2f} s | "
                f"{r['tui_warm']:.2f} s (its first status) | "
                f"{r['small_log'] / r['tui_warm']:.2f}x | <= 2x |")
    rows.append(f"| bytes on the link from the start until the log is shown, {LOG_MB} MB "
                f"log | {r['big_bytes'] / 1e6:.2f} MB | (small log: "
                f"{r['small_bytes'] / 1e6:.3f} MB) | | <= 2 MB |")
    for mb, p in pulls.items():
        rows.append(f"| `pull_weights` {mb} MB, sha256-verified | {p['pull']:.1f} s, "
                    f"{p['pull_mb_s']:.1f} MB/s | {p['scp']:.1f} s, {p['scp_mb_s']:.1f} MB/s "
                    f"(`scp`) | {p['pull_mb_s'] / p['scp_mb_s']:.2f}x throughput | >= 1.5x |")
    return "\n".join(rows)


def main() -> int:
    """Run the benchmarks."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--pull-mb", default="200,1024")
    p.add_argument("--no-pull", action="store_true")
    p.add_argument("--delay", type=float, default=0.040, help="one-way delay, s")
    args = p.parse_args()
    from tests.fixtures.netbox import netbox_session

    data_dir = tempfile.mkdtemp(prefix="gpurent-bench-data-")
    os.environ["GPURENT_DATA_DIR"] = data_dir  # keep the real pull ledger clean
    try:
        with netbox_session(args.delay) as box:
            link = bench_link(box, args.repeat)
            pulls = {} if args.no_pull else bench_pull(
                box, [int(x) for x in args.pull_mb.split(",") if x])
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
    print(json.dumps({"link": link, "pull": pulls}, indent=2))
    print(table(link, pulls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
