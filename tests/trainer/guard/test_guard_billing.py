"""The guard never leaves a crashed or abandoned box billing. Real CPU training runs, a
real ``python -m trainer guard`` armed through ``remote.runs.guard`` (key and webhooks on
stdin), and the provider stand-ins' billing clocks (``Meter``) as the judge: a run killed
with ``kill -9``, a provider API that answers 500 for a while, a destroy the provider
accepts and ignores. Outages and deadlines are compressed (seconds for minutes); the code
path is the one a real box runs."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.cli import main as gpurent
from remote.runs.guard import acknowledge_alarm, arm_guard, read_guard
from remote.transport.local import LocalTransport
from tests.fixtures.guard_kit import (
    guard_over,
    kill_9,
    start_training,
    stop_guard,
    wait_until,
)
from tests.fixtures.guard_runs import ask_hub, finish_run, make_run
from tests.fixtures.hub_standin import record_push
from trainer import runfiles


@pytest.fixture
def runs(tmp_path: Path) -> Iterator[Path]:
    """Where the training runs go; any guard a failed test left running is killed."""
    yield tmp_path
    for run_dir in (tmp_path / "runs").glob("*"):
        stop_guard(run_dir)


def live_run(cwd: Path, data: Path, name: str):
    """A real training run past its first epoch (200 epochs: it will not end alone)."""
    proc = start_training(cwd, data, name, epochs=200)
    run_dir = cwd / "runs" / name
    wait_until("the first epoch", lambda: runfiles.read_status(run_dir).get(
        "completed_epochs"), timeout=300, proc=proc)
    return proc, run_dir


def arm(standin, iid: str, run_dir: Path, then: str, **tuning):
    state = arm_guard(LocalTransport(), str(run_dir), "done", then, None, standin.provider,
                      iid, standin.key, send_account_key=True, base_url=standin.base_url, **tuning)
    assert state.watching, state
    return state


def test_kill_9_is_stopped_within_two_polls_with_the_default_when(runs, shapes_data,
                                                                   provider_standin):
    """The 3 a.m. crash: --when done (the TUI's default) covers a dead run; the weights
    are not on the Hub, and --then stop keeps them on the disk."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    proc, run_dir = live_run(runs, shapes_data, "crash")
    try:
        poll = 2.0
        arm(vast, iid, run_dir, "stop", poll=poll)
        wait_until("the guard to see the live run", lambda: "run is live" in
                   (run_dir / "guard.log").read_text())
        killed = kill_9(proc)
    finally:
        if proc.poll() is None:
            kill_9(proc)
    final = wait_until("the guard to act", lambda: guard_over(run_dir), timeout=60)
    meter = vast.meter(iid)
    assert meter.full_rate_until(killed) is not None, "still billing the running price"
    # Within two polls of the crash, and the confirming poll that the stand-in's stop
    # waits for, one Vast show interval (2 s) after the look before the stop.
    assert meter.full_rate_seconds(killed) < 2 * poll + 2.0
    assert meter.rate_now == pytest.approx(250 * 0.20 / 720)  # the disk, nothing more
    assert final["state"] == "done" and final["outcome"]["trigger"] == "dead"
    assert final["outcome"]["action"] == "stop" and final["outcome"]["confirmed"]
    assert [r.body for r in vast.calls("PUT")] == [{"state": "stopped"}]
    assert not vast.calls("DELETE")
    log = (run_dir / "guard.log").read_text()
    assert "run is dead: pid" in log and "trigger dead" in log


def test_an_api_outage_is_outlasted_and_the_instance_stopped_when_it_recovers(
        runs, shapes_data, provider_standin):
    """Every request answers 500 for a while (3 minutes on a real box, compressed
    here): the guard keeps trying with a capped backoff and stops the pod once the API
    answers again, instead of giving up with the pod billing."""
    runpod = provider_standin("runpod", settle_polls=1)
    pod = runpod.add_instance()
    proc, run_dir = live_run(runs, shapes_data, "outage")
    try:
        arm(runpod, pod, run_dir, "stop", poll=0.5, retry_backoff=0.2, retry_max=1.0,
            api_timeout=2.0, confirm_timeout=5.0)
        outage = 6.0
        runpod.outage(outage)
        began = time.monotonic()
        killed = kill_9(proc)
    finally:
        if proc.poll() is None:
            kill_9(proc)
    final = wait_until("the guard to act", lambda: guard_over(run_dir), timeout=90)
    ended = began + outage
    meter = runpod.meter(pod)
    switched = meter.full_rate_until(killed)
    assert switched is not None and final["state"] == "done"
    assert ended <= switched < ended + 5.0  # stopped within a few seconds of recovery
    refused = [r for r in runpod.requests if r.fault == 500]
    assert len(refused) >= 5  # it kept trying through the outage
    steps = final["steps"]
    assert len(steps) >= 2 and all("HTTP 500" in s["result"] and "trying again in" in
                                   s["result"] for s in steps[:-1])
    assert all(runfiles.parse_iso(s["at"]) for s in steps)  # each step has its time
    assert final["outcome"]["action"] == "stop" and final["outcome"]["confirmed"]
    assert runpod.instances[pod]["status"] == "EXITED"
    assert "HTTP 500" in (run_dir / "guard.log").read_text()


def test_an_ignored_destroy_is_resent_then_stopped_with_an_alarm(runs, shapes_data,
                                                                 provider_standin, capsys,
                                                                 hub_standin, monkeypatch,
                                                                 tmp_path):
    """Done and safe, --then destroy; the provider accepts the destroy and ignores it.
    The guard re-sends it, then stops the instance (the full price ends), raises an
    alarm that stays in guard.json, gpurent status and the TUI until acknowledged."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.ignore(iid, "destroy")
    proc = start_training(runs, shapes_data, "ignored", epochs=1)
    assert proc.wait(timeout=300) == 0
    run_dir = runs / "runs" / "ignored"
    assert runfiles.read_status(run_dir).get("state") == "completed"
    ask_hub(hub_standin, monkeypatch, tmp_path / "hf")  # the guard confirms with the Hub
    record_push(hub_standin, run_dir, ("best.pt", "last.pt", "status.json"))  # safe
    safe_at = time.monotonic()
    state = arm_guard(LocalTransport(), str(run_dir), "done", "destroy", None, "vast", iid,
                      vast.key, send_account_key=True, hub_repos=["org/run"],
                      base_url=vast.base_url, poll=0.2, confirm_timeout=1.0)
    assert state.state in ("armed", "acting", "alarm")
    final = wait_until("the guard to give its verdict", lambda: guard_over(run_dir), 60)
    assert final["state"] == "alarm"
    assert len(vast.calls("DELETE")) == 2  # sent, then re-sent
    assert [r.body for r in vast.calls("PUT")] == [{"state": "stopped"}]
    meter = vast.meter(iid)
    # 2 destroys 3 s apart (Vast's DELETE interval), each polled 1 s at show's 2 s, a stop
    assert meter.full_rate_seconds(safe_at) < 20.0
    assert all(r.fault != "limit" for r in vast.requests)  # paced: never limited
    assert meter.rate_now == pytest.approx(250 * 0.20 / 720)
    alarm = final["alarm"]
    assert "did not take after 2 tries" in alarm["message"]
    assert "stopped instead" in alarm["message"] and "$0.0694/h" in alarm["message"]
    assert [s["step"] for s in final["steps"]] == ["destroy", "destroy", "stop"]

    box = LocalTransport()
    seen = read_guard(box, str(run_dir))
    assert seen is not None and seen.alarm_active
    assert gpurent(["status", str(run_dir)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ALARM ") and "did not take" in out.splitlines()[0]
    assert gpurent(["guard", str(run_dir), "ack"]) == 0
    assert "(acknowledged)" in capsys.readouterr().out
    assert gpurent(["status", str(run_dir), "--json"]) == 0
    guard = json.loads(capsys.readouterr().out)["guard"]
    assert guard["alarm"]["message"] == alarm["message"] and not guard["alarm_active"]
    assert acknowledge_alarm(box, str(run_dir)).acknowledged  # twice is harmless


def test_lambda_ignored_terminate_is_resent_until_the_deadline(tmp_path, lambda_standin):
    """A provider without stop: the terminate is re-sent until --give-up-after, then an
    alarm (never a quiet exit)."""
    iid = lambda_standin.add_instance()
    lambda_standin.ignore(iid, "destroy")
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    finish_run(writer, 999_999_999)
    arm_guard(LocalTransport(), str(run_dir), "done", "destroy", None, "lambda", iid,
              lambda_standin.key, send_account_key=True, base_url=lambda_standin.base_url, poll=0.1,
              confirm_timeout=0.5, give_up_after=8.0)
    final = wait_until("the alarm", lambda: guard_over(run_dir), timeout=60)
    assert final["state"] == "alarm" and "gave up after" in final["alarm"]["message"]
    # About one request a second (Lambda's limit): a look, the terminate, a poll a try.
    assert len(lambda_standin.calls("POST", "terminate")) >= 2
    assert all(r.fault != "limit" for r in lambda_standin.requests)  # never limited
    assert lambda_standin.meter(iid).rate_now == 0.75  # still billing: hence the alarm


def test_a_stalled_run_counts_as_dead_after_the_limit(tmp_path, runpod_standin):
    """Alive but stuck (a hung collective, a deadlocked loader): after --stall-minutes
    of 'stalled' it is dead and the pod is stopped."""
    import subprocess

    pod = runpod_standin.add_instance()
    stuck = subprocess.Popen(["sleep", "600"])
    try:
        run_dir = tmp_path / "run"
        writer = make_run(run_dir, stuck.pid, best=False)
        status = runfiles.read_status(run_dir).fields or {}
        status.update(mean_epoch_seconds=1.0, epoch_seconds=1.0,
                      updated_at=runfiles.utc_now_iso(time.time() - 3600))
        runfiles.atomic_write_json(run_dir / runfiles.STATUS_FILE, status)
        (run_dir / runfiles.LOG_FILE).touch()
        arm_guard(LocalTransport(), str(run_dir), "done", "stop", None, "runpod", pod,
                  runpod_standin.key, send_account_key=True,
                  base_url=runpod_standin.base_url, poll=0.2,
                  stall_minutes=0.02)
        final = wait_until("the stop", lambda: guard_over(run_dir), timeout=60)
        assert stuck.poll() is None  # the guard stops the instance, not the process
    finally:
        stuck.kill()
        stuck.wait()
    assert final["state"] == "done" and final["outcome"]["trigger"] == "dead"
    log = (run_dir / "guard.log").read_text()
    assert "run is stalled" in log and "(limit 0.02 min)" in log
    assert writer is not None and runpod_standin.instances[pod]["status"] == "EXITED"


def test_a_revoked_key_mid_action_is_an_alarm_at_once(tmp_path, vast_standin):
    """Nothing a retry can fix: no retries until the deadline, an alarm now."""
    iid = vast_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    arm_guard(LocalTransport(), str(run_dir), "done", "stop", None, "vast", iid,
              vast_standin.key, send_account_key=True, base_url=vast_standin.base_url, poll=0.2)
    vast_standin.key = "revoked"
    finish_run(writer, 999_999_999)
    final = wait_until("the alarm", lambda: guard_over(run_dir), timeout=60)
    assert final["state"] == "alarm" and "check the API key" in final["alarm"]["message"]
    assert "cloud.vast.ai" in final["alarm"]["message"]  # where to look by hand


def test_a_pod_in_error_that_takes_no_stop_is_an_alarm_at_once_naming_terminate(
        tmp_path, runpod_standin):
    """RunPod's ERROR takes only start or terminate: a --then stop guard says so now,
    instead of re-sending a stop refused with 409 until its deadline a day later."""
    pod = runpod_standin.add_instance()
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    runpod_standin.fault_pod(pod)  # before the guard's first look: every look sees it
    arm_guard(LocalTransport(), str(run_dir), "done", "stop", None, "runpod", pod,
              runpod_standin.key, send_account_key=True, base_url=runpod_standin.base_url,
              poll=0.2)
    finish_run(writer, 999_999_999)
    final = wait_until("the alarm", lambda: guard_over(run_dir), timeout=60)
    assert final["state"] == "alarm"
    message = final["alarm"]["message"]
    assert "cannot stop instance" in message and "while it is error" in message
    assert "only a terminate ends its billing of $0.6900/h" in message
    assert runpod_standin.calls("POST", "/action") == []  # no stop sent to be refused
    assert runpod_standin.meter(pod).rate_now == 0.69
