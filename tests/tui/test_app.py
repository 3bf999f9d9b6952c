"""Pilot tests: every key and dialog of the app, Cancel included, on real run directories
watched through the real ``Watcher`` and ``LocalTransport``; provider calls go to the
local Vast stand-in."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from textual.widgets import Button, Checkbox, Input

from remote.weights import dest_for
from tests.fixtures.pilot import (  # noqa: F401 (fixtures)
    SIZE,
    connected,
    local_app,
    messages,
    press_button,
    quiet_env,
    shown,
    until,
)
from tests.fixtures.screen import history as app_history
from tests.fixtures.screen import until_shown
from tui.app import GpurentApp
from tui.dialogs.base import Dialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.guard import GuardDialog
from tui.dialogs.launch import LaunchForm
from tui.dialogs.pull import PullDialog
from tui.dialogs.push import PushDialog
from tui.dialogs.quit import QuitDialog
from tui.screens.help import HelpScreen
from tui.spec import BoxSpec
from tui.widgets.badges import WeightsBadge
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import MetricsPane
from tui.widgets.runs import RunsList

pytestmark = pytest.mark.anyio


async def test_connects_and_fills_every_pane(run_factory, sleeper):
    run = run_factory("exp1", done=5, total=20, pid=sleeper.pid)
    run_factory("exp0", done=20, total=20, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        assert box.state.run_dir == str(run)  # the live run is chosen over the finished one
        assert box.state.status.health.verdict in ("live", "slow", "stalled")
        assert len(box.query_one(MetricsPane).rows) == 5
        assert "epoch 5/20" in box.log_pane.log_view.lines[-1]
        names = [r.name for r in box.query_one(RunsList).runs]
        assert sorted(names) == ["exp0", "exp1"]
        # Choosing the other run in the list switches the panes to it.
        runs = box.query_one(RunsList)
        runs.focus()
        runs.highlighted = names.index("exp0")
        await pilot.press("enter")
        await until(pilot, lambda: box.state.run_dir.endswith("exp0")
                    and box.state.status is not None
                    and len(box.query_one(MetricsPane).rows) == 20)
        assert box.state.status.health.verdict == "completed"


async def test_launch_form_cancel_and_invalid_values(run_factory):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm)
                    and app.focused is not None)
        form = app.screen
        assert app.focused.id == "f-data"  # the first required field that is empty
        await until_shown(pilot, "data *", "✖ data is required", "name=exp2")
        assert form.query_one("#launch", Button).disabled  # an empty data never launches
        await until(pilot, lambda: "preflight" in form.query_one("#findings").content.plain,
                    timeout=60)
        form.query_one("#f-name", Input).value = "bad name;rm -rf"
        await until_shown(pilot, "is not allowed")
        assert form.query_one("#launch", Button).disabled
        await pilot.press("ctrl+s")  # refused, and the form says why
        await until_shown(pilot, "cannot launch yet")
        assert isinstance(app.screen, LaunchForm)
        form.query_one("#cancel", Button).focus()
        await pilot.press("enter")  # Enter on Cancel cancels
        await until(pilot, lambda: not isinstance(app.screen, LaunchForm))
        assert sorted(p.name for p in run.parent.iterdir()) == ["exp1"]
        await pilot.press("p")
        await until(pilot, lambda: shown(app, LaunchForm))
        assert "Profile" in app.screen.title_text
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))


async def test_stop_run_cancel_then_confirm(run_factory, sleeper):
    run = run_factory("exp1", done=3, total=30, pid=sleeper.pid)
    app = local_app(run.parent, price=1.5)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("x")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        # This machine bills nothing: no billing words for a local run.
        assert "billing" not in app.screen.body.plain and "$" not in app.screen.body.plain
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert sleeper.poll() is None
        await pilot.press("x")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: any(m.startswith("stop: stopped") for m in messages(app)))
        assert sleeper.wait(timeout=10) == -signal.SIGTERM


async def test_pull_makes_the_weights_safe(run_factory, tmp_path):
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(os.urandom(4096))
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        badge = box.query_one(WeightsBadge)
        await until(pilot, lambda: badge.safe_now is False)
        assert "not safe: exp1/weights/best.pt" in badge.content.plain  # names the file
        await pilot.press("w")  # asks where to, offering ./weights
        await until(pilot, lambda: shown(app, PullDialog))
        pulled = dest_for(tmp_path / "weights", "local", str(run.resolve())) / "weights"
        assert pulled == Path(f"{tmp_path}/weights/local{run.resolve()}/weights")
        await until(pilot, lambda: "finding" not in str(app.screen.query_one("#lands").render()))
        assert str(app.screen.query_one("#lands").render()) == f"lands in {pulled}{os.sep}"
        await pilot.press("enter")
        await until(pilot, lambda: any(m.startswith("pulled best.pt") for m in messages(app)))
        assert (pulled / "best.pt").read_bytes() == (run / "weights" / "best.pt").read_bytes()
        await until(pilot, lambda: badge.safe_now is True)
        assert "weights safe" in badge.content.plain and "laptop" in badge.content.plain


async def test_no_weights_yet_only_without_any_weight_file(run_factory):
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE) as pilot:
        box = await connected(app, pilot)
        badge = box.query_one(WeightsBadge)
        await until(pilot, lambda: badge.safe_now is True)
        assert badge.content.plain == "no weights yet"
        (run / "weights" / "last.pt").write_bytes(b"epoch 1")  # LibreYOLO: no best.pt yet
        box.weights.refresh()
        await until(pilot, lambda: badge.safe_now is False)
        assert "not safe: exp1/weights/last.pt" in badge.content.plain


async def test_push_dialog_cancel_no_token_and_failure_rings(run_factory, monkeypatch):
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"weights")
    app = local_app(run.parent)
    bells = []
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        monkeypatch.setattr(app, "bell", lambda: bells.append(1))
        await connected(app, pilot)
        await pilot.press("u")
        await until(pilot, lambda: shown(app, PushDialog))
        assert app.screen.query_one("#push", Button).disabled  # no token anywhere
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, PushDialog))
        # With a token but an unreachable Hub the push fails: notified with the bell.
        monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 30)
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
        await pilot.press("u")
        await until(pilot, lambda: shown(app, PushDialog))
        app.screen.query_one("#repo", Input).value = "someone/shapes"
        await press_button(pilot, "#push")
        await until(pilot, lambda: any("failed" in m for m in messages(app)), timeout=60)
        assert bells


async def test_instance_keys_need_a_provider(run_factory):
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        for key in ("i", "D"):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert not isinstance(app.screen, Dialog)
        assert sum("no provider instance" in m for m in messages(app)) == 2


async def test_stop_instance_shows_costs_then_stops(run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: box.state.instance is not None)
        assert "$0.45/h" in box.money_text().plain
        await pilot.press("i")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        body = app.screen.body.plain
        assert "Stopped it costs $0.0694/h" in body and "14.4 h" in body
        assert "GPUs" in body
        await pilot.press("enter")  # Cancel has the focus
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
        assert not any(s.method in ("PUT", "POST") for s in vast_standin.requests)
        await pilot.press("i")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await press_button(pilot, "#confirm")
        # The stand-in takes a few polls to report the instance stopped.
        await until(pilot, lambda: any("stopped" in m for m in messages(app)), timeout=60)
        assert any(s.method == "PUT" and iid in s.path for s in vast_standin.requests)


async def test_destroy_needs_the_id_and_safe_weights(run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=1, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"unsaved")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog)
                    and app.focused is not None)
        dialog = app.screen
        assert not dialog.weights_safe and app.focused.id == "typed"  # the id comes first
        assert dialog.unsafe == "exp1/weights/best.pt"  # names what would be lost
        destroy = dialog.query_one("#destroy", Button)
        dialog.query_one("#typed", Input).value = iid
        await pilot.pause(0.1)
        assert destroy.disabled  # the id alone is not enough while weights are unsafe
        dialog.query_one("#override", Checkbox).value = True
        dialog.query_one("#typed", Input).value = iid + "x"
        await pilot.pause(0.1)
        assert destroy.disabled  # wrong id
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
        assert not any(s.method == "DELETE" for s in vast_standin.requests)
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog))
        app.screen.query_one("#override", Checkbox).value = True
        app.screen.query_one("#typed", Input).value = iid
        await pilot.pause(0.1)
        await press_button(pilot, "#destroy")
        await until(pilot, lambda: any("destroyed" in m for m in messages(app)))
        assert any(s.method == "DELETE" and iid in s.path for s in vast_standin.requests)


async def test_guard_dialog_cancel_and_bad_limit(run_factory, monkeypatch):
    # This machine as a rented box (its environment names the instance).
    monkeypatch.setattr("tui.box.guard.this_machine", lambda: ("vast", "4242"))
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("g")  # the log's "top": no longer the guard
        await pilot.pause(0.2)
        assert not isinstance(app.screen, GuardDialog)
        await pilot.press("a")
        await until(pilot, lambda: shown(app, GuardDialog))
        app.screen.query_one("#max-hours", Input).value = "soon"
        await press_button(pilot, "#arm")
        await pilot.pause(0.1)
        assert isinstance(app.screen, GuardDialog)  # refused, still open
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, Dialog))
        assert not (run / "guard.json").exists()


async def test_log_keys_follow_search_filter(run_factory):
    lines = [f"epoch {n} loss {n / 10:.2f}" + (" | WARNING slow" if n % 5 == 0 else "")
             for n in range(1, 41)]
    run = run_factory("exp1", done=3, total=3, state="completed", log_lines=lines)
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(LogPane)
        await until(pilot, lambda: len(pane.log_view.lines) == 40)
        await pilot.press("f")
        assert not pane.follow and not pane.log_view.auto_scroll
        await pilot.press("f")
        assert pane.follow
        await pilot.press("slash")
        await until(pilot, lambda: isinstance(app.focused, Input))
        await pilot.press(*"epoch 1", "enter")
        assert pane.search == "epoch 1"
        hits = pane.matches()
        assert len(hits) == 11  # 1, 10..19
        assert not pane.follow  # jumping to a match stops following
        first = pane.find(forward=True)
        await pilot.press("n")
        await pilot.press("N")
        assert first in hits
        await pilot.press("ampersand")
        await pilot.press(*"warning", "enter")
        await until(pilot, lambda: len(pane.log_view.lines) == 8)
        assert all("WARNING" in ln for ln in pane.log_view.lines)
        await pilot.press("ampersand")
        pane.query_one(Input).value = ""
        await pilot.press("enter")
        await until(pilot, lambda: len(pane.log_view.lines) == 40)


async def test_help_reconnect_and_quit(run_factory, sleeper):
    run = run_factory("exp1", done=2, total=9, pid=sleeper.pid)
    app = local_app(run.parent, price=2.0)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: shown(app, HelpScreen))
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, HelpScreen))
        watcher = box.watching.watcher
        await pilot.press("r")
        # The events history: its toast may have expired on a loaded machine.
        await until(pilot, lambda: "reconnecting…" in app_history(app))
        await pilot.pause(0.5)
        assert box.watching.watcher is watcher and watcher.running
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        await until_shown(pilot, "keeps training on this machine")
        body = app.screen.body.plain
        assert "billing" not in body and "$" not in body  # this machine bills nothing
        await pilot.press("escape")
        await pilot.pause(0.1)
        assert app.is_running
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        await press_button(pilot, "#quit")
        await pilot.pause(0.2)
    assert "run exp1 keeps training on this machine" in app.farewell
    assert f"reattach: gpurent-tui --local {run.parent} --run exp1" in app.farewell
    assert sleeper.poll() is None  # quitting never touches the run


async def test_host_key_question_from_a_worker_thread(run_factory):
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        answers: list[bool] = []
        for press in ("escape", "confirm"):
            thread = threading.Thread(target=lambda: answers.append(
                box.link.ask_host_key("203.0.113.7", "ssh-ed25519", "SHA256:abc[/]def")))
            thread.start()
            await until(pilot, lambda: shown(app, ConfirmDialog)
                        and app.focused is not None)
            assert "SHA256:abc[/]def" in app.screen.body.plain
            assert app.focused.id == "cancel"
            if press == "escape":
                await pilot.press("escape")
            else:
                await press_button(pilot, "#confirm")
            await until(pilot, lambda t=thread: not t.is_alive())
            if press == "escape":  # Cancel is final: not asked again until r
                assert not box.link.ask_host_key("203.0.113.7", "ssh-ed25519",
                                                 "SHA256:abc[/]def")
                box.link.forget_declined()
        assert answers == [False, True]
        # A key accepted in this session is not asked about again (reconnects).
        assert box.link.ask_host_key("203.0.113.7", "ssh-ed25519", "SHA256:abc[/]def")


async def test_run_death_rings_the_bell(run_factory, monkeypatch):
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)
    run = run_factory("exp1", done=2, total=9, pid=proc.pid)
    app = local_app(run.parent)
    bells: list[int] = []
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        monkeypatch.setattr(app, "bell", lambda: bells.append(1))
        box = await connected(app, pilot)
        assert box.state.status.health.verdict != "dead"
        os.killpg(proc.pid, signal.SIGKILL)  # like the OOM killer: status stays running
        proc.wait(timeout=10)
        await until(pilot, lambda: box.state.status.health.verdict == "dead", timeout=30)
        await until_shown(pilot, "run exp1 dead", "pid")
        assert any(m.startswith("run exp1 dead") for m in messages(app))
        assert bells


async def test_several_boxes_as_tabs(run_factory, tmp_path):
    one = run_factory("exp1", done=1, total=3, state="completed")
    other = tmp_path / "other"
    from tests.fixtures.tui_runs import write_run

    write_run(other / "exp9", done=2, total=4, state="completed")
    app = GpurentApp([BoxSpec("local", "local", project=str(one.parent)),
                      BoxSpec("local", "local", project=str(other))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        boxes = app.boxes()
        await until(pilot, lambda: all(b.state.status is not None for b in boxes))
        assert app.box is boxes[0]
        app.query_one("TabbedContent").active = "box-1"
        await until(pilot, lambda: app.box is boxes[1])
        assert app.box.state.run_dir.endswith("exp9")


async def test_unreachable_box_retries_until_escape(tmp_path):
    from tests.fixtures.sshd import free_port

    app = GpurentApp([BoxSpec("ssh", "nobody@127.0.0.1", port=free_port(),
                              project=str(tmp_path))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        # The first connection is tried again on its own (a box still booting): each
        # try is in the events, and the badge counts down to the next. (The first
        # countdown lasts a second: a loaded machine may never draw it, so no test
        # waits for one particular try on screen.)
        def tries() -> list[str]:
            return [line for line in app_history(app) if "cannot connect" in line]

        await until(pilot, lambda: any("(try 3)" in line for line in tries()))
        assert any("(try 2)" in line for line in tries())
        badge = app.query_one("ConnectionBadge")
        await until(pilot, lambda: badge.state == "retrying"
                    and re.search(r"try \d+ in \d+ s", str(badge.content)) is not None)
        await until_shown(pilot, "cannot connect", "Esc: stop")
        await pilot.press("escape")
        await until_shown(pilot, "stopped retrying; r tries again")
        await until(pilot, lambda: badge.state == "error")
        await pilot.press("question_mark")  # still answering keys
        await until(pilot, lambda: shown(app, HelpScreen))


async def test_every_key_is_in_the_command_palette(run_factory):
    from tui.app import KEYS

    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        listed = [cmd.title for cmd in app.get_system_commands(app.screen)]
        commands = {cmd.title: cmd for cmd in app.get_system_commands(app.screen)}
        assert {label.capitalize() for _, action, label, _ in KEYS
                if action != "escape"} <= set(commands)
        assert listed.count("Quit") == 1  # ours, which asks; not Textual's as well
        app.call_next(commands["Help"].callback)  # as the palette runs an entry
        await until(pilot, lambda: shown(app, HelpScreen))
