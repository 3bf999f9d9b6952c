"""A box tab whose watcher stopped reconnecting because a person must act (issue 37's
leftover, issue 38 item 8): said once and whole (the fix is never cut, not in the status
row, the events or the dialog), and a changed host key is offered to be forgotten, which
runs the fix after confirmation. The error is a real one from the sshd fixture."""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.widgets import Button

from remote.link import changed_host_key, whole_line
from remote.transport.hostkeys import HostKeyChanged
from remote.watch.events import ConnectionEvent
from tests.fixtures.screen import history, until_shown
from tests.fixtures.screen import until_true as until
from tests.fixtures.sshd import SSHServer, keygen, write_known_host
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.confirm import ConfirmDialog
from tui.spec import BoxSpec
from tui.widgets.badges import ConnectionBadge

pytestmark = pytest.mark.anyio



def changed_key_error(sshd: SSHServer, tmp_path: Path) -> tuple[HostKeyChanged, Path]:
    """A real "host key changed" from the sshd fixture: its known_hosts, deep in a long
    folder, files a stranger's key for the box."""
    deep = tmp_path / ("a-folder-with-a-long-name-" * 3) / "ssh"
    deep.mkdir(parents=True)
    key = tmp_path / "stranger"
    keygen(key, "stranger")
    known = deep / "known_hosts"
    write_known_host(known, sshd.host, sshd.port,
                     " ".join(Path(f"{key}.pub").read_text().split()[:2]))
    with pytest.raises(HostKeyChanged) as changed:
        sshd.connect(known_hosts=str(known))
    return changed.value, known


async def test_a_changed_host_key_stops_says_it_whole_and_offers_the_fix(
        sshd: SSHServer, tmp_path: Path) -> None:
    error, known = changed_key_error(sshd, tmp_path)
    fix = f"ssh-keygen -R '[{sshd.host}]:{sshd.port}' -f {known}"
    assert fix in str(error)
    app = GpurentApp([BoxSpec("local", "local", project=str(tmp_path))], autoconnect=False)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        box = app.query_one(BoxView)
        box.state.reached = True
        box.watching.deliver(box.state.gen, ConnectionEvent("live"))
        box.watching.deliver(box.state.gen, ConnectionEvent(
            "blocked", whole_line(error), forget=changed_host_key(error)))
        await until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        dialog = app.screen
        assert fix in dialog.body.plain  # the dialog runs this, shown whole
        badge = box.query_one(ConnectionBadge)
        assert badge.state == "blocked" and "r: try again" in str(badge.content)
        # the status row and the events hold the whole message, the fix included
        assert fix in box.panes.status_row.text.plain
        await until(pilot, lambda: box.panes.status_row.size.height > 1)  # wrapped, not cut
        said = [line for line in history(app) if "stopped reconnecting" in line]
        assert len(said) == 1 and fix in said[0], said
        await until_shown(pilot, str(known))
        dialog.query_one("#confirm", Button).focus()  # from the keyboard (a toast may
        await pilot.pause()                            # cover the button's place)
        await pilot.press("enter")
        await until(pilot, lambda: str(sshd.port) not in known.read_text(), 5)
        assert (known.parent / "known_hosts.old").exists()  # OpenSSH's own backup
        await until(pilot, lambda: any("forgot the old host key" in line
                                       for line in history(app)))


async def test_a_refused_login_after_a_drop_is_said_once_with_what_to_give(
        sshd: SSHServer, tmp_path: Path) -> None:
    key = tmp_path / "stranger"
    keygen(key, "stranger")
    with pytest.raises(Exception) as refused:
        sshd.connect(identity_files=(str(key),))
    app = GpurentApp([BoxSpec("local", "local", project=str(tmp_path))], autoconnect=False)
    async with app.run_test(size=(100, 30), notifications=True) as pilot:
        box = app.query_one(BoxView)
        box.state.reached = True
        box.watching.deliver(box.state.gen, ConnectionEvent("live"))
        box.watching.deliver(box.state.gen, ConnectionEvent("stale", "no data", 6.0))
        box.watching.deliver(box.state.gen, ConnectionEvent("blocked",
                                                            whole_line(refused.value)))
        badge = box.query_one(ConnectionBadge)
        await until(pilot, lambda: badge.state == "blocked")
        assert not isinstance(app.screen, ConfirmDialog)  # nothing to forget
        row = box.panes.status_row.text.plain
        assert "permission denied" in row and "r: try again" in row
        assert sum("stopped reconnecting" in line for line in history(app)) == 1
