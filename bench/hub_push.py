"""Benchmark of ``trainer push`` through the LFS path against the local Hub stand-in.

    .venv/bin/python bench/hub_push.py [--sizes 32,256]

For each checkpoint size, in one run:

1. peak RSS of the push process (``wait4``) against the same interpreter with the Hub
   client imported and nothing pushed: the extra memory must not grow with the file;
2. wall time of the push against a baseline that does the unavoidable work once, in the
   same process layout: a fresh python that hashes the file (sha256) and sends it once
   over a loopback socket to a reader that discards it.

Prints a JSON object and the markdown rows for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env, write_run  # noqa: E402

MB = 1024 * 1024
BASELINE_SEND = """
import hashlib, socket, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as fh, socket.create_connection(("127.0.0.1", int(sys.argv[2]))) as s:
    while block := fh.read(1 << 20):
        h.update(block)
        s.sendall(block)
print(h.hexdigest())
"""


def measured(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one child process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        assert proc.stderr is not None
        raise SystemExit(f"{cmd[:4]} failed: {proc.stderr.read().decode()[-500:]}")
    return seconds, usage.ru_maxrss / 1024


def sink() -> tuple[int, threading.Thread]:
    """A loopback listener that reads one connection to its end."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            while conn.recv(1 << 20):
                pass
        server.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return server.getsockname()[1], thread


def bench(size_mb: int, tmp: Path) -> dict[str, float]:
    standin = HubStandin(tmp / f"hub-{size_mb}").start()
    try:
        run = tmp / f"run-{size_mb}"
        write_run(run, best_size=size_mb * MB)
        env = hub_env(standin, tmp / "hf", HF_TOKEN=VALID_TOKEN)
        _, base_rss = measured([sys.executable, "-c", (
            "from trainer.hub.client import import_hub; hub = import_hub(); hub.HfApi; "
            "from huggingface_hub import _commit_api, lfs")], env)
        port, reader = sink()
        base_s, _ = measured([sys.executable, "-c", BASELINE_SEND,
                              str(run / "weights" / "best.pt"), str(port)], env)
        reader.join(60)
        push_s, push_rss = measured([sys.executable, "-m", "trainer", "push", str(run),
                                     "--repo", f"bench/m{size_mb}", "--files", "best.pt",
                                     "--json"], env)
    finally:
        standin.stop()
    return {"size_mb": size_mb, "push_s": round(push_s, 2), "baseline_s": round(base_s, 2),
            "time_ratio": round(push_s / base_s, 2), "push_rss_mb": round(push_rss, 1),
            "import_rss_mb": round(base_rss, 1),
            "extra_rss_mb": round(push_rss - base_rss, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="32,256", help="checkpoint sizes in MiB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        rows = [bench(int(s), Path(tmp)) for s in args.sizes.split(",")]
    print(json.dumps(rows, indent=1))
    print("| checkpoint | push | hash+send baseline | ratio | push peak RSS | client-only RSS "
          "| extra |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['size_mb']} MiB | {r['push_s']} s | {r['baseline_s']} s | "
              f"{r['time_ratio']}x | {r['push_rss_mb']} MiB | {r['import_rss_mb']} MiB | "
              f"{r['extra_rss_mb']} MiB |")


if __name__ == "__main__":
    main()
