"""The watchdog when nobody watches, against stand-ins that answer as the providers do
(rate limits on: Vast's per-endpoint intervals and plain-text 429s, RunPod's minute
window, Lambda's second): it keeps trying until the billing ends, tells every failure,
reads the providers' fields for what they mean, and acts on every state that bills."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote.billing.accounts import Account
from remote.billing.intents import RunIntent, move_intent, want_running
from remote.fleet.fleet import FleetOptions, list_fleet
from remote.fleet.idle import remember_idle
from remote.fleet.leases import set_lease
from remote.fleet.watchdog import Rules, watch_once
from remote.fleet.watchrecords import held
from tests.fixtures.fleetbox import known_as
from tests.fixtures.paths import ROOT
from tests.fixtures.webhook import Webhook
from trainer import runfiles
from trainer.providers import get_provider
from trainer.providers.confirm import start_and_confirm

GPURENT = Path(sys.executable).with_name("gpurent")
FAST = {"confirm_timeout": 30.0, "interval": 0.05}
#: Boxes not reached; the pass's clients retry as hard as ever, with short backoffs.
UNREACHABLE = FleetOptions(timeout=5, ssh_options={"known_hosts": "/dev/null"},
                           client_options={"backoff": 0.05, "max_backoff": 0.2})


@dataclass(frozen=True)
class Said:
    """A destroy check's answer, as a test sets it."""

    safe: bool
    reason: str


SAFE = Said(True, "best.pt and last.pt on the Hub at org/run@abc1234")
UNSAFE = Said(False, "best.pt is on this box only")


def leased_vast(provider_standin) -> tuple[object, str]:
    """A Vast instance whose box answers nothing, its lease passed a minute ago."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, "127.0.0.1", 9)
    passed_lease(f"vast:{iid}")
    return vast, iid


@pytest.fixture(autouse=True)
def _own_state(tmp_path, monkeypatch) -> None:
    """This test's leases and records only (a pass reads every lease of the laptop)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))


def account(standin, key: str | None = None) -> Account:
    return Account(standin.provider, "default", key or standin.key, standin.base_url)


def passed_lease(target: str, then: str = "stop") -> None:
    set_lease(target, 60, then, now=time.time() - 120)  # ran out a minute ago


# ---------------------------------------------------------------- rate limits


def test_a_passed_lease_under_vasts_intervals_and_its_429s_is_stopped_in_one_pass(
        provider_standin):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, "127.0.0.1", 9)  # the box does not answer
    passed_lease(f"vast:{iid}")
    vast.fail(429, times=2)  # another client of the key used the list's interval up
    vast.fail_on("PUT", f"/{iid}/", 429)  # ... and the stop's
    [decision] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert decision.acted and decision.settled and not decision.alarm, decision.message
    assert vast.instances[iid]["actual_status"] == "stopped"
    assert [r.fault for r in vast.calls("PUT")] == [429, None]
    # Only the injected 429s: our own calls kept Vast's intervals (show 2 s apart).
    assert [r.fault for r in vast.requests if r.fault] == [429, 429, 429]


# ---------------------------------------------------------------- episodes


def test_a_stop_that_failed_in_one_pass_is_sent_again_by_the_next(provider_standin):
    vast, iid = leased_vast(provider_standin)
    vast.fail_on("PUT", f"/{iid}/", 502, times=10)  # the stop endpoint is down
    [first] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert first.alarm and not first.settled and "next pass tries again" in first.message
    assert vast.instances[iid]["actual_status"] == "running"
    vast.fail_on("PUT", "", 502, times=0)
    vast._aimed.clear()  # the endpoint is back
    [second] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert second.acted and second.settled, second.message
    assert vast.instances[iid]["actual_status"] == "stopped"
    assert watch_once([account(vast)], Rules(), UNREACHABLE, **FAST) == []  # settled


def test_a_second_lease_after_a_start_from_here_is_enforced(provider_standin):
    runpod = provider_standin("runpod", settle_polls=1)
    pod = runpod.add_instance()
    target = f"runpod:{pod}"
    passed_lease(target)
    [first] = watch_once([account(runpod)], Rules(), UNREACHABLE, **FAST)
    assert first.settled and runpod.instances[pod]["status"] == "EXITED"
    client = get_provider("runpod", runpod.key, runpod.base_url)
    want_running(target)  # a person started it again from here ...
    assert start_and_confirm(client, pod, timeout=30, interval=0.05).confirmed
    assert watch_once([account(runpod)], Rules(), UNREACHABLE, **FAST) == []  # ... kept
    set_lease(target, 30, now=time.time() - 60)  # ... and gave it a new lease, passed
    [second] = watch_once([account(runpod)], Rules(), UNREACHABLE, **FAST)
    assert second.settled and runpod.instances[pod]["status"] == "EXITED"


def test_an_instance_running_again_after_its_lease_with_no_start_from_here_is_stopped(
        provider_standin):
    """Vast brings interruptible instances back by itself: that comeback bills."""
    vast, iid = leased_vast(provider_standin)
    [first] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert first.settled
    vast.instances[iid].update(actual_status="running", intended_status="running")
    [again] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert again.settled and vast.instances[iid]["actual_status"] == "stopped"
    assert len(vast.calls("PUT")) == 2


def test_an_action_still_under_way_is_said_and_an_alarm_once_stuck(provider_standin,
                                                                   monkeypatch):
    runpod = provider_standin("runpod")
    pod = runpod.add_instance()
    target = f"runpod:{pod}"
    passed_lease(target)
    entered, release = threading.Event(), threading.Event()

    def hold() -> None:  # a provider call of an earlier pass that hangs
        with held(target):
            entered.set()
            release.wait(60)

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert entered.wait(10)
    try:
        [busy] = watch_once([account(runpod)], Rules(), UNREACHABLE, **FAST)
        assert not busy.alarm and "is acting on it since" in busy.message
        monkeypatch.setattr("remote.fleet.watchdog.STUCK_MARGIN", -10_000.0)
        [stuck] = watch_once([account(runpod)], Rules(), UNREACHABLE, **FAST)
        assert stuck.alarm and "has not ended" in stuck.message
        assert "$0.6900/h" in stuck.message
    finally:
        release.set()
        thread.join(10)
    assert runpod.calls("POST", "/action") == []


# ---------------------------------------------------------------- never silent


def test_a_revoked_key_is_an_alarm_of_every_pass_exit_1_and_the_webhook_told(
        provider_standin, tmp_path):
    vast = provider_standin("vast")
    iid = vast.add_instance()
    passed_lease(f"vast:{iid}")
    hook = Webhook()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VAST_API_KEY": "revoked-key",
           "GPURENT_VAST_URL": vast.base_url, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    command = [str(GPURENT), "watchdog", "--once", "--json", "--timeout", "5",
               "--notify", hook.url, "--notify-format", "json", "--alarm-every", "0"]
    for n in (1, 2):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 1, done.stderr
        out = json.loads(done.stdout)
        assert out["ok"] is False
        [alarm] = out["decisions"]
        assert alarm["target"] == "vast/default" and alarm["alarm"]
        assert "cannot act on vast/default" in alarm["message"]
        assert "renew the key" in alarm["message"] and f"vast:{iid}" in alarm["message"]
        assert "cannot act on vast/default" in done.stderr
        assert len(hook.posts) == n and hook.posts[-1]["event"] == "alarm"
    hook.close()


def test_an_expired_vast_2fa_session_is_a_refused_key_never_not_found(provider_standin):
    vast = provider_standin("vast")
    iid = vast.add_instance()
    passed_lease(f"vast:{iid}")
    vast.expire_session()
    [alarm] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert alarm.alarm and alarm.trigger == "account" and "2FA" in alarm.message
    client = get_provider("vast", vast.key, vast.base_url)
    with pytest.raises(Exception) as err:  # a 404 here is not "the instance is gone"
        client.get_instance(iid)
    assert getattr(err.value, "kind", None) == "auth"


def test_a_listing_outage_is_an_alarm_and_the_next_pass_after_it_acts(provider_standin):
    vast, iid = leased_vast(provider_standin)
    vast.outage(30)
    [alarm] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert alarm.alarm and alarm.trigger == "account" and "next pass tries" in alarm.message
    vast.outage(0)
    [acted] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert acted.settled and vast.instances[iid]["actual_status"] == "stopped"


def test_a_failed_list_still_finds_a_passed_lease_by_asking_for_its_instance(
        provider_standin):
    vast, iid = leased_vast(provider_standin)
    vast.fail_on("GET", "/v1/instances", 500, times=10)  # the list is down, shows work
    decisions = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert {d.trigger for d in decisions} == {"account", "lease"}
    [acted] = [d for d in decisions if d.trigger == "lease"]
    assert acted.settled and vast.instances[iid]["actual_status"] == "stopped"


# ---------------------------------------------------------------- field meanings, idle


def test_a_vast_restart_a_minute_ago_after_hours_stopped_is_not_hours_of_idle(
        provider_standin, box, tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    vast.created(iid, 3 * 3600)  # start_date: its creation, three hours ago
    vast.started(iid, 60)  # uptime_mins: running again for a minute
    options = known_as(tmp_path, box, f"vast:{iid}")
    [row] = list_fleet([account(vast)], options).rows
    assert row.idle is not None and row.idle.seconds < 150, row.idle
    assert row.uptime(time.time()) < 150 and row.spent(time.time()) < 0.452 * 150 / 3600
    assert watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST) == []
    assert vast.calls("PUT") == []


def test_a_vast_instance_restarted_after_an_idle_stop_gets_its_next_stretch_stopped(
        provider_standin, box, tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    vast.created(iid, 5 * 3600)
    vast.started(iid, 20 * 60)
    options = known_as(tmp_path, box, f"vast:{iid}")
    [first] = watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST)
    assert first.trigger == "idle" and first.settled and re.match(r"idle (19|20) min", first.reason)
    client = get_provider("vast", vast.key, vast.base_url)
    assert start_and_confirm(client, iid, timeout=30, interval=0.05).confirmed
    vast.set_address(iid, box.host, box.port)
    assert watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST) == []
    vast.started(iid, 15 * 60)  # a quarter of an hour later, idle all along
    [second] = watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST)
    assert second.trigger == "idle" and second.settled
    assert re.match(r"idle (14|15) min", second.reason)
    assert [r.body for r in vast.calls("PUT")] == [{"state": "stopped"},
                                                   {"state": "running"},
                                                   {"state": "stopped"}]


def test_runpod_v2_startedat_gives_the_uptime_and_the_spent(provider_standin):
    runpod = provider_standin("runpod")
    pod = runpod.add_instance()
    runpod.started(pod, 1800)
    assert "lastStartedAt" not in runpod.instances[pod]  # v2's name is startedAt
    [row] = list_fleet([account(runpod)], FleetOptions(ssh=False)).rows
    assert abs(row.uptime(time.time()) - 1800) < 60
    assert row.spent(time.time()) == pytest.approx(0.69 / 2, abs=0.02)


# ---------------------------------------------------------------- every state


def test_an_error_pod_is_alarmed_every_pass_then_terminated_once_its_weights_are_safe(
        provider_standin):
    runpod = provider_standin("runpod", settle_polls=1)
    pod = runpod.add_instance()
    passed_lease(f"runpod:{pod}")
    runpod.fault_pod(pod)  # ERROR: takes start or terminate, never stop
    for _ in range(2):
        [alarm] = watch_once([account(runpod)], Rules(), UNREACHABLE,
                             safety=lambda _d: UNSAFE, **FAST)
        assert alarm.alarm and "NOT terminating" in alarm.message
        assert "cannot stop it while it is error" in alarm.message
    assert runpod.calls("POST", "/action") == [] and runpod.calls("DELETE") == []
    [ended] = watch_once([account(runpod)], Rules(), UNREACHABLE,
                         safety=lambda _d: SAFE, **FAST)
    assert ended.action == "destroy" and ended.settled, ended.message
    assert runpod.meter(pod).rate_now == 0.0


def test_an_exited_vast_instance_that_bills_is_listed_billing_and_its_lease_stops_it(
        provider_standin):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.take_away(iid)  # exited by itself, intended running: Vast bills the GPU
    [row] = list_fleet([account(vast)], FleetOptions(ssh=False)).rows
    assert row.instance.state == "exited" and row.full_price
    assert row.to_dict(time.time())["billing"] is True
    assert "exited but billing $0.4520/h" in row.words(time.time())
    passed_lease(f"vast:{iid}")
    [decision] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert decision.settled and vast.instances[iid]["actual_status"] == "stopped"


def test_a_destroyed_vast_instance_lingering_unloaded_is_gone(provider_standin):
    vast = provider_standin("vast", settle_polls=1, linger_polls=5)
    iid = vast.add_instance()
    client = get_provider("vast", vast.key, vast.base_url)
    from trainer.providers.confirm import destroy_and_confirm

    outcome = destroy_and_confirm(client, iid, timeout=30, interval=0.05)
    assert outcome.confirmed and outcome.polls == 1  # released: not waiting to vanish
    assert vast.instances[iid]["cur_state"] == "unloaded"  # still answered
    [row] = list_fleet([account(vast)], FleetOptions(ssh=False)).rows
    assert row.instance.gone and not row.full_price


def test_a_start_that_waits_for_gpus_is_cancelled_so_it_cannot_bill_unseen(
        provider_standin):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    client = get_provider("vast", vast.key, vast.base_url)
    from trainer.providers.confirm import stop_and_confirm

    assert stop_and_confirm(client, iid, timeout=30, interval=0.05).confirmed
    vast.scheduling(iid)
    outcome = start_and_confirm(client, iid, timeout=3, interval=0.05)
    assert not outcome.confirmed and "pending start was cancelled" in outcome.message
    assert "--keep-waiting" in outcome.message
    vast.release(iid)  # the GPUs free up an hour later ...
    client.get_instance(iid)
    client.get_instance(iid)
    assert vast.instances[iid]["actual_status"] == "stopped"  # ... and nothing starts
    assert vast.meter(iid).rate_now == pytest.approx(250 * 0.20 / 720)


def test_runpod_cluster_pods_are_listed_and_network_volumes_said(provider_standin):
    runpod = provider_standin("runpod", settle_polls=1)
    member, plain = runpod.add_instance(), runpod.add_instance()
    runpod.cluster_pod(member)
    runpod.network_volume(plain, 500)
    client = get_provider("runpod", runpod.key, runpod.base_url)
    assert {p.id for p in client.list_instances()} == {member, plain}
    from trainer.providers.confirm import stop_and_confirm

    assert stop_and_confirm(client, plain, timeout=30, interval=0.05).confirmed
    [row] = [r for r in list_fleet([account(runpod)], FleetOptions(ssh=False)).rows
             if r.instance.id == plain]
    words = " ".join(row.words(time.time()))
    assert "network volume" in words and "nothing billed" not in words


def test_vasts_v1_list_is_paged_and_v0_asked_only_without_it(provider_standin):
    vast = provider_standin("vast")
    ids = {vast.add_instance() for _ in range(30)}
    client = get_provider("vast", vast.key, vast.base_url)
    assert {i.id for i in client.list_instances()} == ids
    pages = [r for r in vast.requests if r.path == "/api/v1/instances/"]
    assert len(pages) == 2 and not vast.calls("GET", "/api/v0/instances/")
    vast.v1_list = False
    assert {i.id for i in client.list_instances()} == ids
    assert len(vast.calls("GET", "/api/v0/instances/")) == 1


def test_a_box_whose_final_hub_push_is_under_way_is_not_idle(provider_standin, box,
                                                             tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    vast.started(iid, 20 * 60)  # no run, no GPU for 20 min: idle, but for the push
    watcher = subprocess.Popen(["sleep", "120"])  # a push watcher on the box
    mark = Path(box.home) / ".cache" / "gpurent" / "watchers" / "exp-0123456789abcdef"
    mark.mkdir(parents=True)
    (mark / str(watcher.pid)).write_text("")
    options = known_as(tmp_path, box, f"vast:{iid}")
    try:
        [row] = list_fleet([account(vast)], options).rows
        assert row.box is not None and row.box.pushes == [watcher.pid]
        assert row.idle is None
        assert watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST) == []
    finally:
        watcher.kill()
        watcher.wait()
    [stopped] = watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST)
    assert stopped.trigger == "idle" and stopped.settled  # the push over: idle again


def test_an_old_instance_that_comes_back_after_its_run_moved_is_stopped_and_said(
        provider_standin):
    vast = provider_standin("vast", settle_polls=1)
    old, new = vast.add_instance(), vast.add_instance()
    want_running(f"vast:{old}", RunIntent("exp", "runs", "org/exp"))
    vast.take_away(old)  # outbid: stopped by Vast, the run resumed on another instance
    vast.instances[old].update(actual_status="stopped", intended_status="stopped")
    move_intent(f"vast:{old}", f"vast:{new}", "exp", "runs")
    assert watch_once([account(vast)], Rules(), UNREACHABLE, **FAST) == []  # stopped: fine
    vast.instances[old].update(actual_status="running", intended_status="running")
    vast.started(old, 30)  # Vast brought it back by itself half a minute ago
    [stopped] = watch_once([account(vast)], Rules(), UNREACHABLE, **FAST)
    assert stopped.trigger == "comeback" and stopped.settled
    assert f"its run moved to vast:{new}" in stopped.reason
    assert vast.instances[old]["actual_status"] == "stopped"
    assert vast.instances[new]["actual_status"] == "running"  # the run's new box: kept
    # A start from here is a person's wish: kept running.
    want_running(f"vast:{old}")
    vast.instances[old].update(actual_status="running", intended_status="running")
    vast.started(old, 10)
    assert watch_once([account(vast)], Rules(), UNREACHABLE, **FAST) == []


def test_a_run_stalled_with_its_process_alive_is_an_alarm_then_stopped_by_the_rule(
        provider_standin, box, tmp_path):
    """An NCCL hang: the process lives, the GPUs may stay busy, no epoch for an hour.
    Not idle; said at every pass, and stopped once --stall-minutes allows."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    hung = subprocess.Popen(["sleep", "300"])
    run_dir = Path(box.home) / "runs" / "hung"
    run_dir.mkdir(parents=True)
    now = time.time()
    runfiles.atomic_write_json(run_dir / runfiles.STATUS_FILE, {
        "schema_version": 1, "state": "running", "pid": hung.pid, "total_epochs": 50,
        "completed_epochs": 3, "current_epoch": 4, "mean_epoch_seconds": 60.0,
        "epoch_seconds": 60.0, "started_at": runfiles.utc_now_iso(now - 7200),
        "updated_at": runfiles.utc_now_iso(now - 3630)})
    registry = Path(box.home) / ".cache" / "gpurent" / "runs.txt"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(f"{run_dir}\n")
    options = known_as(tmp_path, box, f"vast:{iid}")
    try:
        [alarm] = watch_once([account(vast)], Rules(idle_minutes=10), options, **FAST)
        assert alarm.trigger == "stall" and alarm.alarm and not alarm.acted
        assert "made no progress for 1 h 00 min" in alarm.message
        assert "--stall-minutes M would stop it" in alarm.message
        [stopped] = watch_once([account(vast)], Rules(idle_minutes=10, stall_minutes=30),
                               options, **FAST)
        assert stopped.trigger == "stall" and stopped.settled, stopped.message
        assert vast.instances[iid]["actual_status"] == "stopped"
    finally:
        hung.kill()
        hung.wait()


def test_an_exited_vast_instance_idles_from_when_it_was_first_seen_and_is_stopped(
        provider_standin):
    """Its container exited: nothing runs, nothing answers SSH, the GPU bills."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.take_away(iid)
    remember_idle({f"vast:{iid}": True}, time.time() - 20 * 60)  # seen so 20 min ago
    [row] = list_fleet([account(vast)], UNREACHABLE).rows
    assert row.idle is not None and 19 * 60 <= row.idle.seconds <= 21 * 60
    assert "container exited" in row.idle.why
    decisions = watch_once([account(vast)], Rules(idle_minutes=10), UNREACHABLE, **FAST)
    assert [d.trigger for d in decisions] == ["interrupted", "idle"]  # said, and stopped
    stopped = decisions[1]
    assert stopped.settled and "container exited" in stopped.reason
    assert vast.instances[iid]["actual_status"] == "stopped"


def test_keep_waiting_leaves_a_start_pending_only_under_a_lease(provider_standin,
                                                                 tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.instances[iid].update(actual_status="stopped", intended_status="stopped",
                               cur_state="stopped")
    vast.scheduling(iid)
    env = {**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
           "PYTHONPATH": str(ROOT), "VAST_API_KEY": vast.key,
           "GPURENT_VAST_URL": vast.base_url, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    command = [str(GPURENT), "instance", f"vast:{iid}", "start", "--yes", "--keep-waiting",
               "--timeout", "5", "--interval", "0.05"]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "needs" not in refused.stdout
    assert "--keep-waiting goes with start and a lease" in refused.stderr
    assert vast.calls("PUT") == []
    set_lease(f"vast:{iid}", 3600)
    kept = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert kept.returncode == 1, kept.stderr
    assert "left pending" in kept.stdout + kept.stderr
    assert [r.body for r in vast.calls("PUT")] == [{"state": "running"}]  # not cancelled
