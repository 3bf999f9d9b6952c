"""A real user's first hour, through the TUI (issue 28, item 3): a box that is a real sshd
logged into as a non-root user whose login directory is its own home, opened the way a
user opens it (``gpurent-tui USER@HOST -p PORT --provider vast --instance ID``: the
default relative project ``runs/train``, no ``--price``, the host key unknown and
accepted through the question), a dataset at a path relative to that home. Through it:
launch from the form, watch, push to the Hub (stand-in), pull, arm the guard (Vast
stand-in; the instance's own key in the box's environment), stop the run, see the guard
end the billing, quit. ``tests/e2e/test_userpath_tmux.py`` runs the same path once in a real
terminal with the app installed from its wheel."""

from __future__ import annotations

import json
import pwd
from pathlib import Path

import pytest
from textual.widgets import Input

from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.pilot import messages, press_button, quiet_env, shown, until  # noqa: F401
from tests.fixtures.providers_standin import ProviderStandin
from tests.fixtures.screen import flat, screen_text
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_main_kit import specs
from tests.fixtures.userpath_kit import VAST_ID, box_dataset, box_env
from trainer import runfiles
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.guard import GuardDialog
from tui.dialogs.launch import LaunchForm
from tui.dialogs.pull import PullDialog
from tui.dialogs.push import PushDialog
from tui.dialogs.quit import QuitDialog
from tui.widgets.metrics import MetricsPane

pytestmark = [pytest.mark.anyio, pytest.mark.slow, pytest.mark.first, pytest.mark.timeout(600)]


def laptop(tmp_path: Path, box: SSHServer, vast: ProviderStandin, hub: HubStandin,
           monkeypatch: pytest.MonkeyPatch) -> Path:
    """This process as the user's laptop: ~/.ssh/config with the key (an empty
    known_hosts: the box's key is unknown), the account key and stand-ins' addresses,
    the Hub token; returns the known_hosts file."""
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True)
    known = home / ".ssh" / "known_hosts"
    known.touch()
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {box.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known}\n")
    for name, value in {"HOME": str(home), "SSH_AUTH_SOCK": "", "VAST_API_KEY": vast.key,
                        "GPURENT_VAST_URL": vast.base_url, "HF_ENDPOINT": hub.url,
                        "HF_TOKEN": VALID_TOKEN, "HF_HUB_DISABLE_XET": "1"}.items():
        monkeypatch.setenv(name, value)
    return known


def box_processes_holding(box: SSHServer, secret: bytes) -> list[int]:
    """The pids of the box user's processes whose environment or argv holds ``secret``."""
    uid = pwd.getpwnam(box.user).pw_uid
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if not entry.name.isdigit() or entry.stat().st_uid != uid:
                continue
            if secret in (entry / "environ").read_bytes() + (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.box_env.with_args(box_env)  # a function: with_args, not a decorator
async def test_the_user_path_through_the_tui(user_box: SSHServer, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch,
                                             vast_standin: ProviderStandin,
                                             hub_standin: HubStandin) -> None:
    box = user_box
    home = Path(box.home)
    known = laptop(tmp_path, box, vast_standin, hub_standin, monkeypatch)
    iid = vast_standin.add_instance(VAST_ID)
    vast_standin.instance_key(iid, f"vast-key-{VAST_ID}")
    vast_standin.set_address(iid, box.host, box.port, box.user)
    box_dataset(box)
    app = GpurentApp(specs(f"{box.user}@{box.host}", "-p", str(box.port),
                           "--provider", "vast", "--instance", iid))
    assert app.specs[0].project == "runs/train" and app.specs[0].price is None
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        view = app.query_one(BoxView)
        # First contact: the unknown host key, accepted through the question.
        await until(pilot, lambda: shown(app, ConfirmDialog) and app.focused is not None,
                    timeout=60)
        assert "SHA256:" in app.screen.body.plain
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: view.state.transport is not None, timeout=180)
        assert box.host in known.read_text() or str(box.port) in known.read_text()
        # Launch from the form: a data path relative to the login directory.
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        for key, value in {"data": "data/data.yaml", "epochs": "500", "imgsz": "32",
                           "batch": "8", "name": "first", "device": "cpu",
                           "extra": "workers=0 seed=0 patience=0"}.items():
            # As typed: the field has the focus (so the box's answers leave it alone),
            # its text set whole (no key can be lost).
            field = form.query_one(f"#f-{key}", Input)
            field.focus()
            await until(pilot, lambda field=field: field.has_focus)
            field.value = value
            await pilot.pause()  # its change handled while it has the focus: typed
        await pilot.pause(0.1)
        # The doctor runs on the box for each new data path; a loaded machine is slow.
        await until(pilot, lambda: "dataset doctor found no errors" in
                    flat(screen_text(app)), timeout=300)
        # The command shown is the command run: paths from the login directory.
        preview = form.query_one("#command").content.plain
        assert f"cd {home}/runs/train " in preview, preview
        assert f"data={home}/data/data.yaml " in preview, preview
        assert "epochs=500 " in preview and "imgsz=32 " in preview, preview  # as typed
        await press_button(pilot, "#launch")
        run_dir = f"{home}/runs/train/first"
        await until(pilot, lambda: view.state.run_dir in (run_dir, "runs/train/first"),
                    timeout=120)
        # Watch: the panes fill from the live run.
        await until(pilot, lambda: view.state.status is not None
                    and view.state.status.read.get("state") == "running"
                    and len(view.query_one(MetricsPane).rows) >= 1, timeout=300)
        assert (home / "runs" / "train" / "first" / "weights" / "best.pt").is_file()
        # No --price: the price is the provider's.
        assert "$0.452/h" in view.money_text().plain or "$0.45/h" in view.money_text().plain
        # Push to the Hub (from the box).
        await pilot.press("u")
        await until(pilot, lambda: shown(app, PushDialog))
        await pilot.press(*"me/detector", "enter")
        await until(pilot, lambda: any(m.startswith("pushed") for m in messages(app)),
                    timeout=180)
        assert hub_standin.repo("me/detector").commits
        # Pull to this laptop (the working directory's weights/).
        await pilot.press("w")
        await until(pilot, lambda: shown(app, PullDialog) and app.focused is not None)
        await pilot.press("enter")  # the folder offered: ./weights
        await until(pilot, lambda: any(m.startswith("pulled") for m in messages(app)),
                    timeout=180)
        assert (tmp_path / "weights").exists() and any((tmp_path / "weights").rglob("*.pt"))
        # Arm the guard: when the run ends, stop the instance.
        await pilot.press("a")
        await until(pilot, lambda: shown(app, GuardDialog) and app.focused is not None)
        await press_button(pilot, "#arm")
        await until(pilot, lambda: view.state.guard is not None
                    and view.state.guard.watching, timeout=60)
        # The account key stays on the laptop: in no process of the box's user, and the
        # guard was handed none (no --key-stdin: it reads the instance's own key).
        assert box_processes_holding(box, vast_standin.key.encode()) == []
        guard_pid = json.loads((home / "runs" / "train" / "first" / "guard.json")
                               .read_text())["pid"]
        assert b"--key-stdin" not in Path(f"/proc/{guard_pid}/cmdline").read_bytes()
        # Stop the run; the guard ends the billing.
        await pilot.press("x")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: any(m.startswith("stop: stopped") for m in messages(app)),
                    timeout=180)
        await until(pilot, lambda: view.state.guard is not None
                    and view.state.guard.state == "done", timeout=180)
        assert vast_standin.instances[iid]["intended_status"] == "stopped"
        assert {r.scope for r in vast_standin.calls("PUT", iid)} == {"instance"}
        await until(pilot, lambda: "instance stopped" in view.money_text().plain, timeout=60)
        # Quit.
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        # The guard stopped the instance: only its disk bills, nothing to stop.
        body = app.screen.body.plain
        assert f"run first was stopped; instance {iid} is stopped: its disk bills " \
               "$0.0694/h." in body, body
        assert "idle" not in body and not app.screen.query("#stop-instance")
        await press_button(pilot, "#quit")
    assert runfiles.read_status(home / "runs" / "train" / "first").get("state") == "stopped"
    assert f"instance {iid} is stopped: its disk bills $0.0694/h" in app.farewell
    assert "idle" not in app.farewell and "until you stop it" not in app.farewell
