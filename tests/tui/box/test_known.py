"""Words only for what is known, and the first contact with a box (issue 28, items 4 and
5): a box never reached says so and claims no run, no billing and no "last data"; a
missing API key ends the retries and names what to set; a destroyed instance is said
destroyed and nothing else about money; the instance dialogs name a run still training;
this machine shows no billing and no other project's weights; a declined host key is
final until r, and the first connection never reads as an outage. Real parts: the
pilot, the real sshd, the provider stand-in, real run directories."""

from __future__ import annotations

import dataclasses
import re

import pytest
from textual.widgets import Checkbox, Input

from tests.fixtures.pilot import SIZE, messages, press_button, quiet_env, shown, until  # noqa: F401 (quiet_env: an autouse fixture)
from tests.fixtures.screen import history, screen_text, until_shown
from tests.fixtures.sshd import free_port
from tests.fixtures.tui_e2e_kit import ssh_spec
from tests.fixtures.tui_main_kit import specs
from tests.fixtures.tui_runs import write_run
from tests.fixtures.tui_scenes import SPEC, scene_app, show_scene
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.base import Dialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.quit import QuitDialog
from tui.spec import BoxSpec
from tui.widgets.badges import ConnectionBadge, WeightsBadge

pytestmark = pytest.mark.anyio
LARGE = (160, 48)


async def quit_words(app, pilot) -> str:
    """Open the quit dialog and return its body."""
    await pilot.press("q")
    await until(pilot, lambda: shown(app, QuitDialog))
    return app.screen.body.plain


# ---------------------------------------------------------------- A: never reached


async def test_a_box_never_reached_claims_no_run_no_billing_and_no_last_data(tmp_path):
    app = GpurentApp([BoxSpec("ssh", "nobody@127.0.0.1", port=free_port(),
                              project=str(tmp_path))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        badge = app.query_one(ConnectionBadge)
        # Two failed tries of the control connection: the watcher's have come by now.
        # (Any later try too: the watcher's own tries may redraw the badge meanwhile.)
        await until(pilot, lambda: any(int(n) >= 3 for n in
                                       re.findall(r"try (\d+) in", str(badge.content))))
        text = screen_text(app)
        assert "last data" not in text and "no link" not in text
        assert not any("link lost" in line for line in history(app))
        body = await quit_words(app, pilot)
        assert body.startswith(f"nobody@127.0.0.1:{app.specs[0].port}: never reached")
        assert "cannot connect" in body
        for claim in ("no run", "idle", "$", "bill", "trains"):
            assert claim not in body
        assert not app.screen.query("#stop-instance") and app.screen.title_text == "Quit"
        await press_button(pilot, "#quit")
    assert "never reached" in app.farewell
    for claim in ("no run", "idle", "$", "bill", "Detached"):
        assert claim not in app.farewell


# ---------------------------------------------------------------- B: a missing key


async def test_a_missing_api_key_stops_retrying_and_says_what_to_set():
    app = GpurentApp(specs("vast:4242"))  # no VAST_API_KEY, no config file
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        badge = app.query_one(ConnectionBadge)
        await until(pilot, lambda: badge.state == "error")  # tried once, not retried
        assert not box.state.retrying
        row = str(box.query_one("#status-row").render())
        assert "not connected" in row and "VAST_API_KEY" in row and "[vast]" in row
        await pilot.press("x")  # a box key says what is missing, not "wait"
        await until(pilot, lambda: len(messages(app)) >= 2)
        assert "VAST_API_KEY" in messages(app)[-1]
        assert "wait for the connection" not in messages(app)[-1]
        body = await quit_words(app, pilot)
        assert "never reached" in body and "VAST_API_KEY" in body
        assert not app.screen.query("#stop-instance")  # it cannot work without the key
        await press_button(pilot, "#quit")
    assert "never reached" in app.farewell and "bills" not in app.farewell


# ---------------------------------------------------------------- C, D: the instance


def instance_scene(tmp_path, standin, which: str):
    """The scene's box (root@203.0.113.7:41022, $3.00/h) as a Vast instance of the
    stand-in at that address."""
    iid = standin.add_instance()
    standin.set_address(iid, "203.0.113.7", 41022)
    spec = dataclasses.replace(SPEC, instance=iid, provider_url=standin.base_url)
    return scene_app(tmp_path, which, spec), iid


async def test_after_a_destroy_the_screen_says_destroyed_and_nothing_about_billing(
        tmp_path, vast_standin, monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    app, iid = instance_scene(tmp_path, vast_standin, "done")
    async with app.run_test(size=LARGE, notifications=True) as pilot:
        box = await show_scene(pilot)
        assert "$3.00/h" in box.money_text().plain
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog))
        app.screen.query_one("#override", Checkbox).value = True  # the path is not here
        app.screen.query_one("#typed", Input).value = iid
        await pilot.pause()
        await press_button(pilot, "#destroy")
        await until(pilot, lambda: any("destroyed" in m for m in messages(app)), timeout=60)
        # Every worker the destroy started has ended (asking the provider again too).
        await until(pilot, lambda: not box.state.activities and not [
            w for w in app.workers if w.name in ("instance_call", "refresh_instance")
            and w.is_running])
        await pilot.pause()
        text = screen_text(app)
        assert "destroyed" in text
        assert "404" not in text and "no instance" not in text and "failed" not in text
        assert "$3.00" not in text and "/h" not in box.money_text().plain
        assert not any("no instance" in m for m in messages(app))
        body = await quit_words(app, pilot)
        assert f"instance {iid} destroyed" in body
        assert "$" not in body and "bill" not in body and "idle" not in body
        assert not app.screen.query("#stop-instance")
        await press_button(pilot, "#quit")
    assert f"instance {iid} destroyed" in app.farewell
    assert "bills" not in app.farewell and "$" not in app.farewell


async def test_instance_dialogs_name_a_run_still_training(tmp_path, vast_standin,
                                                          monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    app, _iid = instance_scene(tmp_path, vast_standin, "live")
    async with app.run_test(size=LARGE, notifications=True) as pilot:
        box = await show_scene(pilot)
        assert box.state.status.health.verdict == "live"
        await pilot.press("i")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        assert "run exp3 is still training" in app.screen.body.plain
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog))
        assert "run exp3 is still training" in app.screen.detail.plain
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
    assert not vast_standin.calls("PUT") and not vast_standin.calls("DELETE")


# ---------------------------------------------------------------- E: this machine


async def test_this_machine_shows_no_billing_and_only_its_own_projects_weights(
        run_factory, tmp_path, monkeypatch):
    run = run_factory("exp1", done=3, total=3, state="completed")
    elsewhere = write_run(tmp_path / "elsewhere" / "old", done=1, total=1,
                          state="completed")
    (elsewhere / "weights" / "best.pt").write_bytes(b"another project's weights")
    registry = tmp_path / "registry.txt"
    registry.write_text(f"{elsewhere}\n{run}\n")
    monkeypatch.setenv("GPURENT_RUN_REGISTRY", str(registry))
    app = GpurentApp(specs("--local", str(run.parent)))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None
                    and box.state.safety is not None)
        await until(pilot, lambda: box.state.status.health.verdict == "completed")
        box.tick()
        await pilot.pause()
        badge = str(app.query_one(WeightsBadge).render())
        assert "old" not in badge and "not safe" not in badge, badge
        assert "no weights yet" in badge
        text = screen_text(app)
        for word in ("money", "$", "--price", "idle", "counting"):
            assert word not in text, word


def test_local_needs_a_directory_that_exists(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        specs("--local", str(tmp_path / "does" / "not" / "exist"))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert re.search(r"--local .*does/not/exist: no such directory", err), err
    assert len(err.strip().splitlines()[-1]) < 200 and "Traceback" not in err


# ---------------------------------------------------------------- F: first contact


@pytest.mark.slow
async def test_a_cancelled_host_key_is_final_until_r_and_first_contact_is_no_outage(
        sshd, tmp_path):
    project = tmp_path / "box-runs"
    write_run(project / "exp1", done=2, total=2, state="completed")
    known = tmp_path / "known_hosts"  # empty: the host key is unknown
    known.touch()
    app = GpurentApp([ssh_spec(sshd, str(project), str(known))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        badge = app.query_one(ConnectionBadge)
        await until(pilot, lambda: shown(app, ConfirmDialog), timeout=60)
        assert "SHA256:" in app.screen.body.plain
        await pilot.press("escape")  # Cancel
        # Connecting stops there: the question is not asked again.
        await until(pilot, lambda: shown(app, ConfirmDialog) or badge.state == "error",
                    timeout=60)
        assert not isinstance(app.screen, Dialog)
        assert box.watching.watcher is None and not box.state.retrying
        await until_shown(pilot, "host key was not trusted", "r asks again")
        assert known.read_text() == ""
        # r asks again; trusting it connects, and the first contact is no outage.
        await pilot.press("r")
        await until(pilot, lambda: shown(app, ConfirmDialog), timeout=60)
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: box.state.status is not None
                    and box.state.transport is not None, timeout=180)
        await until(pilot, lambda: badge.state in ("live", "polling"), timeout=60)
        lines = history(app)
        assert not any(line.startswith(("link lost", "link back")) for line in lines), lines
        assert "last data" not in screen_text(app)
        assert box.state.last_line is None or "link back" not in box.state.last_line[0]


async def test_a_known_hosts_that_is_no_file_stops_the_tries_and_says_so(sshd, tmp_path):
    """A ``known_hosts`` that is a directory is a setting to fix here, not an outage:
    one try, the one-line reason on screen, no retry loop (it used to retry forever)."""
    known = tmp_path / "known_hosts"
    known.mkdir()
    app = GpurentApp([ssh_spec(sshd, str(tmp_path / "box-runs"), str(known))])
    async with app.run_test(size=LARGE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        badge = app.query_one(ConnectionBadge)
        await until(pilot, lambda: badge.state == "error", timeout=60)
        assert not box.state.retrying
        await until_shown(pilot, "is a directory", "move it aside")
        assert "try 2" not in str(badge.content)
