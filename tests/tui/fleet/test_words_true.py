"""Words that must stay true: Enter on the quit dialog quits as the help says; a lease
with under a minute left is not "0 min left"; a host key's fingerprints reach ``--json``
whole; the destroy dialog of a stopped instance says what it bills now (its disk) and
that the disk is deleted, once each; the guard key on this machine says at once that a
guard needs a provider instance, without a dialog or a lasting red line."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import paramiko
import pytest

from remote.billing.accounts import Account
from remote.cli import main as gpurent
from remote.fleet.fleet import FleetOptions, FleetRow, list_fleet
from remote.fleet.leases import Lease, parse_duration
from remote.transport.hostkeys import (
    HostKeyChanged,
    append_known_host,
    fingerprint,
    verify_host_key,
)
from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from trainer.providers.vast import VastProvider
from tui.box.guard import no_instance
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.guard import GuardDialog
from tui.dialogs.quit import QuitDialog
from tui.spec import BoxSpec

pytestmark = pytest.mark.anyio
SIZE = (150, 46)


async def test_enter_on_the_quit_dialog_quits_as_the_help_says(run_factory):
    run = run_factory("exp1", done=3, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        assert app.focused.id == "quit"
        await pilot.press("enter")
        await until(pilot, lambda: bool(app.farewell))
    assert "run exp1 completed on this machine" in app.farewell


def test_a_lease_with_seconds_left_says_seconds_never_zero_minutes():
    now = 1_000_000.0
    one_minute = Lease("vast:4242", now + parse_duration("1m"))
    stopped = VastProvider("k").parse("8", {"actual_status": "stopped",
                                            "intended_status": "stopped"})
    row = FleetRow("vast/default", "vast", stopped, lease=one_minute)
    assert "lease 59 s left" in row.words(now + 1), row.words(now + 1)
    assert one_minute.left_words(now + 1) == "59 s left"
    assert one_minute.left_words(now + 59.6) == "1 s left"
    assert one_minute.left_words(now + 90) == "passed 30 s ago"
    assert Lease("vast:4242", now + 6 * 3600).left_words(now + 60) == "5 h 59 min left"


def changed_host_key(tmp_path: Path) -> HostKeyChanged:
    """The refusal of a box whose host key changed: both fingerprints, the file's path."""
    known_hosts = str(tmp_path / "a-long-home-directory" / ".ssh" / "known_hosts")
    old, new = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    append_known_host(known_hosts, "vast:4242", old)
    with pytest.raises(HostKeyChanged) as raised:
        verify_host_key(new, "vast:4242", 22, known_hosts)
    assert fingerprint(old) in str(raised.value) and fingerprint(new) in str(raised.value)
    return raised.value


def test_a_changed_host_key_reaches_the_fleets_json_whole(provider_standin, tmp_path,
                                                          monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    refused = changed_host_key(tmp_path)
    vast = provider_standin("vast")
    iid = vast.add_instance()

    def probe(client, inst, target):
        raise refused

    fleet = list_fleet([Account(vast.provider, "default", vast.key, vast.base_url)],
                       FleetOptions(timeout=5, weights=False, probe=probe))
    [row] = [r for r in fleet.to_dict()["rows"] if r["target"] == f"vast:{iid}"]
    assert row["unreachable"] == " ".join(str(refused).split())
    assert "…" not in row["unreachable"]
    said = [w for w in row["words"] if w.startswith("unreachable: ")]
    assert said and len(said[0]) <= 220  # the words for people may shorten it


def test_a_changed_host_key_reaches_the_lease_json_whole(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    refused = changed_host_key(tmp_path)

    def open_transport(*_args, **_kw):
        raise refused

    monkeypatch.setattr("remote.commands.lease.open_transport", open_transport)
    assert gpurent(["lease", "vast:4242", "1h", "--json"]) == 1
    told = json.loads(capsys.readouterr().out)["box"]
    assert told == " ".join(str(refused).split()) and "…" not in told


async def test_destroying_a_stopped_instance_says_its_disk_bills_now_and_goes_once(
        run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance(actual_status="stopped", intended_status="stopped",
                                    cur_state="stopped")  # $0.4520/h running
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog))
        words = " ".join(s.content.plain for s in app.screen.query(".body"))
    assert "$0.45" not in words and "Running" not in words, words  # not what it bills
    assert words.count("$0.0694/h") == 1 and "stopped" in words, words  # its disk, once
    assert words.count("delete") == 1 and "gone" not in words, words


async def test_the_guard_key_on_this_machine_says_at_once_it_needs_an_instance(
        run_factory, monkeypatch):
    monkeypatch.setattr("tui.box.guard.this_machine", lambda: None)
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await pilot.press("a")
        await until(pilot, lambda: box.state.last_line is not None
                    and "no guard here" in box.state.last_line[0], timeout=10)
        assert not isinstance(app.screen, GuardDialog)
        line, severity = box.state.last_line
        assert severity == "information"  # it fades: no red line for the session
        assert "provider instance" in line and "--provider" not in line
        assert box.state.guard is None and not (run / "guard.json").exists()


def test_the_guard_words_for_the_demo_and_a_rented_box(monkeypatch):
    monkeypatch.setattr("tui.box.guard.this_machine", lambda: None)

    def state(spec: BoxSpec) -> SimpleNamespace:
        named = bool(spec.provider and spec.instance)
        return SimpleNamespace(spec=spec, has_instance=lambda: named)

    demo = no_instance(state(BoxSpec("local", "local", demo=True)))
    assert demo.startswith("no guard here: the demo runs on this machine")
    assert no_instance(state(BoxSpec("local", "local", provider="vast", instance="7"))) == ""
    assert no_instance(state(BoxSpec("ssh", "user@box"))) == ""  # the box may know itself
    monkeypatch.setattr("tui.box.guard.this_machine", lambda: ("vast", "7"))
    assert no_instance(state(BoxSpec("local", "local"))) == ""  # this machine is rented
