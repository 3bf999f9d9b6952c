"""The box-side guard end to end: a real ``python -m trainer guard`` process watching a
run directory, acting through a provider stand-in; armed and disarmed with
``remote.runs.guard`` locally and over the sshd test box."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from remote.fleet.leases import Lease, write_on_box
from remote.runs.guard import GuardError, arm_guard, disarm_guard, read_guard
from remote.transport.local import LocalTransport
from tests.fixtures.gpubox import FakeSmi, quiet_lines
from tests.fixtures.guard_runs import ask_hub, assert_no_secret, finish_run, make_run
from tests.fixtures.hub_standin import record_push as hub_record_push  # what a push leaves
from tests.fixtures.paths import ROOT
from trainer import procid, runfiles
from trainer.guard import ring
from trainer.guard.state import GuardError as BoxGuardError
from trainer.guard.state import parse_when

#: ``org/run`` is the user's repository (``record_push`` pushes there).
FAST = ["--poll", "0.1", "--confirm-timeout", "10", "--hub-repo", "org/run"]


def wait_for(what: str, check: Callable[[], object], timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@pytest.fixture
def trainer_pid() -> Iterator[subprocess.Popen[bytes]]:
    """A live process standing in for the trainer (kill it to make the run die)."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def start_guard(run_dir: Path, standin, iid: str, *args: str,
                key: str | None = None) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "guard", str(run_dir), "--provider",
         standin.provider, "--instance", iid, "--key-stdin", "--base-url", standin.base_url,
         *FAST, *args],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write(((standin.key if key is None else key) + "\n").encode())
    proc.stdin.close()
    return proc


def guard_state(run_dir: Path) -> dict:
    path = run_dir / "guard.json"
    return json.loads(path.read_text()) if path.exists() else {}


def finished(proc: subprocess.Popen[bytes], timeout: float = 90.0) -> tuple[int, str]:
    """The guard's exit code and stderr once it ended; one still running after ``timeout``
    (a loaded machine starts Python slowly) is killed, never left behind, and fails."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(f"the guard did not end in {timeout:g}s") from None
    assert proc.stderr is not None
    return proc.returncode, proc.stderr.read().decode()


def test_run_completes_final_push_then_destroy(tmp_path, vast_standin, trainer_pid,
                                               hub_standin, monkeypatch):
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, trainer_pid.pid)
    ask_hub(hub_standin, monkeypatch, tmp_path / "hf")
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "destroy",
                       "--push-wait", "60")
    wait_for("armed", lambda: guard_state(run_dir).get("state") == "armed")
    assert guard_state(run_dir)["armed"] is True and guard_state(run_dir)["then"] == "destroy"
    finish_run(writer, trainer_pid.pid)  # the trainer is still pushing: not safe yet
    wait_for("waiting for the push",
             lambda: guard_state(run_dir).get("state") == "waiting-for-push")
    assert not vast_standin.calls("DELETE")
    hub_record_push(hub_standin, run_dir, ("best.pt", "status.json"), epoch=3)  # its end
    rc, err = finished(proc)
    assert rc == 0, err
    assert len(vast_standin.calls("DELETE")) == 1 and vast_standin.meter(iid).rate_now == 0
    state = guard_state(run_dir)
    assert state["state"] == "done" and state["armed"] is False
    assert state["outcome"]["action"] == "destroy" and state["outcome"]["confirmed"] is True
    log = (run_dir / "guard.log").read_text()
    for words in ("armed: when done then destroy", "run is completed", "waiting up to",
                  "weights safe", "is destroyed (confirmed by the API)"):
        assert words in log
    assert_no_secret(run_dir, vast_standin.key)


def test_weights_on_the_hub_before_the_end_wait_for_the_final_push(
        tmp_path, vast_standin, trainer_pid, hub_standin, monkeypatch):
    """A milestone put the newest weights on the Hub before the run ended (issue 43): the
    run's end is not there yet (the Hub's copy says running at an older epoch), so the
    guard waits for the final push before it destroys."""
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, trainer_pid.pid)
    ask_hub(hub_standin, monkeypatch, tmp_path / "hf")
    hub_record_push(hub_standin, run_dir, ("best.pt", "status.json"))  # a milestone
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "destroy",
                       "--push-wait", "60")
    wait_for("armed", lambda: guard_state(run_dir).get("state") == "armed")
    finish_run(writer, trainer_pid.pid)  # best.pt is on the Hub; the final push is not
    wait_for("waiting for the push",
             lambda: guard_state(run_dir).get("state") == "waiting-for-push")
    assert "final push" in guard_state(run_dir)["last_decision"]
    assert not vast_standin.calls("DELETE")
    hub_record_push(hub_standin, run_dir, ("best.pt", "status.json"), epoch=3)  # its end
    rc, err = finished(proc)
    assert rc == 0, err
    assert len(vast_standin.calls("DELETE")) == 1
    assert guard_state(run_dir)["outcome"]["action"] == "destroy"


def test_dead_run_with_unsaved_weights_is_stopped_not_destroyed(tmp_path, runpod_standin,
                                                                 trainer_pid):
    pid = runpod_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, trainer_pid.pid)
    proc = start_guard(run_dir, runpod_standin, pid, "--when", "dead", "--then", "destroy",
                       "--push-wait", "1")
    wait_for("armed", lambda: guard_state(run_dir).get("state") == "armed")
    trainer_pid.kill()  # SIGKILL: status.json still says running
    trainer_pid.wait()
    rc, err = finished(proc)
    assert rc == 0, err
    assert not runpod_standin.calls("DELETE")
    stops = runpod_standin.calls("POST", "/action")
    assert [s.body for s in stops] == [{"action": "stop"}]
    assert runpod_standin.instances[pid]["status"] == "EXITED"
    log = (run_dir / "guard.log").read_text()
    assert "run is dead" in log
    assert "NOT destroying: best.pt is not safe" in log and "stopping instead" in log
    state = guard_state(run_dir)
    assert state["outcome"]["action"] == "stop" and state["outcome"]["confirmed"] is True
    assert state["outcome"]["trigger"] == "dead"


def test_a_ledger_the_hub_does_not_confirm_is_stopped_not_destroyed(
        tmp_path, vast_standin, hub_standin, monkeypatch):
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999)
    finish_run(writer, 999_999_999)
    ask_hub(hub_standin, monkeypatch, tmp_path / "hf")
    hub_record_push(hub_standin, run_dir, ("best.pt", "status.json"))  # its end
    hub_standin.delete_repo("org/run")  # the ledger now claims what the Hub lacks
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "destroy",
                       "--push-wait", "1")
    rc, err = finished(proc)
    assert rc == 0, err
    assert not vast_standin.calls("DELETE")
    assert [r.body for r in vast_standin.calls("PUT")] == [{"state": "stopped"}]
    log = (run_dir / "guard.log").read_text()
    assert "NOT destroying" in log and "not on the Hub" in log
    assert str(run_dir / "weights" / "best.pt") in log
    assert hub_standin.routes("paths_info")


def test_max_hours_fires_on_a_run_that_never_ends(tmp_path, lambda_standin, trainer_pid):
    iid = lambda_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, trainer_pid.pid, best=False)  # no best.pt: nothing to lose
    proc = start_guard(run_dir, lambda_standin, iid, "--when", "done", "--then", "destroy",
                       "--max-hours", "0.0005")  # 1.8 s
    rc, err = finished(proc)
    assert rc == 0, err
    assert trainer_pid.poll() is None  # the run never ended
    terminate = lambda_standin.calls("POST", "terminate")
    assert [t.body for t in terminate] == [{"instance_ids": [iid]}]
    log = (run_dir / "guard.log").read_text()
    assert "trigger max-hours: --max-hours 0.0005 reached" in log
    assert guard_state(run_dir)["outcome"]["trigger"] == "max-hours"


def test_the_laptops_lease_on_the_box_fires_the_guard(tmp_path, vast_standin, trainer_pid):
    """``gpurent lease`` writes CACHE/lease.json; the guard acts once it runs out and not
    before, on a run that never ends (the box ends its own billing with the laptop
    closed)."""
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, trainer_pid.pid, best=False)  # no best.pt: no push to wait for
    box = LocalTransport()  # the box's cache is this machine's ($GPURENT_CACHE_DIR)
    write_on_box(box, Lease(f"vast:{iid}", time.time() + 300, "stop"))
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "stop")
    wait_for("the guard's first look at the run", lambda: proc.poll() is not None or str(
        guard_state(run_dir).get("last_decision") or "").startswith("run is "))
    # Five minutes left: it watches on.
    assert proc.poll() is None and vast_standin.calls("PUT") == [], guard_state(run_dir)
    lease = Lease(f"vast:{iid}", time.time() + 2.0, "stop")  # the laptop shortens it
    write_on_box(box, lease)
    deadline = time.monotonic() + lease.left()
    rc, err = finished(proc)
    assert rc == 0, err
    assert trainer_pid.poll() is None  # the run never ended
    assert [r.body for r in vast_standin.calls("PUT")] == [{"state": "stopped"}]
    late = vast_standin.meter(iid).full_rate_until(0) - deadline
    # Never before the deadline; after it, within a poll and the stop's few calls.
    assert 0.0 <= late <= 10.0, f"billing ended {late:.2f} s after the deadline"
    assert guard_state(run_dir)["outcome"]["trigger"] == "lease"
    assert f"the lease ran out at {lease.until_at}" in (run_dir / "guard.log").read_text()


def test_a_failed_run_ends_the_watch(tmp_path, vast_standin):
    """A run that failed is over: the guard acts on it at once rather than watching on
    (a crashed run's box would bill until --max-hours, here unset)."""
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    finish_run(writer, 999_999_999, state="failed")
    log = run_dir / "guard.log"
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "destroy")
    try:
        wait_for("the failed run seen", lambda: log.exists() and "run is failed" in
                 log.read_text())
        # A guard still watching would see this at its next poll and act on it instead.
        finish_run(writer, 999_999_999, state="completed")
        rc, err = finished(proc)
    finally:
        proc.kill()
    assert rc == 0, err
    text = log.read_text()
    assert "trigger done: the run is failed" in text and "run is completed" not in text
    assert len(vast_standin.calls("DELETE")) == 1 and vast_standin.meter(iid).rate_now == 0
    assert guard_state(run_dir)["outcome"]["confirmed"] is True


def test_max_hours_with_unsafe_weights_stops_not_destroys(tmp_path, vast_standin,
                                                          trainer_pid):
    """The lifetime limit does not wait for a push, and it never destroys unsafe
    weights either: it stops the instance, which keeps the disk."""
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, trainer_pid.pid)  # a best.pt that is on no Hub
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "destroy",
                       "--max-hours", "0.0005")  # 1.8 s
    rc, err = finished(proc)
    assert rc == 0, err
    assert trainer_pid.poll() is None  # the run never ended
    assert not vast_standin.calls("DELETE")
    assert [r.body for r in vast_standin.calls("PUT")] == [{"state": "stopped"}]
    assert vast_standin.instances[iid]["actual_status"] == "stopped"
    state = guard_state(run_dir)
    assert state["outcome"]["trigger"] == "max-hours"
    assert state["outcome"]["action"] == "stop" and state["outcome"]["confirmed"] is True
    assert "NOT destroying: best.pt is not safe" in (run_dir / "guard.log").read_text()


def test_idle_box_is_stopped(tmp_path, vast_standin):
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, 999_999_999, best=False)  # a pid that does not exist: no training
    proc = start_guard(run_dir, vast_standin, iid, "--when", "idle=0.01", "--then", "stop")
    rc, err = finished(proc)
    assert rc == 0, err
    assert [r.body for r in vast_standin.calls("PUT")] == [{"state": "stopped"}]
    assert vast_standin.instances[iid]["actual_status"] == "stopped"
    assert "trigger idle: idle for" in (run_dir / "guard.log").read_text()


def test_the_guard_keeps_the_gpu_ring_and_judges_idleness_from_the_same_rows(
        tmp_path, vast_standin, monkeypatch):
    """Each poll appends nvidia-smi's sample (a script here) to the box's GPU ring, cut
    back when full; GPUs busy keep the guard from acting (though no trainer lives: as
    ``test_idle_box_is_stopped`` shows, that alone is idle), quiet ones make it act."""
    smi = FakeSmi.install(tmp_path / "bin")
    smi.answer(50, 0, used=2048)
    monkeypatch.setenv("PATH", f"{smi.bin}{os.pathsep}{os.environ['PATH']}")
    path = Path(os.environ["GPURENT_CACHE_DIR"]) / ring.RING_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(quiet_lines(2 * ring.KEEP * 5, 5, 5))  # full: the next sample cuts it
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, 999_999_999, best=False)  # no training process, no log growth
    proc = start_guard(run_dir, vast_standin, iid, "--when", "idle=0.01", "--then", "stop")

    def busy_samples() -> list[ring.Sample]:
        return [s for s in ring.parse(path.read_bytes()) if s.gpus[0].util == 50]

    # Busy for twice the idle limit (0.6 s) at a 0.1 s poll: the guard does not act.
    seen = wait_for("busy samples", lambda: len(busy_samples()) >= 12 and busy_samples())
    assert seen[-1].gpus == (ring.GpuUse(0, 50.0, 2048.0, 81559.0),
                             ring.GpuUse(1, 0.0, 2048.0, 81559.0))
    kept = ring.parse(path.read_bytes())  # the first sample cut the full ring back
    assert len(kept) == ring.KEEP - 1 + sum(1 for s in kept if s.gpus[0].util == 50)
    assert proc.poll() is None and not vast_standin.calls("PUT")
    smi.answer(2, 0)
    rc, err = finished(proc)
    assert rc == 0, err
    assert vast_standin.instances[iid]["actual_status"] == "stopped"
    assert "no GPU busy" in (run_dir / "guard.log").read_text()


def test_destroy_that_keeps_billing_is_an_alarm(tmp_path, vast_standin):
    iid = vast_standin.add_instance()
    vast_standin.never_gone(iid)
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    finish_run(writer, 999_999_999)
    proc = subprocess.Popen(
        [sys.executable, "-m", "trainer", "guard", str(run_dir), "--provider", "vast",
         "--instance", iid, "--key-stdin", "--base-url", vast_standin.base_url, "--when",
         "done", "--then", "destroy", "--poll", "0.1", "--confirm-timeout", "1"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
        stderr=subprocess.PIPE, stdout=subprocess.PIPE)
    proc.communicate(vast_standin.key.encode() + b"\n", timeout=30)
    assert proc.returncode == 1
    state = guard_state(run_dir)
    assert state["state"] == "alarm" and state["outcome"]["alarm"] is True
    assert "ALARM" in (run_dir / "guard.log").read_text()


def test_sigterm_disarms_without_acting(tmp_path, vast_standin, trainer_pid):
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, trainer_pid.pid)
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "destroy")
    wait_for("armed", lambda: guard_state(run_dir).get("state") == "armed")
    proc.send_signal(signal.SIGTERM)
    rc, err = finished(proc)
    assert rc == 0, err
    assert guard_state(run_dir)["state"] == "disarmed"
    assert not vast_standin.calls("DELETE") and not vast_standin.calls("PUT")


def test_refuses_to_arm_with_a_bad_key(tmp_path, vast_standin):
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, 999_999_999)
    proc = start_guard(run_dir, vast_standin, iid, "--when", "done", "--then", "stop",
                       key="not-the-key")
    rc, err = finished(proc)
    assert rc == 2
    assert err.count("\n") == 1 and "check the API key" in err and "Traceback" not in err
    state = guard_state(run_dir)
    assert state["state"] == "error" and "not armed" in state["last_decision"]
    assert_no_secret(run_dir, "not-the-key")


def test_bad_options_are_one_line_errors(tmp_path, lambda_standin):
    run_dir = tmp_path / "run"
    make_run(run_dir, 999_999_999)
    iid = lambda_standin.add_instance()
    proc = start_guard(run_dir, lambda_standin, iid, "--when", "done", "--then", "stop")
    rc, err = finished(proc)
    assert rc == 2 and "cannot stop an instance: use --then destroy" in err
    assert not lambda_standin.requests
    for bad in ("idle=0", "idle=x", "soon", ""):
        with pytest.raises(BoxGuardError):
            parse_when(bad)
    assert parse_when("idle=30") == ("idle", 30.0)


def test_arm_and_disarm_through_a_transport(tmp_path, vast_standin, trainer_pid):
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    make_run(run_dir, trainer_pid.pid)
    box = LocalTransport()
    state = arm_guard(box, str(run_dir), "done", "destroy", 12.0, "vast", iid,
                      vast_standin.key, send_account_key=True,
                      base_url=vast_standin.base_url, poll=0.1)
    assert state.watching and state.when == "done" and state.max_hours == 12.0
    assert state.pid_start == procid.start_ticks(state.pid)  # checked before the disarm
    assert state.summary() == "guard armed: when done then destroy, hard limit 12 h"
    with pytest.raises(GuardError, match="already armed"):
        arm_guard(box, str(run_dir), "done", "stop", None, "vast", iid, vast_standin.key,
                  send_account_key=True, base_url=vast_standin.base_url)
    final = disarm_guard(box, str(run_dir))
    assert final is not None and final.state == "disarmed" and not final.watching
    assert not vast_standin.calls("DELETE")
    with pytest.raises(GuardError, match="idle=MINUTES"):
        arm_guard(box, str(run_dir), "idle", "stop")


def test_guard_over_ssh_on_the_test_box(sshd, tmp_path, runpod_standin):
    """Armed over SSH with the key on stdin, the guard runs with the box's plain
    python3 (only the uploaded ``trainer`` package) and destroys a finished run without
    weights (its plain python3 has no huggingface_hub to confirm a push with)."""
    from remote.link.bootstrap import bootstrap_box

    pid = runpod_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    finish_run(writer, 999_999_999)
    # Runs other tests launched on this shared test box are not this test's.
    (Path(sshd.home) / runfiles.RUN_REGISTRY).unlink(missing_ok=True)
    os.chmod(tmp_path, 0o755)
    box = sshd.connect()
    try:
        bootstrap_box(box, python="/usr/bin/python3", preflight=False, install=False)
        state = arm_guard(box, str(run_dir), "done", "destroy", None, "runpod", pid,
                          runpod_standin.key, send_account_key=True,
                          base_url=runpod_standin.base_url, poll=0.1)
        assert state.pid is not None
        wait_for("the destroy", lambda: (read_guard(box, str(run_dir)) or state).state
                 not in ("armed", "waiting-for-push", "acting"))
        final = read_guard(box, str(run_dir))
    finally:
        box.close()
    assert final is not None and final.state == "done", final
    assert final.outcome and final.outcome["action"] == "destroy"
    assert len(runpod_standin.calls("DELETE")) == 1
    assert runpod_standin.instances.get(pid, {"status": "TERMINATED"})["status"] == "TERMINATED"
    assert_no_secret(run_dir, runpod_standin.key)
