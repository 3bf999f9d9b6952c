"""Which stopped instances count as taken away by their provider (the provider's own word
where it keeps the intent, Vast's ``intended_status``; else this laptop's record), and
which stops are explained (a lease run out, a guard after its runs ended). Instances come
from the real provider clients' parsers over the providers' documented shapes."""

from __future__ import annotations

import time

from remote.billing.intents import (
    RunIntent,
    intent_for,
    move_intent,
    observe,
    set_guard,
    want_running,
    want_stopped,
)
from remote.fleet.interrupted import (
    Interruption,
    explained,
    first_telling,
    how_taken,
    note_episode,
)
from remote.fleet.leases import Lease
from trainer.providers import get_provider


def vast(actual: str, intended: str = "running"):
    client = get_provider("vast", "k")
    return client.parse("11", {"id": 11, "actual_status": actual, "intended_status": intended})


def runpod(status: str):
    return get_provider("runpod", "k").parse("pod1", {"id": "pod1", "status": status})


def lambda_(status: str):
    return get_provider("lambda", "k").parse("l1", {"id": "l1", "status": status})


def test_vast_says_it_meant_the_instance_to_run() -> None:
    assert how_taken(vast("exited"), None) == "Vast says exited while it is meant to run"
    assert how_taken(vast("offline"), None)
    assert how_taken(vast("exited", intended="stopped"), None) == ""  # the user's stop
    assert how_taken(vast("running"), None) == ""
    # stopped while meant to run: a start still waiting for its GPUs, unless the laptop
    # saw it running since it asked (then outbid or its GPUs taken)
    assert how_taken(vast("stopped"), None) == ""
    want_running("vast:11", now=100.0)
    observe("vast:11", 200.0, 0.4, {})
    assert how_taken(vast("stopped"), intent_for("vast:11"))


def test_runpod_and_lambda_need_the_laptops_record() -> None:
    exited = runpod("EXITED")
    assert how_taken(exited, None) == ""  # nobody here asked for it to run
    want_running("runpod:pod1", RunIntent("exp", "runs", "org/exp"))
    assert how_taken(exited, intent_for("runpod:pod1")) == "runpod says EXITED"
    want_stopped("runpod:pod1")  # stopped from here: no surprise
    assert how_taken(exited, intent_for("runpod:pod1")) == ""
    want_running("lambda:l1")
    assert how_taken(lambda_("preempted"), intent_for("lambda:l1")) == \
        "preempted (Lambda says so)"


def test_a_lease_run_out_or_a_guard_after_the_run_ended_explains_the_stop() -> None:
    now = time.time()
    want_running("runpod:pod2", RunIntent("exp2", "runs", "org/exp2"))
    intent = intent_for("runpod:pod2")
    assert not explained(intent, Lease("runpod:pod2", now + 60), now)
    assert explained(intent, Lease("runpod:pod2", now - 1), now)
    set_guard("runpod:pod2", {"when": "done", "then": "stop"})
    observe("runpod:pod2", now, None, {"exp2": {"epoch": 6, "health": "dead"}})
    assert not explained(intent_for("runpod:pod2"), None, now)  # died: the provider?
    observe("runpod:pod2", now, None, {"exp2": {"epoch": 6, "health": "completed"}})
    assert explained(intent_for("runpod:pod2"), None, now)


def test_a_moved_run_takes_its_guard_and_leaves_the_old_instance_stopped() -> None:
    want_running("runpod:old", RunIntent("exp3", "runs", "org/exp3"))
    set_guard("runpod:old", {"when": "done", "then": "destroy"})
    before = move_intent("runpod:old", "runpod:new", "exp3")
    assert before is not None and before.guard == {"when": "done", "then": "destroy"}
    old, new = intent_for("runpod:old"), intent_for("runpod:new")
    assert old.want == "stopped" and old.runs == ()
    assert new.want == "running" and new.guard == before.guard
    assert new.run("org/exp3", "exp3") is not None


def test_the_old_box_of_a_run_is_the_one_it_last_ran_on() -> None:
    from remote.resume.carry import old_instance

    now = time.time()
    want_running("runpod:first", RunIntent("exp4", "runs", "org/exp4"), now=now - 600)
    want_running("runpod:later", RunIntent("exp4", "runs", "org/exp4"), now=now - 60)
    want_running("runpod:other", RunIntent("exp5", "runs", "org/exp4"), now=now)
    assert old_instance("org/exp4", "exp4", "runpod:new") == "runpod:later"
    assert old_instance("org/exp4", "exp4", "runpod:later") == "runpod:first"
    assert old_instance("org/none", "exp4", "runpod:new") is None


def test_a_moved_lease_keeps_its_deadline_on_the_laptop_and_on_the_new_box() -> None:
    """Two hours into a 6 h lease the run moves: the new instance has the 4 h left, not
    6 h again (a lease that restarted at every move would never end a run that moves)."""
    from remote.fleet.leases import lease_for, set_lease
    from remote.resume.carry import carry_over
    from remote.transport.local import LocalTransport
    from trainer.guard.lease import read_lease

    old, new = "runpod:lease-from", "runpod:lease-to"
    want_running(old, RunIntent("exp7", "runs", "org/exp7"))
    given = set_lease(old, 6 * 3600, "destroy", now=time.time() - 2 * 3600)
    said = carry_over(LocalTransport(), "runs/exp7", "org/exp7", "exp7", new,
                      ("runpod", "lease-to"))
    assert said[0].startswith(f"lease moved from {old} to {new}: until "), said
    moved = lease_for(new)
    assert moved is not None and moved.then == "destroy" and lease_for(old) is None
    assert abs(moved.until - given.until) < 1.0
    on_box = read_lease()  # where the new box's guard reads it (this machine's cache)
    assert on_box is not None and on_box["target"] == new
    assert abs(on_box["deadline"] - given.until) < 5.0


def test_an_episode_is_told_once() -> None:
    noticed = note_episode("runpod:pod9", 50.0, True)
    taken = Interruption("runpod:pod9", "runpod says EXITED", noticed)
    assert first_telling(taken) and not first_telling(taken)
    note_episode("runpod:pod9", 60.0, False)  # it runs again: the episode ends
    later = note_episode("runpod:pod9", 70.0, True)
    again = Interruption("runpod:pod9", "runpod says EXITED", later)
    assert again.noticed_at == 70.0 and first_telling(again)


def test_epochs_lost_are_exact_only_when_the_last_epoch_was_seen() -> None:
    from remote.resume.move import Moving, money_lines
    status = {"completed_epochs": 4, "total_epochs": 20, "mean_epoch_seconds": 360.0,
              "args": {"hub_period": 4}}
    moving = Moving("org/exp", "exp", old_rate=1.0)
    [bound] = money_lines(status, moving)
    assert bound.startswith("work after epoch 4 is lost: at most 4 epoch(s), one milestone "
                            "(the bound: this laptop did not see the old box's last epoch)")
    assert bound.endswith("at most $0.40 ($0.10/epoch at $1.0000/h)")
    [live] = money_lines(status, moving, {"epoch": 6, "health": "live"})  # could go on
    assert "at most 4 epoch(s)" in live
    [exact] = money_lines(status, moving, {"epoch": 6, "health": "dead"})
    assert exact.startswith("work after epoch 4 is lost: 2 epoch(s), exact (this laptop saw "
                            "the old box's run dead at epoch 6), plus the epoch in progress")
    assert exact.endswith(", $0.20 ($0.10/epoch at $1.0000/h)")


def test_a_failed_list_still_finds_an_instance_wanted_running_and_says_it_was_taken(
        provider_standin, tmp_path, monkeypatch) -> None:
    """Nothing leased, but launched from here: the fleet and the watchdog ask for it on
    its own when the list fails, and its provider's stop is reported."""
    from remote.billing.accounts import Account
    from remote.fleet.fleet import FleetOptions, list_fleet
    from remote.fleet.watchdog import Rules, watch_once

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # this test's intents only
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    want_running(f"vast:{iid}", RunIntent("exp", "runs", ""))
    vast.take_away(iid)
    vast.fail_on("GET", "/v1/instances", 500, times=20)  # the list is down, shows work
    account = Account("vast", "default", vast.key, vast.base_url)
    options = FleetOptions(timeout=5, client_options={"backoff": 0.05, "max_backoff": 0.2})
    fleet = list_fleet([account], options)
    [failed] = [r for r in fleet.rows if r.error]
    [taken] = [r for r in fleet.rows if r.instance is not None]
    assert taken.target == f"vast:{iid}" and taken.account == failed.account
    assert taken.interrupted is not None and "taken away" in taken.interrupted.words()
    decisions = watch_once([account], Rules(), options, confirm_timeout=30.0, interval=0.05)
    assert {d.trigger for d in decisions} == {"account", "interrupted"}
    assert vast.calls("PUT") == []
