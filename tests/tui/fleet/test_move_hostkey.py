"""The fleet's connections to a box it was not opened on (``m``'s new box, a lease written
on a box) meet an unknown host key with the host-key dialog, as a box tab does (issue 38
item 8: a move to a new box said "pass --accept-new" and failed). Real sshd."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from textual.widgets import Button

from remote.fleet import FleetOptions, list_fleet
from tests.fixtures.screen import until_true as until
from tests.fixtures.sshd import SSHServer
from tui.app import GpurentApp
from tui.dialogs.confirm import ConfirmDialog
from tui.screens.fleet import FleetScreen

pytestmark = pytest.mark.anyio



async def test_a_new_box_with_an_unknown_key_opens_the_host_key_dialog(
        sshd: SSHServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    options = FleetOptions(timeout=10, ssh_options={
        "known_hosts": str(known), "identity_files": (sshd.key_path,),
        "allow_agent": False, "ssh_config": sshd.ssh_config})
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet([], options)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        await until(pilot, lambda: isinstance(app.screen, FleetScreen)
                    and getattr(app.screen, "fleet", None) is not None)
        fleet = app.screen
        spec, _, _ = fleet.mover_for(f"{sshd.user}@{sshd.host}:{sshd.port}")
        connector = spec.connector
        opened: list[object] = []
        thread = threading.Thread(target=lambda: opened.append(_open(connector)), daemon=True)
        thread.start()
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog)
                    and bool(app.screen.query("#confirm")))  # composed, not only pushed
        assert "can't be established" in app.screen.query_one("#body").content.plain
        app.screen.query_one("#confirm", Button).focus()
        await pilot.pause()
        await pilot.press("enter")
        await until(pilot, lambda: bool(opened))
    thread.join(10)
    transport = opened[0]
    assert not isinstance(transport, BaseException), transport
    try:
        assert transport.run("echo ok").stdout == b"ok\n"
    finally:
        transport.close()
    assert f"[{sshd.host}]:{sshd.port}" in known.read_text()  # trusted: on file now


def _open(connector) -> object:
    try:
        return connector.open(early=False, gate=True)
    except Exception as exc:  # noqa: BLE001 - the test shows it
        return exc
