"""Pilot tests of what the main screen says about keys and itself: a footer with the keys
that act in the current state (all at 160 columns, the most important at 80), r saying
that it reconnects, and header rows that are never cut inside a word."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.pilot import connected, local_app, quiet_env, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import screen_text
from tests.fixtures.tui_scenes import scene_app, show_scene
from tui.widgets.textline import TextLine

pytestmark = pytest.mark.anyio


def footer(app) -> str:
    """The bottom row of the screen."""
    return screen_text(app).splitlines()[-1]


async def test_footer_shows_the_keys_of_the_state(run_factory, sleeper, vast_standin,
                                                 monkeypatch):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=3, total=30, pid=sleeper.pid)
    (run / "weights" / "best.pt").write_bytes(b"unsaved")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: box.state.safety is not None)
        # A training run on a provider's instance: every key that acts, at 160 columns.
        for words in ("? help", "q quit", "x stop run", "w pull", "u push", "i stop inst",
                      "D destroy", "l launch", "e events", "/ search", "W wrap"):
            await until(pilot, lambda w=words: w in footer(app))
        assert "n next" not in footer(app)  # no search yet
        await pilot.press("slash", *"loss", "enter")
        await until(pilot, lambda: "n next" in footer(app) and "Esc clear" in footer(app))
        # 80 columns: the most important keys, each whole.
        await pilot.resize_terminal(80, 24)
        # (the footer is laid out again in steps: what it settles on is what counts)
        await until(pilot, lambda: len(footer(app).rstrip()) <= 80 and "D destroy"
                    not in footer(app) and all(words in footer(app) for words in (
                        "? help", "q quit", "x stop run", "n next", "Esc clear")))
        # The runs list focused: its own keys; the app's letters do nothing there.
        await pilot.press("tab")
        await until(pilot, lambda: "j/k move" in footer(app) and "/ filter" in footer(app))
        assert "q quit" not in footer(app)


async def test_footer_leaves_out_what_cannot_act(run_factory):
    run = run_factory("exp1", done=3, total=3, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        await until(pilot, lambda: "l launch" in footer(app))
        bottom = footer(app)
        for words in ("x stop run", "i stop inst", "D destroy", "R resume", "a guard"):
            assert words not in bottom, bottom  # nothing trains; no instance; local


async def test_r_says_in_the_status_row_and_the_events_that_it_reconnected(run_factory,
                                                                          sleeper):
    run = run_factory("exp1", done=2, total=9, pid=sleeper.pid)
    app = local_app(run.parent)
    async with app.run_test(size=(150, 46), notifications=True) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: box.state.transport is not None)
        await pilot.press("r")
        row = box.query_one("#status-row", TextLine)
        await until(pilot, lambda: "reconnected" in row.text.plain)
        assert any(e.message.startswith("reconnected") for e in app.history)


async def test_header_rows_are_never_cut_inside_a_word_at_80x24(tmp_path: Path):
    app = scene_app(tmp_path, "done")
    async with app.run_test(size=(80, 24)) as pilot:
        box = await show_scene(pilot)
        box.panes.weights_badge.show(False, None, None, "", unsafe=(
            "exp2/weights/best.pt, exp2/weights/last.pt, exp2/weights/epoch_30.pt"))
        await pilot.pause(0.2)
        rows = screen_text(app).splitlines()
        lines = [*box.header.query(TextLine), box.query_one("#guard-badge")]
        for line in lines:
            region = line.content_region
            shown = rows[region.y][region.x:region.right].rstrip()
            full = (line.text if isinstance(line, TextLine) else line.content).plain.rstrip()
            assert full.startswith(shown), (shown, full)
            assert len(shown) == len(full) or full[len(shown)] == " ", (shown, full)
            assert not shown.endswith((":", " and", " an", ",")), shown
        assert "guard: off" in rows[region.y]
