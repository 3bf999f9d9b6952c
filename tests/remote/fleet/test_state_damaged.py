"""The laptop's own state files damaged (a hand edit, a full disk, another tool): what
cannot be read is nothing recorded, said once on stderr naming the file, never a
traceback; `gpurent instances`, `gpurent lease X show` and the watchdog keep working,
and a file replaced after it could not be read is kept aside first."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from remote import cli
from remote.billing.intents import INTENTS_FILE, intents, observe, want_running
from remote.billing.statefile import state_file
from remote.fleet.idle import SEEN_FILE, remember_idle
from remote.fleet.interrupted import EPISODES_FILE, note_episode
from remote.fleet.leases import LEASES_FILE, lease_for, leases
from remote.fleet.watchrecords import TOLD_FILE, due_to_tell, read_record

HUGE = "1" + "0" * 400
#: Wrong types at every level, huge numbers, NaN and infinities, nesting past the cap.
BAD_INTENTS = (
    '{"vast:1": {"want": "running", "runs": 5, "since": "x", "seen_running": 1e308,'
    ' "price_per_hour": NaN, "guard": [1], "moved_to": 7},'
    ' "vast:2": {"want": "running", "since": ' + HUGE + ', "runs": [{"name": ["x"]},'
    ' {"name": "ok", "seen": [1], "project": 3}, 7]},'
    ' "vast:3": {"want": "running", "runs": [{"name": "deep", "seen": '
    + '{"a": ' * 100 + "1" + "}" * 100 + "}]},"
    ' "vast:4": "running", "vast:5": {"want": ["running"]}, "vast:6": {"want": "running",'
    ' "seen_running": -Infinity}}')


@pytest.fixture(autouse=True)
def _own_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """This test's state directory (each file is said once per process: a fresh path)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    state_file("x").parent.mkdir(parents=True)


def said(capsys: pytest.CaptureFixture[str], name: str) -> list[str]:
    """stderr's lines that name the state file ``name``."""
    return [line for line in capsys.readouterr().err.splitlines()
            if str(state_file(name)) in line]


@pytest.mark.parametrize("text", [
    BAD_INTENTS,
    "[" * 100_000 + "]" * 100_000,  # past the parser's recursion
    '[{"vast:1": {"want": "running"}}]',  # not an object
    '{"vast:1": {"want": "running"', b"\xff\xfe".decode("latin-1"),
], ids=["wrong-types", "deep", "list", "cut", "not-utf8"])
def test_a_malformed_intents_file_is_nothing_recorded_and_said_once(text, capsys) -> None:
    path = state_file(INTENTS_FILE)
    path.write_text(text, encoding="latin-1")
    found = intents()
    assert set(found) <= {"vast:1", "vast:2", "vast:6"}
    for intent in found.values():
        assert intent.since == 0.0 and intent.seen_running is None
        assert intent.price_per_hour is None and intent.guard is None
        assert [r.name for r in intent.runs] in ([], ["ok"])
        assert all(r.seen == {} and r.project == "" for r in intent.runs)
    intents()
    [line] = said(capsys, INTENTS_FILE)
    assert line.startswith("gpurent: ") and "read as nothing recorded" in line
    # The writers keep working on it; a file that could not be read is kept aside.
    observe("vast:2", time.time(), 0.5, {"ok": {"epoch": 3}})
    want_running("vast:1")
    assert intents()["vast:1"].want == "running"
    aside = path.with_name(f"{INTENTS_FILE}.unreadable")
    assert aside.read_text(encoding="latin-1") == text


@pytest.mark.parametrize("until", ["1e308", "-1e308", HUGE, "NaN", "Infinity", '"soon"'],
                         ids=["1e308", "-1e308", "10**400", "NaN", "Infinity", "text"])
def test_a_lease_out_of_range_is_no_lease_for_show_the_fleet_and_the_watchdog(
        until, capsys, monkeypatch, provider_standin) -> None:
    vast = provider_standin("vast")
    iid = vast.add_instance()
    target = f"vast:{iid}"
    state_file(INTENTS_FILE).write_text(BAD_INTENTS)
    state_file(LEASES_FILE).write_text(
        f'{{"{target}": {{"until": {until}, "then": "stop", "set_at": {until}}}}}')
    assert leases() == {} and lease_for(target) is None
    assert cli.main(["lease", target, "show", "--json"]) == 0
    shown = capsys.readouterr()
    assert json.loads(shown.out)["lease"] is None
    [line] = [x for x in shown.err.splitlines() if str(state_file(LEASES_FILE)) in x]
    assert f"1 entry unreadable ('{target}')" in line
    monkeypatch.setenv("XDG_CONFIG_HOME", str(state_file("xdg")))
    for env in ("RUNPOD_API_KEY", "LAMBDA_API_KEY"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("VAST_API_KEY", vast.key)
    monkeypatch.setenv("GPURENT_VAST_URL", vast.base_url)
    assert cli.main(["instances", "--json", "--no-ssh"]) == 0
    [row] = json.loads(capsys.readouterr().out)["rows"]
    assert row["target"] == target and row["lease"] is None
    # The watchdog ends nothing on a lease it cannot read, and says so as an alarm of
    # the pass (exit 1), with or without anything else to watch.
    for watched in (False, True):
        if watched:
            want_running(target)  # the boxes are then not reached
        assert cli.main(["watchdog", "--once", "--timeout", "5"]) == 1
        out = capsys.readouterr()
        assert "ALARM" in out.out + out.err and \
            "those leases are not enforced" in out.out + out.err, out
    assert vast.calls("PUT") == []
    cli.main(["lease", target, "show"])
    assert said(capsys, LEASES_FILE) == []  # said once: already told


def test_the_watchdogs_records_and_the_listings_memory_read_damage_as_nothing(
        capsys) -> None:
    now = time.time()
    records = state_file("watchdog")
    records.mkdir()
    (records / "vast-1.json").write_text(
        f'{{"episode": "lease:1", "at_epoch": {HUGE}, "start": NaN, "tries": "x"}}')
    (records / "vast-2.json").write_text(
        '{"episode": "lease:1", "at_epoch": 1e9, "start": ' + HUGE + ', "tries": 1e400,'
        ' "message": [1]}')
    assert read_record("vast:1") is None
    record = read_record("vast:2")
    assert record is not None and record.start is None and record.tries == 1
    assert record.message == ""
    state_file(TOLD_FILE).write_text(f'{{"a": {HUGE}, "b": NaN, "c": [1]}}')
    assert all(due_to_tell(key, now) for key in "abc")
    state_file(EPISODES_FILE).write_text(f'{{"vast:1": [1], "vast:2": {{"noticed_at": {HUGE}}}}}')
    assert note_episode("vast:1", now, True) == now == note_episode("vast:2", now, True)
    state_file(SEEN_FILE).write_text(f'{{"vast:1": {HUGE}, "vast:2": 1e308}}')
    assert remember_idle({"vast:1": True, "vast:2": True}, now) == \
        {"vast:1": now, "vast:2": now}
    assert capsys.readouterr().err == ""  # readable files, entries merely replaced
