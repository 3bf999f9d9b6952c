"""The off-box watchdog and leases, against the provider stand-ins' billing clocks and
real sshd boxes: a hung box's billing ended within one interval of its lease, an idle
instance stopped past its rule, two watchdogs at once acting once, unsafe weights never
destroyed (a stop instead; Lambda, which cannot stop, an alarm), the guard's webhooks
told, and the lease written where the box's guard reads it; a lease due at its deadline
and not before, a second lease its own episode, a bare duration in hours."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import paramiko
import pytest

from remote.billing.accounts import Account
from remote.billing.intents import want_running
from remote.fleet.fleet import Fleet, FleetOptions, FleetRow
from remote.fleet.leases import Lease, lease_for, parse_duration, set_lease
from remote.fleet.watchdog import Due, Rules, due_rows, loop, settled_before, watch_once
from remote.fleet.watchrecords import write_record
from remote.transport.hostkeys import fingerprint
from tests.fixtures.fleetbox import known_as
from tests.fixtures.paths import ROOT
from tests.fixtures.webhook import Webhook
from trainer.guard.lease import lease_passed
from trainer.guard.notify import Target
from trainer.providers import get_provider

GPURENT = Path(sys.executable).with_name("gpurent")
FAST = {"confirm_timeout": 20.0, "interval": 0.05}


@dataclass(frozen=True)
class Said:
    """A destroy check's answer, as a test sets it."""

    safe: bool
    reason: str


SAFE = Said(True, "best.pt and last.pt on the Hub at org/run@abc1234")


def account(standin) -> Account:
    return Account(standin.provider, "default", standin.key, standin.base_url)


def test_the_watchdog_ends_a_hung_boxs_billing_within_one_interval(provider_standin, box,
                                                                   tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    box.sshd.stop()  # the box hangs: its sshd (and any guard on it) is gone
    hook = Webhook()
    lease = set_lease(f"vast:{iid}", 1.0, then="destroy")  # destroy: refused, it stops
    deadline = time.monotonic() + lease.left()
    every = 0.5
    ended = threading.Event()
    thread = threading.Thread(target=loop, args=(
        lambda: [account(vast)], Rules(), known_as(tmp_path, box, f"vast:{iid}"), every,
        ended.wait), kwargs={**FAST, "notify": [Target(hook.url, "json")]}, daemon=True)
    thread.start()
    try:
        meter = vast.meter(iid)
        limit = time.monotonic() + 30
        while meter.full_rate_until(0) is None:
            assert time.monotonic() < limit, "the watchdog never ended the billing"
            time.sleep(0.05)
    finally:
        ended.set()
        thread.join(30)
    late = meter.full_rate_until(0) - deadline
    # Never before the deadline; after it, within one interval plus Vast's own pace: the
    # list (1 s apart), the look before the stop and the poll that confirms it (2 s
    # apart, the look waiting its turn after an earlier pass's), and 4 s of slack (a
    # pass's SSH tries on a loaded machine).
    paced = (1.0 + 2 * 2.0) * vast.pace
    assert 0.0 <= late <= every + paced + 4.0, f"billing ended {late:.2f} s after"
    assert all(r.fault != "limit" for r in vast.requests)  # paced: never refused
    assert vast.calls("DELETE") == []  # the weights could not be checked: never destroyed
    assert len(vast.calls("PUT")) == 1 and vast.instances[iid]["actual_status"] == "stopped"
    limit = time.monotonic() + 10
    while not hook.posts:
        assert time.monotonic() < limit, "no notification"
        time.sleep(0.05)
    [post] = hook.posts
    assert post["event"] == "acted" and post["target"] == f"vast:{iid}"
    assert "not destroyed" in post["guard"] and "keeps billing" in post["guard"]


def test_an_idle_instance_past_its_rule_is_stopped_and_a_fresh_one_is_not(provider_standin,
                                                                          box, tmp_path):
    runpod = provider_standin("runpod", settle_polls=1)
    old, fresh = runpod.add_instance(), runpod.add_instance()
    for pod, ago in ((old, 20 * 60), (fresh, 60)):
        runpod.set_address(pod, box.host, box.port, box.user)
        runpod.started(pod, ago)
    known = tmp_path / "known_hosts"
    options = known_as(tmp_path, box, f"runpod:{old}")
    known.write_text(known.read_text() + f"runpod:{fresh} {box.host_key_line}\n")
    [decision] = watch_once([account(runpod)], Rules(idle_minutes=10), options, **FAST)
    assert (decision.target, decision.trigger, decision.action, decision.acted) == (
        f"runpod:{old}", "idle", "stop", True)
    assert "idle 20 min" in decision.reason
    assert runpod.instances[old]["status"] == "EXITED"
    assert runpod.instances[fresh]["status"] == "RUNNING"
    assert [c.path for c in runpod.calls("POST", "/action")] == [f"/v2/pods/{old}/action"]


def test_two_watchdogs_at_once_act_once(provider_standin, tmp_path):
    vast = provider_standin("vast", settle_polls=2)
    iid = vast.add_instance()
    vast.set_address(iid, "127.0.0.1", 9)  # nothing answers there
    set_lease(f"vast:{iid}", 60, now=time.time() - 120)  # ran out a minute ago
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VAST_API_KEY": vast.key,
           "GPURENT_VAST_URL": vast.base_url, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    command = [str(GPURENT), "watchdog", "--once", "--json", "--poll", "0.05",
               "--timeout", "5"]
    both = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True) for _ in range(2)]
    answers = [p.communicate(timeout=120) for p in both]
    assert [p.returncode for p in both] == [0, 0], answers
    decisions = [d for out, _err in answers for d in json.loads(out)["decisions"]]
    assert [(d["action"], d["acted"]) for d in decisions] == [("stop", True)]
    assert len(vast.calls("PUT")) == 1
    # A later pass finds it done (the record of this lease's episode): nothing more.
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert json.loads(again.stdout)["decisions"] == [] and len(vast.calls("PUT")) == 1


def test_the_json_keeps_the_whole_reason_a_box_could_not_be_checked(provider_standin, box,
                                                                     tmp_path):
    """A box whose host key changed cannot be checked: the destroy its lease asks for is a
    stop, and ``--json`` says why whole (both fingerprints, the known_hosts path and the
    fix), where the words for people may shorten it."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    set_lease(f"vast:{iid}", 60, now=time.time() - 120, then="destroy")
    home = tmp_path / "a-home-directory-with-a-long-name-as-some-laptops-have" / "someone"
    known = home / ".ssh" / "known_hosts"
    known.parent.mkdir(parents=True)
    other = paramiko.ECDSAKey.generate()  # the key the box had before it was re-created
    known.write_text("".join(f"{name} {other.get_name()} {other.get_base64()}\n" for name in
                             (f"vast:{iid}", f"[{box.host}]:{box.port}", box.host)))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(home), "VAST_API_KEY": vast.key,
           "GPURENT_VAST_URL": vast.base_url, "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    done = subprocess.run([str(GPURENT), "watchdog", "--once", "--json", "--poll", "0.05",
                           "--timeout", "5"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    [decision] = json.loads(done.stdout)["decisions"]
    assert (decision["action"], decision["acted"]) == ("stop", True)
    assert vast.calls("DELETE") == []
    unsafe = decision["unsafe"]
    assert unsafe.startswith("the box could not be reached to check the weights: host key "
                             f"for vast:{iid} has CHANGED") and "…" not in unsafe, unsafe
    assert fingerprint(other) in unsafe
    assert unsafe.endswith(f"ssh-keygen -R 'vast:{iid}' -f {known})"), unsafe
    said = [line for line in done.stderr.splitlines() if f"vast:{iid}: not destroyed" in line]
    assert said and "…" in said[0] and str(known) not in said[0], done.stderr  # words: cut


def test_lambda_cannot_stop_so_unsafe_weights_mean_an_alarm_not_a_terminate(
        provider_standin, tmp_path):
    lam = provider_standin("lambda")
    iid = lam.add_instance(ip="127.0.0.1")  # port 22 here answers nothing of ours
    set_lease(f"lambda:{iid}", 60, now=time.time() - 120)
    options = FleetOptions(timeout=3, ssh_options={"known_hosts": str(tmp_path / "none")})
    hook = Webhook()
    told = {**FAST, "notify": [Target(hook.url, "json")]}
    [decision] = watch_once([account(lam)], Rules(), options, **told)
    assert decision.alarm and decision.action == "none" and not decision.acted
    assert "NOT terminating" in decision.message and "keeps billing $0.7500/h" in decision.message
    assert lam.calls("POST", "terminate") == []
    # Judged again every pass (an alarm each time), told again only after ALARM_EVERY.
    [again] = watch_once([account(lam)], Rules(), options, **told)
    assert again.alarm and "NOT terminating" in again.message
    assert [p["event"] for p in hook.posts] == ["alarm"]
    # A minute later the weights are safe: the next pass terminates it.
    [ended] = watch_once([account(lam)], Rules(), options, safety=lambda _due: SAFE, **told)
    assert ended.acted and ended.action == "destroy" and ended.settled, ended.message
    assert len(lam.calls("POST", "terminate")) == 1 and lam.meter(iid).rate_now == 0
    assert [p["event"] for p in hook.posts] == ["alarm", "acted"]


def test_a_lease_is_kept_on_the_laptop_and_on_the_box_where_the_guard_reads_it(
        provider_standin, box, tmp_path):
    runpod = provider_standin("runpod")
    pod = runpod.add_instance()
    runpod.set_address(pod, box.host, box.port, box.user)
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True)
    known = tmp_path / "known_hosts"
    known.write_text(f"runpod:{pod} {box.host_key_line}\n")
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {box.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known}\n")
    env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "RUNPOD_API_KEY": runpod.key,
           "GPURENT_RUNPOD_URL": runpod.base_url}

    def gpurent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(GPURENT), "lease", f"runpod:{pod}", *args, "--json"],
                              env=env, capture_output=True, text=True, timeout=60)

    made = gpurent("6h")
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["box"] == "told"
    on_box = Path(box.home) / ".cache" / "gpurent" / "lease.json"
    written = json.loads(on_box.read_text())
    assert written["target"] == f"runpod:{pod}" and written["then"] == "stop"
    assert abs(written["until"] - time.time() - 6 * 3600) < 60
    assert lease_for(f"runpod:{pod}").until == written["until"]
    # The guard on the box reads it: not yet, and once the deadline passed.
    assert lease_passed("runpod", pod, path=on_box) is None
    assert "lease ran out" in lease_passed("runpod", pod, now=written["until"] + 1,
                                           path=on_box)
    assert lease_passed("runpod", "another-pod", now=written["until"] + 1,
                        path=on_box) is None
    cleared = gpurent("clear")
    assert cleared.returncode == 0 and not on_box.exists()
    assert lease_for(f"runpod:{pod}") is None
    bad = gpurent("soon")
    assert bad.returncode == 2 and "not a duration" in bad.stderr


def due_at(iid: str, lease: Lease | None, now: float) -> list[Due]:
    """What a pass at ``now`` finds due on a running Vast instance ``iid`` with ``lease``."""
    client = get_provider("vast", "k")
    inst = client.parse(iid, {"id": int(iid), "actual_status": "running",
                              "intended_status": "running"})
    fleet = Fleet([FleetRow("vast:default", "vast", inst, lease=lease)], now, 0.0,
                  {"vast:default": client})
    return due_rows(fleet, fleet.clients, Rules())


def test_a_lease_is_due_once_it_passes_never_before() -> None:
    """The pass's clock against the deadline, on both sides: a watchdog acting minutes
    early stops a run that still had its time (the hung-box test's lease is 1 s long,
    too short to tell)."""
    lease = Lease("vast:990001", 1_800_000_000.0)
    assert due_at("990001", lease, lease.until - 1.0) == []
    assert [d.trigger for d in due_at("990001", lease, lease.until + 1.0)] == ["lease"]


def test_a_second_lease_replaces_the_first_and_is_enforced_after_it(monkeypatch,
                                                                    tmp_path) -> None:
    """The first lease was enforced and a person started the instance again from here
    (kept running); the lease given then is a new episode, enforced in its turn."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    target, now = "vast:990002", 1_800_000_000.0
    set_lease(target, 60, now=now - 120)
    [first] = due_at("990002", lease_for(target), now)
    write_record(target, first.episode, first.start, True, {"message": "stopped"}, now)
    want_running(target, now=now + 60)
    assert settled_before(first)  # the first lease: done, and the start from here kept
    second = set_lease(target, 60, now=now + 120)
    assert lease_for(target) == second
    [due] = due_at("990002", lease_for(target), now + 181)
    assert due.trigger == "lease" and not settled_before(due)

def test_a_duration_is_read_as_the_docs_say_a_bare_number_in_hours() -> None:
    assert parse_duration("6") == 6 * 3600
    assert parse_duration("1.5") == 5400
    assert [parse_duration(t) for t in ("90m", "1h30m", "2d", "45s", " 6H ")] == [
        5400, 5400, 172800, 45, 21600]
    for bad in ("soon", "0", "0.0", "0h", "6x", "h", "6h 30m", ""):
        with pytest.raises(ValueError):
            parse_duration(bad)
    assert parse_duration("366d") == 366 * 86400
    for huge in ("367d", "99999999999999999999d", "9" * 400):  # a typo, never an overflow
        with pytest.raises(ValueError, match="at most 366 days"):
            parse_duration(huge)
