"""The fleet and the watchdog, timed against baselines measured in the same run.

    .venv/bin/python bench/fleet_bench.py [--repeat 3]

Three provider stand-ins (``tests.fixtures.providers_standin``) each answer every request
300 ms late and hold 10 instances. The Vast and RunPod instances' SSH addresses are 20
``DelayRelay``s (40 ms each way: an 80 ms round trip) in front of one real sshd; Lambda's
boxes log in as ``ubuntu`` on port 22, which this machine cannot give each instance, so
its 10 are ``booting`` (listed and priced, not reached). The box's registry holds one
finished run whose ``best.pt`` was pushed to a Hub stand-in (the user's repository, no
added delay), so each box's weights check runs ``trainer safe`` through the gate (folded
into the probe's one exec once the box holds the trainer) and asks the Hub once; an
unchanged box prints the answer ``trainer safe --keep`` kept there instead.

* ``gpurent instances --json --no-weights`` (a child process, as a user runs it) and
  ``list_fleet`` in this process, against the baseline: the slowest single provider list
  call plus one SSH connection and probe exec through one relay, each timed alone
  (target <= 1.5x).
* The same with the weights check (the default): against the same baseline, and against
  the slowest list plus one box's connection and its one exec (the probe with the
  weights check folded in, the Hub asked from the laptop) timed alone. Each is timed
  cold (the kept answer removed first: python runs on every box) and steady (a listing
  after that one: the kept answer holds, no python starts on the box).
* ``gpurent watchdog --once`` with nothing to do (a lease hours away, no idle rule):
  wall time and peak RSS, against ``gpurent --version`` (targets <= 2 s, <= 100 MB).

Prints a JSON object and the markdown rows for docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remote.billing.accounts import Account  # noqa: E402
from remote.fleet.boxweights import (  # noqa: E402
    box_weights,
    folded_answer,
    folded_check,
    hub_verify,
)
from remote.fleet.fleet import FleetOptions, connect_instance, list_fleet  # noqa: E402
from remote.runs.probe import probe_box  # noqa: E402
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, record_push  # noqa: E402
from tests.fixtures.netbox import DelayRelay  # noqa: E402
from tests.fixtures.providers_standin import ProviderStandin  # noqa: E402
from tests.fixtures.sshd import make_server  # noqa: E402
from trainer import runfiles  # noqa: E402
from trainer.hub.safe import KEPT_FILE  # noqa: E402
from trainer.providers import get_provider  # noqa: E402

GPURENT = Path(sys.executable).with_name("gpurent")


def child(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """``(seconds, peak RSS in MB, stdout)`` of a child process."""
    started = time.monotonic()
    pid = os.fork()
    if pid == 0:  # the child: its own rusage, so the peak is this command's alone
        out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        Path(env["BENCH_OUT"]).write_text(json.dumps([peak, out.stdout, out.returncode,
                                                      out.stderr[-500:]]))
        os._exit(0)
    os.waitpid(pid, 0)
    took = time.monotonic() - started
    peak, stdout, rc, err = json.loads(Path(env["BENCH_OUT"]).read_text())
    if rc != 0:
        raise SystemExit(f"{command[1]} failed ({rc}): {err}")
    return took, peak, stdout


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark and print its results."""
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--repeat", type=int, default=3)
    opts = args.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="gpurent-fleet-bench-"))
    os.environ["XDG_STATE_HOME"] = str(work / "state")
    os.environ["GPURENT_DATA_DIR"] = str(work / "data")
    hub = HubStandin(work / "hub").start()
    os.environ.update({"HF_ENDPOINT": hub.url, "HF_TOKEN": VALID_TOKEN,
                       "HF_HOME": str(work / "hf")})
    from remote.config import remember_hub_repo

    remember_hub_repo("org/run")
    server = make_server(work / "box")
    run = Path(server.home) / "proj" / "exp"
    runfiles.RunWriter(run).write_status({"state": "completed", "total_epochs": 3,
                                          "completed_epochs": 3, "best_epoch": 2})
    runfiles.atomic_write_bytes(run / "weights" / "best.pt", os.urandom(1 << 20))
    record_push(hub, run)
    (Path(server.home) / ".cache" / "gpurent").mkdir(parents=True, exist_ok=True)
    (Path(server.home) / ".cache" / "gpurent" / "runs.txt").write_text(f"{run}\n")
    kept = Path(server.home) / ".cache" / "gpurent" / KEPT_FILE

    def cold() -> None:
        kept.unlink(missing_ok=True)

    def steady(measure: Callable[[], float]) -> float:
        """``measure()``, checked to have been answered from the kept answer (no python
        on the box rewrote it)."""
        before = kept.stat().st_ino
        took = measure()
        assert kept.stat().st_ino == before, "a steady listing ran trainer safe"
        return took

    standins = {p: ProviderStandin(p, delay=0.3) for p in ("vast", "runpod", "lambda")}
    relays, known = [], []
    for name in ("vast", "runpod"):
        for _ in range(10):
            relay = DelayRelay((server.host, server.port), 0.040).start()
            relays.append(relay)
            iid = standins[name].add_instance()
            standins[name].set_address(iid, "127.0.0.1", relay.port, server.user)
            known.append(f"{name}:{iid} {server.host_key_line}\n")
    for _ in range(10):
        standins["lambda"].add_instance(status="booting")
    (work / "known_hosts").write_text("".join(known))
    ssh_options = {"known_hosts": str(work / "known_hosts"),
                   "identity_files": (server.key_path,), "allow_agent": False,
                   "ssh_config": server.ssh_config}
    options = FleetOptions(timeout=20, ssh_options=ssh_options)
    bare = FleetOptions(timeout=20, ssh_options=ssh_options, weights=False)
    accounts = [Account(p, "default", s.key, s.base_url) for p, s in standins.items()]

    def slowest_list() -> float:
        times = []
        for provider, standin in standins.items():
            client = get_provider(provider, standin.key, standin.base_url)
            started = time.monotonic()
            client.list_instances()
            times.append(time.monotonic() - started)
        return max(times)

    def one_exec(weights: bool) -> float:
        client = get_provider("vast", standins["vast"].key, standins["vast"].base_url)
        inst = client.list_instances()[0]
        started = time.monotonic()
        with connect_instance(client, inst, options) as transport:
            if not weights:
                probe_box(transport)
                return time.monotonic() - started
            verify = hub_verify()
            assert not isinstance(verify, str), verify
            report = probe_box(transport, extra=folded_check(transport, f"vast:{inst.id}"))
            assert folded_answer(report.sections) is not None, "the check was not folded"
            said = box_weights(transport, f"vast:{inst.id}", bool(report.runs), verify,
                               ssh_options=ssh_options, folded=report.sections)
            assert said.safe, said
        return time.monotonic() - started

    def in_process(how: FleetOptions) -> float:
        fleet = list_fleet(accounts, how)
        reached = [r for r in fleet.rows if r.box is not None]
        assert len(reached) == 20, [r.unreachable for r in fleet.rows if r.unreachable]
        assert all((r.weights is not None and r.weights.safe) == how.weights
                   for r in reached), [r.weights for r in reached]
        return fleet.seconds

    home = work / "laptop"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {server.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {work / 'known_hosts'}\n")
    env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(work / "xdg"), "BENCH_OUT": str(work / "child.json"),
           # As an installed package starts: its bytecode compiled once, then read (a
           # machine with PYTHONDONTWRITEBYTECODE compiles ~40 of our modules each start).
           "PYTHONPYCACHEPREFIX": str(work / "pycache")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for provider, standin in standins.items():
        env[f"{provider.upper()}_API_KEY"] = standin.key
        env[f"GPURENT_{provider.upper()}_URL"] = standin.base_url

    def cli(*extra: str) -> float:
        took, _peak, out = child([str(GPURENT), "instances", "--json", *extra], env)
        rows = json.loads(out)["rows"]
        assert sum(r["box"] is not None for r in rows) == 20
        assert sum(bool(r["weights"] and r["weights"]["safe"]) for r in rows) == \
            (0 if extra else 20), [r["weights"] for r in rows]
        return took

    from remote.fleet.leases import set_lease

    set_lease(known[0].split()[0], 6 * 3600)
    in_process(options)  # the gate ships the trainer to the box once; then it is there
    cli("--no-weights")  # the CLI's bytecode is written once, as an install writes it
    runs: dict[str, list[float]] = {k: [] for k in (
        "baseline", "list", "exec", "fleet", "cli", "wexec", "wbaseline", "wfleet", "wcli",
        "cwexec", "cwbaseline", "cwfleet", "cwcli", "wd", "wd_rss", "ver", "ver_rss")}
    for _ in range(opts.repeat):
        listed, execed = slowest_list(), one_exec(False)
        cold()
        cold_checked = one_exec(True)
        checked = steady(lambda: one_exec(True))
        runs["list"].append(listed)
        runs["exec"].append(execed)
        runs["baseline"].append(listed + execed)
        runs["cwexec"].append(cold_checked)
        runs["cwbaseline"].append(listed + cold_checked)
        runs["wexec"].append(checked)
        runs["wbaseline"].append(listed + checked)
        runs["fleet"].append(in_process(bare))
        runs["cli"].append(cli("--no-weights"))
        cold()
        runs["cwfleet"].append(in_process(options))
        runs["wfleet"].append(steady(lambda: in_process(options)))
        cold()
        runs["cwcli"].append(cli())
        runs["wcli"].append(steady(cli))
        took, peak, out = child([str(GPURENT), "watchdog", "--once", "--json"], env)
        assert json.loads(out)["decisions"] == []
        runs["wd"].append(took)
        runs["wd_rss"].append(peak)
        took, peak, _ = child([str(GPURENT), "--version"], env)
        runs["ver"].append(took)
        runs["ver_rss"].append(peak)
    med = {k: statistics.median(v) for k, v in runs.items()}
    result = {k: round(v, 3) for k, v in med.items()}
    result["fleet_ratio"] = round(med["fleet"] / med["baseline"], 2)
    result["cli_ratio"] = round(med["cli"] / med["baseline"], 2)
    # A command pays a process start before it asks anything (``gpurent --version``'s
    # time, measured here): against a baseline started the same way too.
    result["cli_sratio"] = round(med["cli"] / (med["baseline"] + med["ver"]), 2)
    result["wcli_sratio"] = round(med["wcli"] / (med["wbaseline"] + med["ver"]), 2)
    result["cwcli_sratio"] = round(med["cwcli"] / (med["cwbaseline"] + med["ver"]), 2)
    result["wd_ratio"] = round(med["wd"] / med["ver"], 2)
    for key, against in (("wfleet", "wbaseline"), ("wcli", "wbaseline"),
                         ("cwfleet", "cwbaseline"), ("cwcli", "cwbaseline")):
        result[f"{key}_ratio"] = round(med[key] / med["baseline"], 2)
        result[f"{key}_wratio"] = round(med[key] / med[against], 2)
    print(json.dumps(result, indent=1))
    print(f"| `list_fleet`, no weights check (3 providers x 10, 20 boxes at 80 ms) | "
          f"{med['fleet']:.2f} s | {med['baseline']:.2f} s (slowest list {med['list']:.2f} + "
          f"one exec {med['exec']:.2f}) | {result['fleet_ratio']}x |")
    print(f"| `gpurent instances --json --no-weights` (same) | {med['cli']:.2f} s | "
          f"{med['baseline']:.2f} s; + start {med['ver']:.2f} s | {result['cli_ratio']}x; "
          f"{result['cli_sratio']}x |")
    for pre, when in (("", "steady: the kept answer holds"),
                      ("c", "cold: no kept answer, python on every box")):
        print(f"| `list_fleet` with the weights check (default), {when} | "
              f"{med[pre + 'wfleet']:.2f} s | {med['baseline']:.2f} s; "
              f"{med[pre + 'wbaseline']:.2f} s (slowest list + one box's exec, weights "
              f"folded in, {med[pre + 'wexec']:.2f}) | {result[pre + 'wfleet_ratio']}x; "
              f"{result[pre + 'wfleet_wratio']}x |")
        print(f"| `gpurent instances --json` (default), {when.split(':')[0]} | "
              f"{med[pre + 'wcli']:.2f} s | {med['baseline']:.2f} s; "
              f"{med[pre + 'wbaseline']:.2f} s; + start {med['ver']:.2f} s | "
              f"{result[pre + 'wcli_ratio']}x; {result[pre + 'wcli_wratio']}x; "
              f"{result[pre + 'wcli_sratio']}x |")
    print(f"| `gpurent watchdog --once`, nothing to do | {med['wd']:.2f} s, "
          f"{med['wd_rss']:.0f} MB | `gpurent --version` {med['ver']:.2f} s, "
          f"{med['ver_rss']:.0f} MB | {result['wd_ratio']}x |")
    for relay in relays:
        relay.stop()
    for standin in standins.values():
        standin.close()
    server.sshd.stop()
    hub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
