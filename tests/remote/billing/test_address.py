"""Boxes named by their instance log in the way the user set up (issue 37): what
``~/.ssh/config`` says for the name (``Host vast:*``: User, IdentityFile), the ``-i`` keys
of ``gpurent instances``, ``gpurent watchdog`` and ``gpurent-tui`` (the fleet, and the tab
opened from a fleet row), else the provider's default user (Lambda's ubuntu). A box that
refuses the keys is said once, with what to do, never retried in a loop. Real parts: a
real sshd that lets in one user with one key, the real OpenSSH client's ``ssh -G`` (and
paramiko's parser where there is none), the provider stand-ins, the Pilot."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.billing import Locator, parse_instance_target
from remote.link import Connector
from remote.transport import openssh
from remote.transport.base import LoginRefused, NamedBox
from remote.transport.ssh import connect
from tests.fixtures.paths import ROOT
from tests.fixtures.pilot import SIZE, quiet_env, until  # noqa: F401 (quiet_env: autouse)
from tests.fixtures.screen import until_shown
from tests.fixtures.sshd import SSHServer, make_server
from trainer.providers import get_provider
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.screens.fleet import FleetScreen
from tui.widgets.badges import ConnectionBadge

GPURENT = Path(sys.executable).with_name("gpurent")
#: Who the box lets in: this account (root where the suite runs as root, as on a
#: rented image; another user logs in as itself, which only a User line can say).
ME = getpass.getuser()


@pytest.fixture
def only_me(tmp_path: Path) -> Iterator[SSHServer]:
    """A box that lets in ``ME`` alone, with its own key alone (``key_path``)."""
    server = make_server(tmp_path / "box", options=(f"AllowUsers {ME}",))
    yield server
    server.sshd.stop()


def laptop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, box: SSHServer, names: list[str],
           config: str = "") -> dict[str, str]:
    """A laptop HOME without keys or an agent, whose ssh config is ``config`` and whose
    known_hosts trusts ``box`` under ``names``; set here, and returned as the
    environment for the commands."""
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text(
        "".join(f"{name} {box.host_key_line}\n" for name in names))
    (home / ".ssh" / "config").write_text(config)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    return {"HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "HF_HOME": str(tmp_path / "hf")}


def vast_instance(standin, box: SSHServer, monkeypatch: pytest.MonkeyPatch) -> str:
    """A running Vast instance at ``box`` (Vast's login: root), its account the one
    configured from the environment."""
    iid = standin.add_instance()
    standin.set_address(iid, box.host, box.port)
    monkeypatch.setenv("VAST_API_KEY", standin.key)
    monkeypatch.setenv("GPURENT_VAST_URL", standin.base_url)
    return iid


def gpurent(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GPURENT), *args], capture_output=True, text=True, timeout=180,
                          env={**os.environ, **env})


def whoami(transport) -> str:
    return transport.run("id -un").stdout.decode().strip()


# ------------------------------------------------------------------ the name's settings


@pytest.mark.parametrize("client", ["ssh", "none"])
def test_a_named_box_takes_its_names_block_and_the_providers_user_when_it_names_none(
        client, provider_standin, tmp_path, monkeypatch):
    """Resolved by ``ssh -G`` (and by paramiko's parser where there is no ssh): the
    block for the name gives User, IdentityFile and HostKeyAlias; the provider's address
    and port win over its HostName and Port; with no User the provider's default user
    logs in (Lambda: ubuntu, as its client says), never this account's name."""
    monkeypatch.setenv("GPURENT_SSH", client)
    lam = provider_standin("lambda")
    lid = lam.add_instance(ip="198.51.100.2")
    box = Locator(parse_instance_target(f"lambda:{lid}"),
                  provider=get_provider("lambda", lam.key, lam.base_url))()
    assert box == NamedBox(f"lambda:{lid}", "198.51.100.2", 22, "ubuntu")
    config = tmp_path / "ssh_config"

    def settings(text: str):
        config.write_text(text)
        return openssh.resolver(str(config), 15.0)(box, None, ())

    plain = settings(f"Host other\n  User {ME}\n")
    assert (plain.user, plain.hostname, plain.port, plain.host_key_alias) == (
        "ubuntu", "198.51.100.2", 22, f"lambda:{lid}")
    mine = settings(f"Host lambda:*\n  User {ME}\n  IdentityFile /keys/lambda\n"
                    "  HostName elsewhere.example\n  Port 2200\n")
    assert (mine.user, mine.hostname, mine.port, mine.identity_files) == (
        ME, "198.51.100.2", 22, ("/keys/lambda",))
    aliased = settings("Host lambda:*\n  User alice\n  HostKeyAlias mine\n")
    assert (aliased.user, aliased.host_key_alias) == ("alice", "mine")


def test_the_providers_user_logs_in_unless_the_config_names_one(only_me, tmp_path,
                                                                monkeypatch):
    """On the real sshd: Lambda's default user (ubuntu) is refused there, in one line that
    says what to give; a ``Host lambda:*`` User (and IdentityFile) logs in as that user."""
    laptop(tmp_path, monkeypatch, only_me, ["lambda:7"])
    box = NamedBox("lambda:7", only_me.host, only_me.port, "ubuntu")
    with pytest.raises(LoginRefused) as refused:
        connect(box, allow_agent=False, identity_files=(only_me.key_path,))
    said = str(refused.value)
    assert said.startswith(f"permission denied for ubuntu@{only_me.host}:{only_me.port}: "
                           f"tried {only_me.key_path}; give -i KEY")
    assert "`Host lambda:*`" in said and "\n" not in said
    Path(os.environ["HOME"], ".ssh", "config").write_text(
        f"Host lambda:*\n  User {ME}\n  IdentityFile {only_me.key_path}\n"
        "  IdentitiesOnly yes\n")
    with connect(box, allow_agent=False) as transport:
        assert whoami(transport) == ME


def test_a_host_block_for_the_provider_logs_a_vast_target_in(only_me, provider_standin,
                                                             tmp_path, monkeypatch):
    """``vast:ID`` (``gpurent status vast:ID:...``, a TUI tab) logs in with the User and
    IdentityFile of ``Host vast:*``; without the block the box's only key is not tried."""
    vast = provider_standin("vast")
    iid = vast_instance(vast, only_me, monkeypatch)
    name = f"vast:{iid}"
    laptop(tmp_path, monkeypatch, only_me, [name])

    def opened() -> Connector:
        return Connector(name, bootstrap=False, ssh_options={"allow_agent": False},
                         locate=Locator(parse_instance_target(name)))

    with pytest.raises(LoginRefused, match="no usable key.*`Host vast:\\*`"):
        opened().open()
    Path(os.environ["HOME"], ".ssh", "config").write_text(
        f"Host vast:*\n  User {ME}\n  IdentityFile {only_me.key_path}\n")
    with opened().open() as transport:
        assert whoami(transport) == ME


# ------------------------------------------------------------------ -i


def test_gpurent_instances_with_i_reaches_a_box_only_that_key_opens(only_me, provider_standin,
                                                                    tmp_path, monkeypatch):
    vast = provider_standin("vast")
    iid = vast_instance(vast, only_me, monkeypatch)
    env = laptop(tmp_path, monkeypatch, only_me, [f"vast:{iid}"],
                 f"Host vast:*\n  User {ME}\n")
    env.update(VAST_API_KEY=vast.key, GPURENT_VAST_URL=vast.base_url)
    refused = gpurent(env, "instances", "--json", "--timeout", "10")
    assert refused.returncode == 0, refused.stderr
    [row] = json.loads(refused.stdout)["rows"]
    assert row["box"] is None and "give -i KEY" in row["unreachable"]
    assert row["weights"]["state"] == "unknown"  # 'weights: ?'
    listed = gpurent(env, "instances", "--json", "--timeout", "10", "-i", only_me.key_path)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)["rows"]
    assert row["unreachable"] is None and row["box"] is not None
    # Reached and judged: no run is registered there, which is said (not "NOT safe",
    # issue 38), rather than the unreachable box's "give -i KEY".
    assert row["weights"]["state"] == "unknown", row["weights"]
    assert "no run registered on the box" in row["weights"]["reason"], row["weights"]
    missing = gpurent(env, "instances", "-i", str(tmp_path / "nokey"))
    assert missing.returncode == 2
    assert missing.stderr == f"gpurent instances: -i {tmp_path / 'nokey'}: no such key file\n"


def test_the_watchdog_reaches_the_boxes_with_i(only_me, provider_standin, tmp_path,
                                               monkeypatch):
    """An instance idle 20 minutes under a 10-minute rule: stopped once its box is
    reached (``-i``); a box the watchdog cannot log in to is not judged idle."""
    vast = provider_standin("vast", settle_polls=1)
    iid = vast_instance(vast, only_me, monkeypatch)
    vast.started(iid, 20 * 60)
    env = laptop(tmp_path, monkeypatch, only_me, [f"vast:{iid}"],
                 f"Host vast:*\n  User {ME}\n")
    env.update(VAST_API_KEY=vast.key, GPURENT_VAST_URL=vast.base_url)
    command = ["watchdog", "--once", "--json", "--idle-minutes", "10", "--timeout", "10",
               "--poll", "0.05"]
    blind = gpurent(env, *command)
    assert blind.returncode == 0, blind.stderr
    assert json.loads(blind.stdout)["decisions"] == [] and not vast.calls("PUT")
    acted = gpurent(env, *command, "-i", only_me.key_path)
    assert acted.returncode == 0, acted.stderr
    [decision] = json.loads(acted.stdout)["decisions"]
    assert (decision["target"], decision["trigger"], decision["action"],
            decision["acted"]) == (f"vast:{iid}", "idle", "stop", True)
    assert vast.instances[iid]["actual_status"] == "stopped"


# ------------------------------------------------------------------ the TUI

async def open_the_row(app: GpurentApp, pilot, target: str) -> BoxView:
    """Wait for the fleet's row of ``target`` and open it as a box tab (Enter)."""
    await until_shown(pilot, target, "listed in")
    assert isinstance(app.screen, FleetScreen)
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, FleetScreen))
    assert [s.target for s in app.specs] == [target]
    return app.query_one(BoxView)


@pytest.mark.anyio
async def test_the_tuis_i_reaches_the_fleet_and_the_tab_opened_from_it(
        only_me, provider_standin, tmp_path, monkeypatch):
    vast = provider_standin("vast")
    iid = vast_instance(vast, only_me, monkeypatch)
    laptop(tmp_path, monkeypatch, only_me, [f"vast:{iid}"], f"Host vast:*\n  User {ME}\n")
    from tui.main import build_parser, ssh_options

    parser = build_parser()
    app = GpurentApp([], ssh_options=ssh_options(
        parser.parse_args(["-i", only_me.key_path]), parser))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until(pilot, lambda: getattr(app.screen, "fleet", None) is not None)
        [row] = app.screen.fleet.rows
        assert row.box is not None and not row.unreachable, row.unreachable
        box = await open_the_row(app, pilot, f"vast:{iid}")
        await until(pilot, lambda: box.state.transport is not None)
        assert whoami(box.state.transport) == ME


@pytest.mark.anyio
async def test_the_tuis_accept_new_reaches_the_fleet_and_the_tab_opened_from_it(
        only_me, provider_standin, tmp_path, monkeypatch):
    """``gpurent-tui --accept-new -i KEY`` with no host: the fleet's box has a key this
    laptop never saw; the row is reached and its tab too (the flag used to stay out of
    the fleet: the row said the key was unknown)."""
    vast = provider_standin("vast")
    iid = vast_instance(vast, only_me, monkeypatch)
    laptop(tmp_path, monkeypatch, only_me, [], f"Host vast:*\n  User {ME}\n")
    from tui.main import app_from_args

    app = app_from_args(["--accept-new", "-i", only_me.key_path])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until(pilot, lambda: getattr(app.screen, "fleet", None) is not None)
        [row] = app.screen.fleet.rows
        assert row.box is not None and not row.unreachable, row.unreachable
        box = await open_the_row(app, pilot, f"vast:{iid}")
        await until(pilot, lambda: box.state.transport is not None)
        assert whoami(box.state.transport) == ME


@pytest.mark.anyio
async def test_a_refused_login_from_a_fleet_row_is_said_once_not_retried(
        only_me, provider_standin, tmp_path, monkeypatch):
    """No key the box takes: the row says why, and the tab opened from it tries once,
    stops, and says what to give (it used to retry the refusal in a loop)."""
    vast = provider_standin("vast")
    iid = vast_instance(vast, only_me, monkeypatch)
    laptop(tmp_path, monkeypatch, only_me, [f"vast:{iid}"], f"Host vast:*\n  User {ME}\n")
    app = GpurentApp([])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until(pilot, lambda: getattr(app.screen, "fleet", None) is not None)
        [row] = app.screen.fleet.rows
        assert row.box is None and "permission denied" in row.unreachable
        box = await open_the_row(app, pilot, f"vast:{iid}")
        badge = app.query_one(ConnectionBadge)
        await until(pilot, lambda: badge.state == "error")
        assert not box.state.retrying and "try 2" not in str(badge.content)
        assert "give -i KEY" in (box.state.not_connected or "")
        await until_shown(pilot, "permission denied", "r: try again")
