"""The real LibreYOLO through gpurent, over a real OpenSSH server (run by
``bench/libreyolo_interop.sh``, which makes LibreYOLO's venv first).

    .venv/bin/python bench/libreyolo_interop.py --venv ~/.cache/gpurent/libreyolo

The "box" is an sshd on 127.0.0.1 (``tests.fixtures.sshd``) whose sessions have the
LibreYOLO venv first on PATH (its python is the box's ``python3``, the one gpurent
bootstraps) and the Hub stand-in (``tests.fixtures.hub_standin``, not the Hub) as
``HF_ENDPOINT``. The laptop is this checkout's ``gpurent`` and ``Watcher``. Steps, each
checked: launch -> watch -> push -> stop -> resume -> complete; a run taken away from
box A at a milestone resumed on box B (a second sshd) from the Hub by ``gpurent resume
ORG/REPO:NAME --on``; then LibreYOLO's own
``libreyolo monitor`` on runs of our trainer, and the test stand-in
(``tests.fixtures.fake_libreyolo``) against what the real one wrote. Prints one line per
check and a Markdown summary; exit 0 when every check passed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remote.watch.events import MetricsEvent, StatusEvent  # noqa: E402
from remote.watch.watcher import Watcher  # noqa: E402
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin  # noqa: E402
from tests.fixtures.sshd import SSHServer, free_port, make_server  # noqa: E402
from trainer import engines, runfiles  # noqa: E402
from trainer.hub.ledger import read_ledger, sha256_file  # noqa: E402

GPURENT = Path(sys.executable).with_name("gpurent")
RESULTS: list[tuple[str, bool, str]] = []


def check(name: str, ok: bool, detail: str = "") -> bool:
    """Record and print one check."""
    RESULTS.append((name, bool(ok), detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}{': ' + detail if detail else ''}", flush=True)
    return bool(ok)


def until(probe: Callable[[], Any], timeout: float, poll: float = 0.5) -> Any:
    """``probe()``'s first truthy value within ``timeout`` s (``None`` after)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(poll)
    return None


def gpurent(env: dict[str, str], *args: str, timeout: float = 900) -> tuple[int, Any, str]:
    """Run the ``gpurent`` command; ``(rc, parsed --json stdout or text, stderr)``."""
    done = subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                          timeout=timeout, env=env)
    try:
        out: Any = json.loads(done.stdout)
    except ValueError:
        out = done.stdout
    return done.returncode, out, done.stderr


def laptop_env(work: Path, server: SSHServer) -> dict[str, str]:
    """The laptop: a HOME whose ~/.ssh/config names the sshd ``box``, the token in
    HF_TOKEN (sent to the box over stdin), its own state folders."""
    home = work / "laptop"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host box\n  HostName {server.host}\n  Port {server.port}\n  User {server.user}\n"
        f"  IdentityFile {server.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {server.known_hosts}\n")
    return {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "HF_TOKEN": VALID_TOKEN,
            "XDG_STATE_HOME": str(work / "state"), "GPURENT_DATA_DIR": str(work / "data"),
            "PYTHONPATH": str(ROOT)}


@contextlib.contextmanager
def watching(server: SSHServer, run_dir: str) -> Iterator[list[Any]]:
    """A ``Watcher`` of ``run_dir`` over SSH; the events it delivered so far."""
    events: list[Any] = []
    watcher = Watcher(server.connect, run_dir, events.append, poll_interval=0.25)
    watcher.start()
    try:
        yield events
    finally:
        watcher.stop()


def rows_of(events: list[Any]) -> list[dict[str, Any]]:
    return [r for e in list(events) if isinstance(e, MetricsEvent) for r in e.rows]


def statuses(events: list[Any]) -> list[StatusEvent]:
    return [e for e in list(events) if isinstance(e, StatusEvent)]


def watchers_gone(box_home: str, run_dir: str) -> bool:
    """Whether no push watcher of the run lives on the box (its cache is box_home's)."""
    old = os.environ.get(engines.CACHE_ENV)
    os.environ[engines.CACHE_ENV] = f"{box_home}/.cache/gpurent"
    try:
        from trainer.hub.autopush import live_watchers

        return not live_watchers(Path(run_dir))
    finally:
        if old is None:
            os.environ.pop(engines.CACHE_ENV, None)
        else:
            os.environ[engines.CACHE_ENV] = old


def interop(venv: Path, work: Path, hub: HubStandin) -> None:
    """launch -> watch -> push -> stop -> resume -> complete over a real sshd."""
    data = work / "shapes"
    subprocess.run([sys.executable, "-m", "trainer", "shapes", str(data), "--train", "32",
                    "--val", "16", "--imgsz", "64"], check=True, capture_output=True,
                   cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    server = make_server(work / "sshd", box_path=[
        str(venv / "bin"), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin",
        "/bin"], env={"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1",
                      "HF_HOME": str(work / "box-hf"), "OMP_NUM_THREADS": "1"})
    try:
        _interop(server, work, data / "data.yaml", hub)
    finally:
        server.sshd.stop()


def _interop(server: SSHServer, work: Path, data: Path, hub: HubStandin) -> None:
    env = laptop_env(work, server)
    project = f"{server.home}/runs"
    run_dir = f"{project}/ly"
    Path(run_dir).mkdir(parents=True)  # left over and empty: LibreYOLO alone would make ly2
    train = [f"data={data}", "model=yolox-n", "pretrained=False", "imgsz=64", "batch=8",
             "workers=0", "device=cpu", "eval_interval=2", "save_period=5", "hub=org/ly"]
    began = time.monotonic()
    rc, out, err = gpurent(env, "launch", "--engine", "libreyolo", f"box:{project}",
                           "name=ly", "epochs=300", *train, "--wait", "120", "--json")
    ok = rc == 0 and isinstance(out, dict) and out.get("run_dir") == run_dir
    check("launch lands in runs/ly", ok, f"run_dir runs/ly, health {out.get('health')}, the "
          "empty runs/ly left as it was" if ok else f"rc {rc}: {out or err.strip()[-300:]}")
    if rc != 0:
        return
    pid = out["pid"]
    with watching(server, run_dir) as events:
        first = until(lambda: rows_of(events), 300)
        check("watched live at runs/ly", bool(first) and statuses(events)[-1].health.verdict
              in ("live", "slow"), f"first metrics row {time.monotonic() - began:.1f}s after "
              "the launch" if first else "no metrics row in 300s")
        pushed = until(lambda: hub.routes("commit"), 300)
        check("the watcher pushes a new best while it trains", bool(pushed)
              and "best.pt" in hub.repo("org/ly").commits[0].message,
              hub.repo("org/ly").commits[0].message if pushed else "no push in 300s")
        until(lambda: len(rows_of(events)) >= 6, 300)
        rc, out, err = gpurent(env, "stop", f"box:{run_dir}", "--json")
        detail = out.get("detail", "") if isinstance(out, dict) else err.strip()
        check("stop is SIGINT and graceful", rc == 0 and out.get("outcome") == "stopped"
              and "SIGINT" in detail, detail)
        stopped_at = len(Path(run_dir, runfiles.METRICS_FILE).read_text().splitlines())
        seen = until(lambda: [e for e in statuses(events) if e.health.verdict == "stopped"
                              and e.read.get("completed_epochs") == stopped_at], 60)
        raw = runfiles.read_status(run_dir)
        check("stopped with its real epoch count", bool(seen),
              f"status.json says {raw.get('state')} ({(raw.get('error') or {}).get('type')}),"
              f" shown as stopped after {stopped_at} epochs")
        final = until(lambda: watchers_gone(server.home, run_dir), 300)
        ledger = read_ledger(Path(run_dir))
        check("final push after the stop", bool(final) and any(
            e["file"] == "last.pt" for e in ledger), f"{len(hub.repo('org/ly').commits)} "
            "commits; ledger beside the run: "
            f"{', '.join(sorted({e['file'] for e in ledger}))}")
        total = stopped_at + 4
        rc, out, err = gpurent(env, "launch", "--engine", "libreyolo", f"box:{project}",
                               "name=ly", "resume=True", f"epochs={total}", f"data={data}",
                               "hub=org/ly", "--wait", "120", "--json")
        ok = rc == 0 and isinstance(out, dict) and out.get("run_dir") == run_dir
        said = out.get("command", "") if isinstance(out, dict) else ""
        check("resume relaunches into runs/ly", ok, "libreyolo train " + said.split(
            "libreyolo train ", 1)[-1].split(" >", 1)[0] if ok else f"rc {rc}: {err[-300:]}")
        done = until(lambda: runfiles.read_status(run_dir).get("state") == "completed", 600)
        status = runfiles.read_status(run_dir)
        check("the resumed run goes on from where it stopped", bool(done)
              and status.get("start_epoch") == stopped_at + 1 and status.get("pid") != pid,
              f"start_epoch {status.get('start_epoch')}; its status says completed_epochs "
              f"{status.get('completed_epochs')} (this invocation's) of "
              f"{status.get('total_epochs')}")
        until(lambda: watchers_gone(server.home, run_dir), 300)
        until(lambda: [e for e in statuses(events) if e.health.verdict == "completed"], 60)
    rc, out, err = gpurent(env, "runs", f"box:{project}", "--json")
    listed = [r for r in out if r["name"] == "ly"] if isinstance(out, list) else []
    check("a completed run shows metrics/mAP50-95 and all its epochs", bool(listed)
          and listed[0]["best_metric_name"] == "metrics/mAP50-95"
          and listed[0]["epoch"] == listed[0]["total_epochs"],
          f"gpurent runs: {listed[0]['state']}, epoch {listed[0]['epoch']}/"
          f"{listed[0]['total_epochs']}, best {listed[0]['best_metric_name']} "
          f"{listed[0]['best_metric']}" if listed else err)
    best = Path(run_dir, "weights", "best.pt")
    stored = hub.repo("org/ly").files.get("best.pt")
    check("best.pt on the Hub (stand-in) is the box's", stored is not None
          and stored.oid == sha256_file(best), f"sha256 {sha256_file(best)[:16]}")
    ours = sorted(p.name for p in Path(run_dir).iterdir()
                  if p.name not in {"status.json", "metrics.jsonl", "train.log", "weights",
                                    "train_config.yaml", "val", "results.csv",
                                    "summary.json"})
    check("no file of ours in its folder", not ours, ", ".join(ours) or
          f"beside it: {', '.join(sorted(os.listdir(Path(project, '.gpurent'))))}")
    RESULTS.append(("_real", True, json.dumps({
        "status_failed_keys": sorted(raw.fields or {}),
        "status_completed_keys": sorted(status.fields or {}),
        "row_keys": sorted({len(json.loads(line)) for line in
                            Path(run_dir, "metrics.jsonl").read_text().splitlines()})})))


def elsewhere(venv: Path, work: Path, hub: HubStandin) -> None:
    """A run on box A pushes at milestones; A is taken away (its processes SIGKILLed, its
    sshd stopped); ``gpurent resume org/ly2:ly2 --on B`` continues it on box B."""
    servers = [make_server(work / f"sshd-{n}", box_path=[
        str(venv / "bin"), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin",
        "/bin"], env={"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1",
                      "HF_HOME": str(work / f"hf-{n}"), "OMP_NUM_THREADS": "1"})
        for n in ("a", "b")]
    try:
        _elsewhere(servers[0], servers[1], work, work / "shapes" / "data.yaml", hub)
    finally:
        for server in servers:
            server.sshd.stop()


def hub_epoch(hub: HubStandin, repo: str) -> int:
    """The epoch of the Hub's newest status.json (0 before any)."""
    try:
        return int(json.loads(hub.read(repo, "status.json"))["completed_epochs"])
    except (KeyError, ValueError, TypeError):
        return 0


def _elsewhere(a: SSHServer, b: SSHServer, work: Path, data: Path, hub: HubStandin) -> None:
    env = laptop_env(work / "elsewhere", a)
    with open(Path(env["HOME"]) / ".ssh" / "config", "a") as fh:
        fh.write(f"Host box-b\n  HostName {b.host}\n  Port {b.port}\n  User {b.user}\n"
                 f"  IdentityFile {b.key_path}\n  IdentitiesOnly yes\n"
                 f"  UserKnownHostsFile {b.known_hosts}\n")
    # A CPU epoch of this data set takes ~0.4 s: milestones far enough apart for the
    # watcher's 2 s polls, and a kill between two of them.
    epochs, period = 30, 10
    run_a, run_b = Path(a.home, "runs", "ly2"), Path(b.home, "runs", "ly2")
    rc, out, err = gpurent(env, "launch", "--engine", "libreyolo", f"box:{a.home}/runs",
                           "name=ly2", f"epochs={epochs}", f"data={data}", "model=yolox-n",
                           "pretrained=False", "imgsz=64", "batch=8", "workers=0",
                           "device=cpu", "eval_interval=1", "hub=org/ly2",
                           f"hub_period={period}", "--wait", "120", "--json")
    if not check("elsewhere: launch on box A", rc == 0, "" if rc == 0 else err[-300:]):
        return
    pid = out["pid"]
    began = time.monotonic()
    pushed = until(lambda: hub_epoch(hub, "org/ly2") >= period
                   and 0 < len(runfiles.read_metrics(run_a, 0).rows) - hub_epoch(hub, "org/ly2")
                   < period, 900, 0.1)
    rows_a = len(runfiles.read_metrics(run_a, 0).rows)
    safe = hub_epoch(hub, "org/ly2")
    names = sorted(hub.repo("org/ly2").files) if pushed else []
    check("elsewhere: the watcher pushes last.pt and the history at a milestone",
          bool(pushed) and "last.pt" in names and "train_config.yaml" in names,
          f"Hub at epoch {safe} ({', '.join(names)}) "
          f"{time.monotonic() - began:.0f}s after the launch" if pushed else "no milestone")
    if not pushed:
        return
    os.environ[engines.CACHE_ENV] = f"{a.home}/.cache/gpurent"
    from trainer.hub.autopush import live_watchers

    for victim in (*live_watchers(run_a), pid):  # taken away: nothing of A goes on
        with contextlib.suppress(ProcessLookupError):
            os.killpg(victim, 9)
    os.environ.pop(engines.CACHE_ENV)
    a.sshd.stop()
    done_a = len(runfiles.read_metrics(run_a, 0).rows)
    check("elsewhere: box A taken away mid-run, lost work at most one milestone",
          0 <= done_a - safe <= period and done_a < epochs,
          f"A had {done_a} epochs (rows {rows_a} when the Hub held {safe}), the Hub {safe}: "
          f"{done_a - safe} epoch(s) lost, milestone every {period}")
    moved = time.monotonic()
    rc, out, err = gpurent(env, "resume", "org/ly2:ly2", "--on", "box-b", "--project",
                           f"{b.home}/runs", "--data", str(data), "--detach")
    said = [line for line in str(out).splitlines() if "restored" in line or "training" in line]
    check("elsewhere: gpurent resume --on box B restores and relaunches", rc == 0,
          f"{time.monotonic() - moved:.1f}s; " + " / ".join(s.split("] ", 1)[-1] for s in said)
          if rc == 0 else err[-300:])
    if rc != 0:
        return
    done = until(lambda: runfiles.read_status(run_b).get("state") == "completed"
                 and watchers_gone(b.home, str(run_b)), 900)
    epochs_b = [r.get("epoch") for r in runfiles.read_metrics(run_b, 0).rows]
    check("elsewhere: metrics on B hold epochs exactly 1..N", bool(done)
          and epochs_b == list(range(1, epochs + 1)), f"{epochs_b}")
    best = run_b / "weights" / "best.pt"
    stored = hub.repo("org/ly2").files.get("best.pt")
    check("elsewhere: the Hub's final best.pt is B's", best.is_file() and stored is not None
          and stored.oid == sha256_file(best),
          f"sha256 {sha256_file(best)[:16]}" if best.is_file() else "no best.pt on B")
    # Issue 43: the watcher's final push carries the end, whatever its timing.
    files = hub.repo("org/ly2").files
    ended = json.loads(hub.read("org/ly2", "status.json")) if "status.json" in files else {}
    hub_rows = [json.loads(r).get("epoch") for r in hub.read("org/ly2", "metrics.jsonl")
                .decode().splitlines()] if "metrics.jsonl" in files else []
    last = run_b / "weights" / "last.pt"
    check("elsewhere: the Hub holds the end: completed, every row, the final last.pt",
          ended.get("state") == "completed" and hub_rows == list(range(1, epochs + 1))
          and last.is_file() and "last.pt" in files
          and files["last.pt"].oid == sha256_file(last),
          f"state {ended.get('state')}, rows {hub_rows[:1]}..{hub_rows[-1:]}")


def monitor_reads_ours(venv: Path, work: Path) -> None:
    """LibreYOLO's ``libreyolo monitor`` server on runs of our trainer (one completed,
    one stopped by ``gpurent stop``)."""
    project = work / "ours"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "XDG_STATE_HOME": str(work / "state"), "GPURENT_DATA_DIR": str(work / "data")}
    data = work / "shapes" / "data.yaml"
    base = ["model=n", f"data={data}", "imgsz=64", "batch=8", "workers=0", "device=cpu"]
    gpurent(env, "launch", f"local:{project}", "name=done", "epochs=2", *base, "--wait", "0")
    rc, out, _ = gpurent(env, "launch", f"local:{project}", "name=halt", "epochs=100", *base,
                         "--wait", "60", "--json")
    until(lambda: runfiles.read_status(project / "halt").get("completed_epochs"), 300)
    gpurent(env, "stop", f"local:{project / 'halt'}", "--json")
    until(lambda: runfiles.read_status(project / "done").get("state") == "completed", 300)
    port = free_port()
    script = f"""
import json, threading, urllib.request
from libreyolo.ui.train_monitor import serve
httpd, url = serve({str(project)!r}, port={port}, open_browser=False)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
get = lambda p: json.load(urllib.request.urlopen("http://127.0.0.1:{port}" + p, timeout=10))
runs = {{r["id"]: r for r in get("/api/runs")["runs"]}}
out = {{"runs": {{k: [v["state"], v["best_metric_name"]] for k, v in runs.items()}}}}
out["metrics_columns"] = len(get("/api/metrics?run=done")["columns"])
out["log_bytes"] = len(get("/api/log?run=halt")["log"])
print(json.dumps(out))
"""
    done = subprocess.run([str(venv / "bin" / "python"), "-c", script], capture_output=True,
                          text=True, timeout=120)
    try:
        answer = json.loads(done.stdout)
    except ValueError:
        answer = {}
    runs = answer.get("runs", {})
    check("libreyolo monitor reads our trainer's runs",
          runs.get("done", [None])[0] == "completed" and runs.get("halt", [None])[0] == "stopped"
          and answer.get("metrics_columns", 0) > 5 and answer.get("log_bytes", 0) > 0,
          json.dumps(answer) if answer else done.stderr[-300:])


def stand_in_matches(work: Path) -> None:
    """The test stand-in against the real run's shapes (status keys, row sizes)."""
    real = json.loads(next(d for n, _, d in RESULTS if n == "_real"))
    env = {**os.environ, "FAKE_LIBREYOLO_EPOCH_SECONDS": "0.05",
           "FAKE_LIBREYOLO_SAVE_SECONDS": "0.01"}
    fake = [sys.executable, str(ROOT / "tests/fixtures/fake_libreyolo.py"), "train",
            "model=yolox-n", "pretrained=False", f"data={work / 'shapes/data.yaml'}",
            "eval_interval=2", "project=.", "imgsz=64"]
    (work / "fake").mkdir()
    subprocess.run([*fake, "epochs=4", "name=c"], cwd=work / "fake", env=env,
                   capture_output=True, timeout=120)
    proc = subprocess.Popen([*fake, "epochs=1000", "name=i"], cwd=work / "fake", env=env,
                            stderr=subprocess.DEVNULL)
    until(lambda: runfiles.read_status(work / "fake/i").get("completed_epochs"), 60, 0.05)
    proc.send_signal(2)
    proc.wait(60)
    completed = sorted(runfiles.read_status(work / "fake/c").fields or {})
    failed = sorted(runfiles.read_status(work / "fake/i").fields or {})
    rows = sorted({len(json.loads(line))
                   for line in (work / "fake/c/metrics.jsonl").read_text().splitlines()})
    same = (completed == real["status_completed_keys"] and failed == real["status_failed_keys"]
            and rows == real["row_keys"])
    check("the test stand-in writes what the real one wrote", same,
          f"row sizes {rows} vs {real['row_keys']}" if same else
          f"completed {set(completed) ^ set(real['status_completed_keys'])}, failed "
          f"{set(failed) ^ set(real['status_failed_keys'])}, rows {rows} vs {real['row_keys']}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--venv", type=Path, required=True, help="LibreYOLO's venv")
    args = p.parse_args()
    version = subprocess.run([str(args.venv / "bin" / "libreyolo"), "--version"],
                             capture_output=True, text=True, timeout=300).stdout.split()
    check("libreyolo is 1.6.0", version[-1:] == ["1.6.0"], " ".join(version))
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="libreyolo-interop-") as tmp:
        work = Path(tmp)
        hub = HubStandin(work / "hub").start()
        try:
            interop(args.venv, work, hub)
            elsewhere(args.venv, work, hub)
            monitor_reads_ours(args.venv, work)
            if any(n == "_real" for n, _, _ in RESULTS):
                stand_in_matches(work)
        finally:
            hub.stop()
    shown = [r for r in RESULTS if not r[0].startswith("_")]
    passed = sum(ok for _, ok, _ in shown)
    print(f"\n{passed}/{len(shown)} checks passed in {time.monotonic() - started:.0f}s\n")
    print("| check | result | detail |\n|---|---|---|")
    for name, ok, detail in shown:
        print(f"| {name} | {'pass' if ok else 'FAIL'} | {detail.replace('|', '/')} |")
    return 0 if passed == len(shown) else 1


if __name__ == "__main__":
    sys.exit(main())
