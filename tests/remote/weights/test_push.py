"""``trainer push`` / ``trainer safe`` / ``gpurent push`` against the Hub stand-in, run as
real subprocesses with the real huggingface_hub client."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from remote.transport.local import LocalTransport
from remote.weights.pull import pull_weights
from remote.weights.push import PushFailed, push_from_box
from remote.weights.safety import weights_safety
from tests.fixtures.hub_standin import (
    VALID_TOKEN,
    HubStandin,
    hub_env,
    write_checkpoint,
    write_run,
)
from tests.fixtures.paths import ROOT
from trainer.hub import safe as hub_safe
from trainer.hub.ledger import read_ledger

MB = 1024 * 1024


def run_measured(cmd: list[str], env: dict[str, str],
                 stdin: bytes | None = None) -> tuple[int, str, str, float]:
    """Run ``cmd``; return exit code, stdout, stderr and its peak RSS in MiB (from the
    kernel's accounting of exactly this child, via wait4)."""
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out_err: dict[str, bytes] = {}

    def drain() -> None:
        assert proc.stdout is not None and proc.stderr is not None
        if stdin is not None:
            assert proc.stdin is not None
            proc.stdin.write(stdin)
        assert proc.stdin is not None
        proc.stdin.close()
        out_err["err"] = proc.stderr.read()

    reader = threading.Thread(target=drain)
    reader.start()
    assert proc.stdout is not None
    out = proc.stdout.read()
    reader.join(60)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, out.decode(), out_err["err"].decode(), usage.ru_maxrss / 1024


def trainer_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "trainer", *args]


def test_push_50mb_checkpoint_via_lfs_with_bounded_memory(hub_standin: HubStandin,
                                                          tmp_path: Path) -> None:
    run = tmp_path / "proj" / "run1"
    sha = write_run(run, best_size=50 * MB, epoch=7, best_epoch=5, metric=0.61)
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN)
    # Baseline: the same interpreter with the same Hub client loaded, pushing nothing.
    rc, _, err, baseline = run_measured([sys.executable, "-c", (
        "from trainer.hub.client import import_hub; hub = import_hub(); "
        "hub.HfApi; from huggingface_hub import _commit_api, lfs")], env)
    assert rc == 0, err
    rc, out, err, peak = run_measured(trainer_cmd("push", str(run), "--repo", "org/m",
                                                  "--files", "best.pt", "--json"), env)
    assert rc == 0, err
    result = json.loads(out)
    # The bytes went through the LFS path: batch, a PUT to storage without the token, verify.
    assert [r.route for r in hub_standin.requests] == [
        "create", "preupload", "batch", "upload", "verify", "commit"]
    assert not hub_standin.routes("upload")[0].has_auth
    stored = hub_standin.repo("org/m").files["best.pt"]
    assert stored.lfs and stored.oid == sha and stored.size == 50 * MB
    assert hub_standin.repo("org/m").private  # private unless --public
    # A whole-file read would add >= 50 MiB on top of the interpreter and client.
    assert peak - baseline < 20, f"push peaked at {peak:.1f} MiB vs {baseline:.1f} MiB"
    (entry,) = read_ledger(run)
    assert entry["sha256"] == sha == hashlib.sha256(stored.blob.read_bytes()).hexdigest()
    assert entry["size"] == 50 * MB and entry["repo"] == "org/m"
    assert entry["commit"] == hub_standin.repo("org/m").head == result["commit"]
    assert entry["epoch"] == 5  # best.pt belongs to the best epoch
    assert "epoch 7" in hub_standin.repo("org/m").commits[-1].message
    assert "mAP50-95 0.61" in hub_standin.repo("org/m").commits[-1].message
    assert not list(run.glob(".hub-push-*"))  # the snapshot is cleaned up


def test_wrong_token_is_one_line_and_leaves_no_ledger(hub_standin: HubStandin,
                                                      tmp_path: Path) -> None:
    run = tmp_path / "run1"
    write_run(run)
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN="hf_wrongwrongwrong")
    result = subprocess.run(trainer_cmd("push", str(run), "--repo", "org/m"), env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "401" in lines[0] and "Invalid credentials" in lines[0]
    assert "Traceback" not in result.stderr and "hf_wrong" not in result.stderr
    assert not (run / "hub.json").exists()
    assert ("model", "org/m") not in hub_standin.repos


def test_missing_token_and_bad_repo_are_refused_before_any_request(
        hub_standin: HubStandin, tmp_path: Path) -> None:
    run = tmp_path / "run1"
    write_run(run)
    env = hub_env(hub_standin, tmp_path / "hf")
    for args, needle in ((["--repo", "org/m"], "no Hub token"),
                         (["--repo", "not-a-repo"], "ORG/NAME"),
                         (["--repo", "org/m", "--files", "../x.pt"], "not a file name")):
        result = subprocess.run(trainer_cmd("push", str(run), *args), env=env, cwd=ROOT,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2
        assert needle in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert hub_standin.requests == []


def _scan_cmdlines(token: bytes, stop: threading.Event, seen: dict[str, int],
                   mine: bytes) -> None:
    """Count, until ``stop``, the processes with ``token`` in their argv (any: a leak) and
    this test's push processes (their environment holds ``mine``) with it in theirs
    (another test's push beside this one may hold the token in its environment)."""
    while not stop.is_set():
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                    cmdline = fh.read()
            except OSError:
                continue
            if token in cmdline:
                seen["leaks"] += 1
            if b"trainer\0push" in cmdline:
                try:
                    with open(f"/proc/{entry.name}/environ", "rb") as fh:
                        environ = fh.read().split(b"\0")
                except OSError:
                    continue
                if mine in environ:
                    seen["push_seen"] += 1
                    seen["env_leaks"] += any(token in value for value in environ)
        seen["scans"] += 1


def test_token_travels_on_stdin_only(hub_standin: HubStandin, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run1"
    write_run(run, best_size=2 * MB)
    hf_home = tmp_path / "hf"
    for key in [k for k in os.environ if k.startswith("HF_")]:
        monkeypatch.delenv(key)
    for key, value in hub_env(hub_standin, hf_home).items():
        monkeypatch.setenv(key, value)
    token = VALID_TOKEN.encode()
    stop, seen = threading.Event(), {"leaks": 0, "push_seen": 0, "env_leaks": 0, "scans": 0}
    scanner = threading.Thread(target=_scan_cmdlines,
                               args=(token, stop, seen, b"HF_HOME=" + bytes(hf_home)))
    hub_standin.hold("commit")  # keep the push alive while /proc is watched
    scanner.start()
    release = threading.Timer(1.5, hub_standin.release, args=("commit",))
    release.start()
    try:
        result = push_from_box(LocalTransport(), str(run), "org/m", VALID_TOKEN)
    finally:
        stop.set()
        scanner.join(30)
        release.cancel()
    assert result["ok"] and result["commit"] == hub_standin.repo("org/m").head
    assert seen["push_seen"] > 0, seen  # the scanner did watch the push process
    assert seen["leaks"] == 0 and seen["env_leaks"] == 0, seen
    for base in (run, hf_home):
        for path in base.rglob("*"):
            if path.is_file():
                assert token not in path.read_bytes(), path
    assert read_ledger(run)[0]["commit"] == result["commit"]


def test_push_from_box_reports_failure_in_one_line(hub_standin: HubStandin,
                                                   tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run1"
    write_run(run)
    for key, value in hub_env(hub_standin, tmp_path / "hf").items():
        monkeypatch.setenv(key, value)
    with pytest.raises(PushFailed) as failed:
        push_from_box(LocalTransport(), str(run), "org/m", "hf_not_the_token")
    assert "401" in str(failed.value) and "\n" not in str(failed.value)
    with pytest.raises(ValueError):
        push_from_box(LocalTransport(), str(run), "org/m", "")
    assert not (run / "hub.json").exists()


def test_safe_follows_best_pt_by_content(hub_standin: HubStandin, tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run1"
    sha = write_run(run, best_epoch=2)
    [listed] = hub_safe.inventory([run])["runs"]
    [best] = listed["files"]
    assert best["required"] and best["sha256"] == sha and best["hub"] == []
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN)
    for _ in range(2):  # the second push changes nothing: no new commit, same answer
        subprocess.run(trainer_cmd("push", str(run), "--repo", "org/m", "--json"), env=env,
                       cwd=ROOT, check=True, capture_output=True, timeout=60)
    assert len(hub_standin.repo("org/m").commits) == 1
    # best.pt, results.csv and status.json, twice.
    assert [e["commit"] for e in read_ledger(run)] == [hub_standin.repo("org/m").head] * 6
    # `safe` needs nothing but the standard library (-S: no site-packages).
    result = subprocess.run([sys.executable, "-S", "-m", "trainer", "safe", str(run),
                             "--json"], cwd=ROOT, env=env, capture_output=True, text=True,
                            timeout=60)
    [after] = json.loads(result.stdout)["runs"][0]["files"]
    assert after["sha256"] == sha and after["hub"][0]["epoch"] == 2
    assert after["hub"][0]["commit"] == hub_standin.repo("org/m").head
    # Through the laptop side too, which asks the Hub whether the push is there.
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    safety = weights_safety(LocalTransport(), str(run), repos=["org/m"])  # the user's
    assert safety.safe and safety.where == "hub" and safety.epoch == 2
    assert [r.route for r in hub_standin.requests][-1] == "paths_info"
    # A new best replaces the file: no longer safe, and the old push is not a copy of it.
    new_sha = write_checkpoint(run / "weights" / "best.pt", 4096)
    [changed] = hub_safe.inventory([run])["runs"][0]["files"]
    assert changed["sha256"] == new_sha != sha and changed["hub"] == []
    safety = weights_safety(LocalTransport(), str(run))
    assert not safety.safe and safety.where is None and "never pushed" in safety.reason
    # Pulled to this laptop (verified, in the pull ledger): safe there.
    pull_weights(LocalTransport(), str(run), tmp_path / "pulled")
    safety = weights_safety(LocalTransport(), str(run))
    assert safety.safe and safety.where == "laptop"


def test_gpurent_push_local_cli(hub_standin: HubStandin, tmp_path: Path) -> None:
    run = tmp_path / "run1"
    write_run(run)
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN)
    result = subprocess.run([sys.executable, "-m", "remote.cli", "push", "local", str(run),
                             "--repo", "org/cli", "--files", "best.pt", "--public",
                             "--json"], env=env, cwd=ROOT, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert [f["file"] for f in answer["files"]] == ["best.pt"]
    assert not hub_standin.repo("org/cli").private
    # HOST:RUN, as every other command takes it (here the run's plain path: this machine).
    result = subprocess.run([sys.executable, "-m", "remote.cli", "push", f"local:{run}",
                             "--repo", "org/cli2", "--files", "best.pt", "--json"], env=env,
                            cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["repo"] == "org/cli2"
    env.pop("HF_TOKEN")
    env["HF_HOME"] = str(tmp_path / "empty-hf-home")
    result = subprocess.run([sys.executable, "-m", "remote.cli", "push", "local", str(run),
                             "--repo", "org/cli"], env=env, cwd=ROOT, capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 2 and "no Hugging Face token" in result.stderr
