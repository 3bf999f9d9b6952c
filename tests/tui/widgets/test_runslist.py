"""Pilot tests of the runs list as a user types into it: the keys of a list, a filter by
name or state, and letters that never reach the app's keys."""

from __future__ import annotations

import pytest
from textual.command import CommandPalette
from textual.containers import VerticalScroll

from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import screen_text, until_shown
from tui.screens.help import HelpScreen
from tui.widgets.runs import RunsList

pytestmark = pytest.mark.anyio


async def focus_runs(app, pilot) -> RunsList:
    """Tab to the runs list, as a user would."""
    runs = app.query_one(RunsList)
    for _ in range(6):
        if app.focused is runs:
            return runs
        await pilot.press("tab")
    assert app.focused is runs, f"Tab never reached the runs list (at {app.focused})"
    return runs


def names(runs: RunsList) -> list[str]:
    """The names of the runs the list shows, as drawn."""
    return [opt.prompt.plain.split("\n")[0][2:].strip() for opt in runs.options
            if not opt.disabled]


def three_runs(run_factory, pid: int):
    """A project with two finished runs and a live one; the app on it."""
    run_factory("alpha", done=3, total=3, state="completed")
    run_factory("gamma", done=2, total=3, state="completed")
    live = run_factory("beta", done=1, total=9, pid=pid)
    return local_app(live.parent)


async def listed(app, pilot) -> RunsList:
    box = await connected(app, pilot)
    await until(pilot, lambda: len(box.query_one(RunsList).runs) == 3)
    return await focus_runs(app, pilot)


async def test_focused_runs_list_has_its_border_and_the_keys_of_a_list(run_factory,
                                                                       sleeper):
    app = three_runs(run_factory, sleeper.pid)
    async with app.run_test(size=(150, 46)) as pilot:
        runs = await listed(app, pilot)
        text = screen_text(app)
        assert "╭─ runs" in text and "▔ runs" not in text  # the focused border is whole
        runs.highlighted = 0
        await pilot.press("j")
        await until(pilot, lambda: runs.highlighted == 1)
        await pilot.press("k")
        await until(pilot, lambda: runs.highlighted == 0)
        await pilot.press("G")
        await until(pilot, lambda: runs.highlighted == 2)
        await pilot.press("g")
        await until(pilot, lambda: runs.highlighted == 0)


async def test_letters_typed_into_the_runs_list_fire_no_app_key(run_factory, sleeper):
    app = three_runs(run_factory, sleeper.pid)
    async with app.run_test(size=(150, 46), notifications=True) as pilot:
        await listed(app, pilot)
        events_before = len(app.history)
        for key in ("e", "x", "p", "a", "u", "1", "q", "L"):
            await pilot.press(key)
            await pilot.pause(0.1)
            assert app.screen is app.screen_stack[0], f"{key} opened {app.screen}"
        assert len(app.history) == events_before and sleeper.poll() is None


async def test_slash_filters_the_runs_list_by_state_or_name(run_factory, sleeper):
    app = three_runs(run_factory, sleeper.pid)
    async with app.run_test(size=(150, 46)) as pilot:
        runs = await listed(app, pilot)
        box = app.box
        order = names(runs)
        # / filters by state as it is typed; Enter keeps it; Esc shows all again.
        await pilot.press("slash", *"live")
        await until(pilot, lambda: names(runs) == ["beta"])
        await until_shown(pilot, "runs /live")
        await pilot.press("enter")
        assert runs.filter_text == "live" and not runs.filtering
        await pilot.press("escape")
        await until(pilot, lambda: names(runs) == order)
        await pilot.press("slash", *"GAM", "enter")  # and by name, any case
        await until(pilot, lambda: names(runs) == ["beta", "gamma"])  # beta: watched
        await pilot.press("enter")  # Enter on the run that matches watches it
        await until(pilot, lambda: (box.state.run_dir or "").endswith("gamma"))
        await until(pilot, lambda: names(runs) == ["gamma"])
        await pilot.press("escape", "escape")  # the filter, then back to the log
        await until(pilot, lambda: app.focused is box.log_pane.log_view)
        assert names(runs) == order


async def test_the_filter_keeps_the_watched_run_in_sight(run_factory, sleeper):
    app = three_runs(run_factory, sleeper.pid)
    async with app.run_test(size=(150, 46)) as pilot:
        runs = await listed(app, pilot)
        watched = app.box.state.run_dir
        assert watched.endswith("beta")
        await pilot.press("slash", *"alpha")
        await until(pilot, lambda: names(runs) == ["beta", "alpha"])
        assert runs.options[0].prompt.plain.startswith("▶ beta")  # marked as watched
        assert runs.highlighted == 1  # Enter would watch the run that matches
        await pilot.press("enter", "escape")
        await until(pilot, lambda: len(names(runs)) == 3)
        assert app.box.state.run_dir == watched


async def test_help_lists_the_runs_list_keys(run_factory):
    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(150, 46)) as pilot:
        await connected(app, pilot)
        await focus_runs(app, pilot)
        await pilot.press("question_mark")  # not a letter: help opens from the list too
        await until(pilot, lambda: shown(app, HelpScreen))
        listed = app.screen.section("Runs list")
        assert "Filter by name or state" in listed["/"]
        assert "Next / previous run" in listed["j / k, ↓ / ↑"]
        assert "First / last run" in listed["g / G"]


async def test_the_palette_finds_a_run_by_name_and_watches_it(run_factory):
    for n in range(1, 31):
        run_factory(f"exp{n}", done=3, total=3, state="completed")
    app = local_app(run_factory("exp31", done=1, total=3, state="completed").parent)
    async with app.run_test(size=(150, 46)) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: len(box.query_one(RunsList).runs) == 31)
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"exp27")
        await until_shown(pilot, "run exp27", "watch it")
        await pilot.press("enter")
        await until(pilot, lambda: (box.state.run_dir or "").endswith("/exp27"))
        await until(pilot, lambda: app.focused is box.log_pane.log_view)
        # And a box by its title.
        await pilot.press("ctrl+p")
        await until(pilot, lambda: isinstance(app.screen, CommandPalette))
        await pilot.press(*"box loc")
        await until_shown(pilot, "box local", "show this box's tab")
        await pilot.press("escape")


async def test_help_lists_every_key_by_pane(run_factory):
    from tui.app import KEYS

    run = run_factory("exp1", done=1, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(150, 46)) as pilot:
        await connected(app, pilot)
        await pilot.press("question_mark")
        await until(pilot, lambda: shown(app, HelpScreen))
        help_ = app.screen
        titles = [title for title, _pairs in help_.sections]
        assert titles == ["Anywhere", "The box and its run", "Log pane",
                          "Runs list (Tab to it)", "Charts", "Dialogs and the launch form",
                          "Fleet (F)"]
        listed = {key for key, _desc in help_.keys}
        names = {"question_mark": "?", "slash": "/", "ampersand": "&", "escape": "Esc"}
        for key, _action, _label, _desc in KEYS:
            assert ", ".join(names.get(k, k) for k in key.split(",")) in listed, key
        assert "Tab / shift+Tab" in help_.section("Anywhere")
        assert "ctrl+p" in help_.section("Anywhere")
        assert "← / →" in help_.section("Log pane")
        assert "Esc" in help_.section("Dialogs")
        # It scrolls as a pager does.
        body = help_.query_one(VerticalScroll)
        await until(pilot, lambda: body.max_scroll_y > 0)
        await pilot.press("G")
        await until(pilot, lambda: body.scroll_y == body.max_scroll_y)
        await pilot.press("g")
        await until(pilot, lambda: body.scroll_y == 0)
        await pilot.press("j")
        await until(pilot, lambda: body.scroll_y > 0)
