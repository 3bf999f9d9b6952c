"""The TUI's connect path and data plumbing on real runs (``Watcher`` and real followers
over ``LocalTransport``): the box chooses the run and its status comes first, the runs
list fills after; a log longer than the watch's tail shows its end, scrolling to the top
brings the lines before it, and a search counts and lists the matches in the whole log,
or says why it cannot."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from remote.watch import LOG_TAIL_BYTES
from tests.fixtures.pilot import SIZE, quiet_env, shown, until  # noqa: F401 (autouse fixture)
from tests.fixtures.screen import until_shown
from tests.fixtures.tui_runs import write_run
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.screens.matches import MatchesScreen
from tui.spec import BoxSpec
from tui.widgets.logpane import LogPane
from tui.widgets.runs import RunsList

pytestmark = pytest.mark.anyio


def step(line: str) -> int:
    """The step number a log line of this test holds."""
    found = re.search(r"step (\d+)", line)
    assert found, line
    return int(found.group(1))


@pytest.fixture
def trainer_pid():
    """A live process standing in for a training run's pid."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    yield proc.pid
    proc.kill()
    proc.wait(10)


async def test_the_box_chooses_the_going_run_and_the_list_fills(tmp_path, trainer_pid) -> None:
    project = tmp_path / "runs"
    for n in range(1, 7):
        write_run(project / f"exp{n}", done=2, total=2, state="completed")
    write_run(project / "going", done=1, total=9, state="running", pid=trainer_pid,
              epoch_seconds=3600)
    app = GpurentApp([BoxSpec("local", "local", project=str(project))])
    async with app.run_test(size=SIZE) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None)
        assert box.state.run_dir == str(project / "going")
        runs = box.query_one(RunsList)
        await until(pilot, lambda: len(runs.runs) == 7)
        assert runs.current == str(project / "going")


async def test_a_long_log_shows_its_tail_then_older_lines_and_whole_log_matches(
        tmp_path) -> None:
    lines = [f"step {n:06d} {'needle' if n % 500 == 0 else 'hay'} " + "x" * 60
             for n in range(40_000)]  # ~3.8 MB: far more than the watch's tail
    run = write_run(tmp_path / "runs" / "long", done=1, total=1, state="completed",
                    log_lines=lines)
    assert (run / "train.log").stat().st_size > 4 * LOG_TAIL_BYTES
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent), run="long")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        pane = box.query_one(LogPane)
        await until(pilot, lambda: pane.log_view.lines and "step 039999" in pane.log_view.lines[-1])
        assert "step 000000" not in pane.log_view.lines[0] and pane.more_above
        await until(pilot, lambda: box.state.transport is not None)
        first = pane.log_view.lines[0]
        pane.toggle_follow()
        pane.post_message(LogPane.WantsOlder())
        await until(pilot, lambda: pane.log_view.lines[0] != first)
        assert step(pane.log_view.lines[0]) < step(first)
        steps = [step(line) for line in pane.log_view.lines]
        assert steps == list(range(steps[0], 40_000))  # joined exactly, nothing dropped
        pane.post_message(LogPane.WantsOlder())
        await until(pilot, lambda: step(pane.log_view.lines[0]) < steps[0])
        steps = [step(line) for line in pane.log_view.lines]
        assert steps == list(range(steps[0], 40_000)) and len(steps) > 5000
        pane.set_search("needle")
        await until_shown(pilot, "whole log 80 (L)")
        # L lists them with their line numbers, newest shown first; the oldest are far
        # above what the pane holds.
        await pilot.press("L")
        text = await until_shown(pilot, "80 lines of the whole log hold 'needle'")
        assert re.search(r"39,501 [^\n]*step 039500 needle", text)
        app.screen.query_one("VerticalScroll").scroll_home(animate=False)
        text = await until_shown(pilot, "step 000000 needle")
        assert re.search(r"\s1 [^\n]*step 000000 needle", text)
        await pilot.press("escape")
        await until(pilot, lambda: not shown(app, MatchesScreen))
        # A search the box cannot run says so, in the pane and as a failure line.
        (run / "train.log").unlink()
        pane.set_search("hay")
        await until_shown(pilot, "whole log not searched",
                          "searching the log failed:", "cannot read")
        await pilot.press("L")
        await until_shown(pilot, "cannot search the whole log:")


async def test_the_history_the_pane_holds_is_bounded_and_says_so(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr("tui.widgets.logpane.HISTORY_LINES", 6000)
    lines = [f"step {n:06d} " + "x" * 60 for n in range(40_000)]
    run = write_run(tmp_path / "runs" / "long", done=1, total=1, state="completed",
                    log_lines=lines)
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent), run="long")])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        pane = box.query_one(LogPane)
        await until(pilot, lambda: pane.log_view.lines and "step 039999" in pane.log_view.lines[-1])
        await until(pilot, lambda: box.state.transport is not None)
        pane.log_view.focus()
        await pilot.press("g")  # to the top: the lines before come from the box
        await until(pilot, lambda: len(pane.log_view.lines) == 6000)
        steps = [step(line) for line in pane.log_view.lines]
        assert steps == list(range(34_000, 40_000))
        pane.log_view.scroll_home(animate=False, immediate=True)
        await until_shown(pilot, "the pane holds 6,000 lines", "/ searches the whole log")
        assert len(pane.log_view.lines) == 6000
