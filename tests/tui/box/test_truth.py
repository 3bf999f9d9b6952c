"""The TUI tells the truth and never fails silently (issue 18), key by key as a new user
tries it: every failure reaches the screen in one line with the next step and stays in
the events history; the link's state is shown; the launch form can be typed in and
checks as you type; alerts come from any run; the log pane has a pager's keys; long
actions show progress; the words match the state. Each test asserts the text on screen
(``tests.fixtures.screen``), on real run directories watched through the real watcher."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest
from rich.text import Text
from textual.widgets import Button, Input

from remote.watch.events import ConnectionEvent
from tests.fixtures.launched import kill_launched
from tests.fixtures.pilot import (  # noqa: F401 (quiet_env: autouse fixture)
    connected,
    local_app,
    messages,
    press_button,
    quiet_env,
    shown,
    until,
)
from tests.fixtures.screen import flat, screen_text, until_shown
from tests.fixtures.tui_runs import write_run
from tui.app import GpurentApp
from tui.box.activity import SPINNER
from tui.box.view import BoxView
from tui.dialogs.guard import GuardDialog
from tui.dialogs.launch import LaunchForm
from tui.dialogs.pull import PullDialog
from tui.dialogs.quit import QuitDialog
from tui.screens.events import EventsScreen
from tui.spec import BoxSpec
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import metric_columns
from tui.widgets.runs import RunsList
from tui.widgets.textline import TextLine

pytestmark = pytest.mark.anyio
SIZE = (150, 46)

#: A process that takes 2 s to end after SIGTERM (a trainer finishing its step).
SLOW_TO_STOP = ("import signal, sys, time\n"
                "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(2), sys.exit(0)))\n"
                "time.sleep(300)\n")


@pytest.fixture
def procs():
    """Processes standing in for trainers (own sessions); killed at the end."""
    started: list[subprocess.Popen] = []

    def start(code: str = "import time; time.sleep(300)") -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


# ---------------------------------------------------------------- failures on screen


async def test_pull_before_best_pt_and_a_refused_guard_are_on_screen(run_factory,
                                                                    monkeypatch):
    monkeypatch.setattr("tui.box.guard.this_machine", lambda: None)  # not a rented box
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("w")
        await until(pilot, lambda: shown(app, PullDialog))
        await pilot.press("enter")
        await until_shown(pilot, "pull failed:", "no weights/best.pt or weights/last.pt",
                          "after the first validated epoch")
        # The status row keeps the line after the toast is gone.
        row = app.query_one(BoxView).query_one("#status-row").text.plain
        assert row.startswith("pull failed:") and "(e: events)" in row
        # This machine is no provider instance: the guard key says so at once.
        await pilot.press("a")
        await until_shown(pilot, "no guard here", "not a provider instance")
        assert not isinstance(app.screen, GuardDialog)
        # The events history keeps both.
        await pilot.press("e")
        await until(pilot, lambda: isinstance(app.screen, EventsScreen))
        text = await until_shown(pilot, "Events (")
        assert "pull failed:" in flat(text) and "no guard here" in flat(text)
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, EventsScreen))


async def test_actions_on_a_dead_link_say_so_and_panes_dim(run_factory, procs):
    sleeper = procs()
    run = run_factory("exp1", done=2, total=9, pid=sleeper.pid)
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await until_shown(pilot, "⇄ connected")
        # The watcher reports the link gone (what it sends when a box stops answering).
        gen = box.state.gen
        box.watching.deliver(gen, ConnectionEvent("stale", "no data for 5s", silent_for=5))
        box.watching.deliver(gen, ConnectionEvent("reconnecting", "timed out", attempt=1))
        text = await until_shown(pilot, "no link", "last data", "reconnecting (try 1)")
        header = text.splitlines()[0]
        assert "● live" not in header  # the health is as old as the data: not "live"
        assert box.has_class("-offline")
        await pilot.press("w")
        await until_shown(pilot, "no link to the box (last data", "r tries now")
        await pilot.press("x")
        await until_shown(pilot, "no link to the box (last data")
        # The link comes back: panes lit again, the control connection reopened.
        box.watching.deliver(box.state.gen, ConnectionEvent("live", "following"))
        await until(pilot, lambda: not box.has_class("-offline"))
        await until(pilot, lambda: any(e.message == "control connection open again"
                                       for e in app.history))
        text = screen_text(app)
        assert "last data" not in text.splitlines()[0]  # the header
        assert "link back after" in box.query_one("#status-row").text.plain
        assert "⚠ last data" not in text  # the panes' subtitles


async def test_launch_form_refusals_stay_inside_the_form(run_factory, shapes_data):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        launch = form.query_one("#launch", Button)
        # An existing run's name is caught as you type, with the way out.
        form.query_one("#f-data", Input).value = str(shapes_data)
        form.query_one("#f-name", Input).value = "exp1"
        await until_shown(pilot, "exp1 exists (completed 2/5): ctrl+r resumes it")
        assert launch.disabled
        # A Hub repo needs a token here, and the form of ORG/NAME.
        form.query_one("#f-name", Input).value = "fresh"
        form.query_one("#f-hub", Input).value = "not a repo"
        await until_shown(pilot, "is not a repository id of the form ORG/NAME")
        form.query_one("#f-hub", Input).value = "someone/shapes"
        await until_shown(pilot, "no Hugging Face token here: set HF_TOKEN")
        assert launch.disabled
        form.query_one("#f-hub", Input).value = ""
        await until_shown(pilot, "doctor  ok", timeout=120)
        # A run that appears on the box after the form opened: refused by the launch,
        # and the form stays open with the reason inside it.
        write_run(run.parent / "late", done=1, total=3, state="completed")
        form.query_one("#f-name", Input).value = "late"
        await until(pilot, lambda: not launch.disabled)
        await pilot.press("ctrl+s")

        def refused() -> str:
            said = flat(str(form.query_one("#form-status").content))
            # The launch's own refusal, or (on a loaded machine, when the form's look at
            # the box's runs came back before ctrl+s) the as-you-type one: both inside.
            return said if ("holds an earlier run" in said and "pick another name" in said
                            or "late exists (completed 1/3)" in said) else ""

        await until(pilot, refused, timeout=60)
        assert isinstance(app.screen, LaunchForm)
        await pilot.press("escape")


# ---------------------------------------------------------------- the launch form


async def test_launch_form_types_checks_estimates_launches_and_remembers(
        run_factory, shapes_data, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    launched = None
    try:
        async with app.run_test(size=(80, 24), notifications=True) as pilot:
            box = await connected(app, pilot)
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
            form = app.screen
            assert app.focused.id == "f-data"
            # At 24 rows the buttons are on screen; the body scrolls between.
            await until_shown(pilot, "Launch (ctrl+s)", "Cancel")
            await pilot.press(*str(shapes_data))  # typed text is visible as typed
            await until_shown(pilot, str(shapes_data)[-30:])
            # The doctor runs again for the new path; this machine has no GPU: small
            # defaults, and a time estimate from a short probe.
            await until_shown(pilot, "✔ the dataset doctor found no errors", timeout=120)
            assert form.query_one("#f-imgsz", Input).value == "160"
            assert form.query_one("#f-device", Input).value == "cpu"
            await until_shown(pilot, "estimate:", "per epoch", timeout=240)
            form.query_one("#f-epochs", Input).value = "1"
            form.query_one("#f-imgsz", Input).value = "64"
            form.query_one("#f-extra", Input).value = "workers=0"
            form.query_one("#f-name", Input).value = "typed"
            await pilot.press("ctrl+s")
            await until(pilot, lambda: not isinstance(app.screen, LaunchForm), timeout=60)
            await until(pilot, lambda: box.state.run_dir == str(run.parent / "typed"))
            launched = run.parent / "typed"
            await until_shown(pilot, "launched", "typed")
            # The next form starts from what was launched, under a free name; ctrl+r
            # takes the watched run's settings to resume it.
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm))
            form = app.screen
            assert form.query_one("#f-data", Input).value == str(shapes_data)
            assert form.query_one("#f-imgsz", Input).value == "64"
            assert form.query_one("#f-name", Input).value == "exp2"
            await until(pilot, lambda: box.state.status is not None
                        and box.state.status.read.get("args") is not None
                        and (box.state.status.read.get("completed_epochs") or 0) >= 1,
                        timeout=120)
            await pilot.press("ctrl+r")
            await until(pilot, lambda: form.query_one("#f-name", Input).value == "typed")
            assert form.query_one("#f-extra", Input).value == "resume=True"
            assert form.query_one("#f-data", Input).value == str(shapes_data)
            await pilot.press("escape")
    finally:
        if launched:
            kill_launched(launched)


# ---------------------------------------------------------------- layout


@pytest.mark.parametrize("size, gpu_shown", [((80, 24), False), ((160, 48), True),
                                             ((220, 60), True)])
async def test_layout_keeps_help_and_quit_and_collapses_by_width(run_factory, size,
                                                                 gpu_shown):
    run = run_factory("exp1", done=6, total=9, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=size, notifications=True) as pilot:
        box = await connected(app, pilot)
        text = await until_shown(pilot, "? help", "q quit", "loss (train)")
        assert text.splitlines()[-1].lstrip().startswith("? help")
        assert box.query_one("#gpu").display == gpu_shown
        metrics = box.query_one("#metrics")
        assert metrics.size.width >= size[0] // 2  # the charts get the room
        assert metrics.size.height >= 9


# ---------------------------------------------------------------- alerts and tabs


async def test_any_run_alerts_and_the_runs_list_is_live(run_factory, procs, monkeypatch):
    watched, other = procs(), procs()
    run = run_factory("exp1", done=2, total=9, pid=watched.pid)
    run_factory("exp2", done=1, total=9, pid=other.pid)
    # A launch that failed before the trainer wrote status.json is listed too.
    failed = run.parent / "broken"
    failed.mkdir()
    (failed / "launch.pid").write_text("999999\n")
    (failed / "console.log").write_text("ModuleNotFoundError: no module named torch\n")
    os.utime(failed / "launch.pid", (0, 0))  # the oldest
    app = local_app(run.parent, run="exp1")
    bells: list[int] = []
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        monkeypatch.setattr(app, "bell", lambda: bells.append(1))
        box = await connected(app, pilot)
        assert box.state.run_dir == str(run)
        await until_shown(pilot, "broken", "failed to start")
        os.killpg(other.pid, signal.SIGKILL)  # the run nobody watches dies
        other.wait(timeout=10)
        await until_shown(pilot, "run exp2 dead", "⚠ exp2", timeout=60)
        assert bells
        # The watched run's row follows the watcher, not the periodic listing.
        os.killpg(watched.pid, signal.SIGKILL)
        watched.wait(timeout=10)
        await until(pilot, lambda: box.state.status.health.verdict == "dead", timeout=30)
        row = next(r for r in box.query_one(RunsList).runs if r.name == "exp1")
        assert row.health == "dead"


async def test_tabs_show_state_and_switch_by_number(run_factory, tmp_path, procs,
                                                    monkeypatch):
    one = run_factory("exp1", done=1, total=3, state="completed")
    sleeper = procs()
    other = write_run(tmp_path / "other" / "exp9", done=2, total=9, pid=sleeper.pid)
    app = GpurentApp([BoxSpec("local", "local", project=str(one.parent)),
                      BoxSpec("local", "local", project=str(other.parent))])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        monkeypatch.setattr(app, "bell", lambda: None)
        boxes = app.boxes()
        await until(pilot, lambda: all(b.state.status is not None for b in boxes))
        assert app.box is boxes[0]
        os.killpg(sleeper.pid, signal.SIGKILL)  # a run in the tab not shown dies
        sleeper.wait(timeout=10)
        await until_shown(pilot, "run exp9 dead", "⚠1", timeout=60)
        await pilot.press("2")
        await until(pilot, lambda: app.box is boxes[1])
        await until(pilot, lambda: "⚠" not in str(boxes[1].tab_label()))
        await pilot.press("left_square_bracket")
        await until(pilot, lambda: app.box is boxes[0])
        await pilot.press("right_square_bracket")
        await until(pilot, lambda: app.box is boxes[1])


# ---------------------------------------------------------------- log pane


async def test_log_pane_pager_keys_search_cycle_and_follow(run_factory):
    lines = [f"epoch {n} loss {n / 10:.2f}" for n in range(1, 61)]
    run = run_factory("exp1", done=3, total=3, state="completed", log_lines=lines)
    app = local_app(run.parent)
    async with app.run_test(size=(120, 36), notifications=True) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(LogPane)
        log = pane.log_view
        await until(pilot, lambda: len(log.lines) == 60)
        await until_shown(pilot, "following")
        await pilot.press("slash", *"epoch 5", "enter")  # 5, 50..59: 11 matches
        await until_shown(pilot, "/epoch 5 match 11/11")
        await pilot.press("n")
        await until_shown(pilot, "match 1/11")
        await pilot.press("n")
        await until_shown(pilot, "match 2/11")
        await pilot.press("N", "N")
        await until_shown(pilot, "match 11/11")
        await pilot.press("escape")  # clears the search
        await until(pilot, lambda: "/epoch 5" not in screen_text(app))
        await pilot.press("G")
        await until_shown(pilot, "following")
        await pilot.press("k")  # scrolling up pauses, visibly
        await until_shown(pilot, "paused (G: follow)")
        await pilot.press("g")
        await until(pilot, lambda: log.scroll_offset.y == 0)
        await pilot.press("j", "j")
        await until(pilot, lambda: log.scroll_offset.y == 2)
        await pilot.press("ctrl+d")
        await until(pilot, lambda: log.scroll_offset.y > 2)
        await pilot.press("ctrl+u")
        await until(pilot, lambda: log.scroll_offset.y == 2)
        await pilot.press("G")
        await until_shown(pilot, "following")
        # A resize keeps following: new lines still land in view.
        await pilot.resize_terminal(100, 30)
        with open(run / "train.log", "a") as fh:
            fh.write("2026-07-31 10:00:00 | INFO     | the newest line\n")
        await until_shown(pilot, "the newest line", "following")
        await until(pilot, lambda: log.is_vertical_scroll_end)
        # The filter: & then Esc shows every line again.
        await pilot.press("ampersand", *"loss 1.", "enter")  # loss 1.00 to 1.90
        await until(pilot, lambda: len(log.lines) == 10)
        await pilot.press("escape")
        await until(pilot, lambda: len(log.lines) == 61)


# ---------------------------------------------------------------- progress


async def test_long_actions_show_a_spinner_and_time(run_factory, procs):
    trainer = procs(SLOW_TO_STOP)
    run = run_factory("exp1", done=2, total=9, pid=trainer.pid)
    (run / "weights" / "best.pt").write_bytes(os.urandom(1 << 20))
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        # Every line the status row is given while shown: an action's spinner lasts as
        # long as the action (seconds), which a look at the screen can miss on a loaded
        # machine; what it showed is kept here.
        row = box.query_one("#status-row", TextLine)
        rows: list[str] = []
        update = row.update

        def recorded(text: Text) -> None:
            update(text)
            if row.display:
                rows.append(text.plain)

        row.update = recorded  # type: ignore[method-assign]
        await pilot.press("x")
        await until(pilot, lambda: shown(app, type(app.screen)) and
                    bool(app.screen.query("#confirm")))
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: any(m.startswith("stop: stopped") for m in messages(app)),
                    timeout=90)
        stopping = [line for line in rows if "stopping the run" in line]
        assert stopping, rows
        for line in stopping:  # a spinner frame, the action, its elapsed time
            assert line[0] in SPINNER and line.rstrip()[-1] == "s", line
        await until(pilot, lambda: "stopping the run" not in row.text.plain)  # it ended
        await pilot.press("w")
        await until(pilot, lambda: shown(app, PullDialog))
        await pilot.press("enter")
        await until(pilot, lambda: any(
            m.startswith("pulled best.pt (1.0 MB)") and "MB/s" in m and "sha256 verified" in m
            for m in messages(app)), timeout=90)
        assert any(line[0] in SPINNER and "pulling" in line for line in rows), rows


async def test_stopping_an_ended_run_is_refused_without_a_question(run_factory):
    run = run_factory("exp1", done=3, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: box.state.status is not None)
        await pilot.press("x")
        await until_shown(pilot, "nothing to stop: run exp1 completed")
        assert not shown(app, QuitDialog) and not app.screen.query("#confirm")


def test_transfer_progress_reads_percent_and_rate():
    from tui.box.activity import Activities

    acts = Activities()
    acts.start("pull", "pulling best.pt", now=100.0)
    acts.progress("pull", 10_000_000, 40_000_000, now=101.0)
    acts.progress("pull", 20_000_000, 40_000_000, now=103.0)
    line = acts.line(now=104.0, frame=0).plain
    assert line == "⠋ pulling best.pt 50% 20.0/40.0 MB 5.0 MB/s 4s"
    assert acts.finish("pull") is not None and not acts


# ---------------------------------------------------------------- words


async def test_words_match_a_local_run_and_ctrl_c_asks(run_factory):
    run = run_factory("exp1", done=3, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        text = await until_shown(pilot, "⇄ connected", "no weights yet")
        badges = text.splitlines()[3]
        assert "● live" not in badges and "safe" not in badges  # no "safe" at epoch 0
        await pilot.press("ctrl+c")
        await until(pilot, lambda: shown(app, QuitDialog))
        text = await until_shown(pilot, "local: run exp1 completed on this machine.")
        assert "[b]" not in text and "billing" not in text and "keeps going" not in text
        await press_button(pilot, "#quit")
    assert "billing" not in app.farewell and "keeps going" not in app.farewell
    assert f"reattach: gpurent-tui --local {run.parent} --run exp1" in app.farewell


async def test_words_match_a_billing_box(tmp_path, monkeypatch):
    from tests.fixtures.tui_scenes import scene_app, show_scene

    monkeypatch.setenv("VAST_API_KEY", "a-key")  # stopping the instance can work
    app = scene_app(tmp_path, "live")
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        box = await show_scene(pilot)
        box.state.guard = None
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        await until_shown(pilot, "run exp3 keeps training", "keeps billing $3.00/h",
                          "arm the guard?", "Arm the guard", "Detach and quit")
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, QuitDialog))
        # The same box once the run completed: idle money, and the way to stop it.
        box.watching.deliver(box.state.gen, _completed(app))
        await until(pilot, lambda: box.state.status.health.verdict == "completed")
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        await until_shown(pilot, "run exp3 completed", "idle at $3.00/h — stop it?",
                          "Stop the instance")
        await press_button(pilot, "#quit")
    assert "Detached from root@203.0.113.7:41022: run exp3 completed; the box is idle " \
           "and bills $3.00/h until you stop it." in app.farewell
    assert ("reattach: gpurent-tui root@203.0.113.7 -p 41022 --project /workspace/runs "
            "--provider vast --instance 4100001 --price 3 --run exp3") in app.farewell


def _completed(app):
    from tests.fixtures.tui_runs import frozen_status

    runs, _ = app.scene
    path = runs["live"]
    from trainer import runfiles

    status = runfiles.read_status(path).fields
    status["state"] = "completed"
    runfiles.atomic_write_json(path / runfiles.STATUS_FILE, status)
    return frozen_status(path, pid_alive=False)


# ---------------------------------------------------------------- charts


async def test_charts_have_axes_and_m_cycles_the_metric(tmp_path):
    from tests.fixtures.tui_scenes import scene_app, show_scene

    app = scene_app(tmp_path, "live")
    async with app.run_test(size=(160, 48)) as pilot:
        await show_scene(pilot)
        pane = app.query_one("#metrics")
        rows = pane.rows
        losses = [r["train/loss"] for r in rows]
        text = await until_shown(pilot, "loss (train)", "mAP50-95 (m: next)")
        # Axes: the first and last epoch, the minimum and maximum of each series.
        assert " 1 " in text and " 12 " in text
        assert f"{min(losses):.4g}" in text and f"{max(losses):.4g}" in text
        # The main metric first, then the other metric columns, then the loss parts.
        columns = metric_columns(rows)
        assert columns[0] == "metrics/mAP50-95" and columns[-1].startswith("train/")
        await pilot.press("m")
        await until_shown(pilot, f"{columns[1].removeprefix('metrics/')} (m: next)")
        assert messages(app) == []


async def test_quitting_the_demo_can_stop_its_trainer(run_factory, procs):
    from remote.transport.local import LocalTransport
    from tests.fixtures.tui_runs import frozen_status

    trainer = procs(SLOW_TO_STOP)
    run = run_factory("demo-1", done=2, total=15, pid=trainer.pid)
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent), demo=True)],
                     autoconnect=False)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        box.state.transport = LocalTransport()
        box.state.run_dir, box.state.gen = str(run), 1
        box.watching.deliver(1, frozen_status(run, pid_alive=True, updated_ago=1.0))
        await until(pilot, lambda: box.state.status is not None)
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        await until_shown(pilot, "run demo-1 keeps training on this machine",
                          "the demo trainer", "Stop the demo and quit")
        assert "bill" not in app.screen.body.plain and "$" not in app.screen.body.plain
        await press_button(pilot, "#stop-demo")
        await until(pilot, lambda: not app.is_running, timeout=60)
    assert trainer.wait(timeout=30) == 0  # it finished its step and exited
    assert "reattach: gpurent-tui --local" in app.farewell
