"""Pilot tests of reading the log on a narrow and a wide terminal: lines wrap below 120
columns (W toggles), search brings its hit into view and marks it, and the arrows scroll
sideways by half a screen."""

from __future__ import annotations

import pytest

from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import screen_text, until_shown
from tui.screens.help import HelpScreen
from tui.widgets.logpane import LogPane
from tui.widgets.logview import MARK_STYLE, compact, row_starts

pytestmark = pytest.mark.anyio


def epoch_line(epoch: int, best: bool = False) -> str:
    """A line as the trainer logs an epoch (``trainer.engine.loop``)."""
    loss = 0.5 + epoch / 1000
    return (f"epoch {epoch}/150: loss {loss:.4f} (box 0.1234, cls 0.2345, dfl 0.3456), "
            f"precision 0.6100, recall 0.5200, mAP50 0.6400, mAP50-95 0.4{epoch:03d}, 41.2s"
            + (", new best" if best else ""))


def marked(log) -> list[str]:
    """The text drawn in the current hit's colours, on the rows shown now."""
    out = []
    for y in range(log.size.height):
        out += [seg.text for seg in log.render_line(y)
                if seg.style is not None and seg.style.bgcolor is not None
                and seg.style.bgcolor.name == MARK_STYLE.rsplit(" ", 1)[-1]]
    return out


def log_rows(app, log) -> str:
    """The rows the log draws on screen now, as text."""
    region = log.region
    rows = screen_text(app).splitlines()[region.y:region.bottom]
    return "\n".join(row[region.x:region.right] for row in rows)


def test_compact_form_and_rows() -> None:
    line = "2026-07-31 09:50:04 | INFO     | epoch 142/150: loss 0.6420"
    assert compact(line) == "09:50:04 epoch 142/150: loss 0.6420"
    assert compact("2026-07-31 09:50:04 | WARNING  | slow") == "09:50:04 WARNING slow"
    assert compact("Traceback (most recent call last):") == \
        "Traceback (most recent call last):"
    assert row_starts("aaa bbb ccc", 7) == [0, 8]  # at the space, never inside a word
    assert row_starts("x" * 10, 4) == [0, 4, 8]  # no space: cut at the width
    assert row_starts("日本語日本", 4) == [0, 2, 4]  # two cells a character


async def test_at_80_columns_a_training_line_shows_its_loss(run_factory):
    lines = [epoch_line(e) for e in range(130, 143)]
    run = run_factory("exp1", done=3, total=150, state="completed", log_lines=lines)
    app = local_app(run.parent)
    async with app.run_test(size=(80, 24)) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(LogPane)
        await until(pilot, lambda: len(pane.log_view.lines) == len(lines))
        # The last line, whole: its loss, its metrics and its time, without the date.
        await until_shown(pilot, "09:50:12 epoch 142/150: loss 0.6420", "mAP50-95 0.4142",
                          "41.2s")
        assert "2026-07-31" not in screen_text(app)
        await pilot.press("W")  # one line a row, as in the file: the end is cut
        await until_shown(pilot, "2026-07-31 09:50:12 | INFO")
        assert "41.2s" not in screen_text(app)
        await pilot.press("W")
        await until_shown(pilot, "09:50:12 epoch 142/150: loss 0.6420", "41.2s")


async def test_search_brings_the_hit_into_view_and_marks_it(run_factory):
    lines = [epoch_line(e, best=e in (3, 7)) for e in range(1, 13)]
    run = run_factory("exp1", done=3, total=150, state="completed", log_lines=lines)
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(LogPane)
        log = pane.log_view
        await until(pilot, lambda: len(pane.log_view.lines) == len(lines))
        assert "new best" not in log_rows(app, log)  # past the pane's right edge
        await pilot.press("slash", *"new best", "enter")
        await until_shown(pilot, "match 2/2")
        await until(pilot, lambda: "new best" in log_rows(app, log))
        assert marked(log) == ["new best"]
        assert log.mark == (6, "new best")
        await pilot.press("n")  # the first hit, marked in its turn
        await until_shown(pilot, "match 1/2")
        assert log.mark == (2, "new best") and marked(log) == ["new best"]
        await pilot.press("escape")  # the search cleared: back to the lines' start
        await until(pilot, lambda: log.scroll_x == 0 and log.mark is None)


async def test_search_on_a_narrow_terminal_scrolls_to_the_wrapped_row(run_factory):
    lines = [epoch_line(e, best=e == 2) for e in range(1, 30)]
    run = run_factory("exp1", done=3, total=150, state="completed", log_lines=lines)
    app = local_app(run.parent)
    async with app.run_test(size=(80, 24)) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(LogPane)
        await until(pilot, lambda: len(pane.log_view.lines) == len(lines))
        assert "new best" not in log_rows(app, pane.log_view)  # the end of the log is shown
        await pilot.press("slash", *"new best", "enter")
        await until_shown(pilot, "match 1/1")
        await until(pilot, lambda: "best" in log_rows(app, pane.log_view))
        assert "".join(marked(pane.log_view)) == "new best"  # wrapped with its line
        await pilot.press("W")  # one line a row: the hit is still in view, sideways
        await until(pilot, lambda: "new best" in log_rows(app, pane.log_view))
        assert marked(pane.log_view) == ["new best"]


async def test_arrows_scroll_sideways_by_half_a_screen_and_help_says_so(run_factory):
    lines = [epoch_line(e) for e in range(1, 6)]
    run = run_factory("exp1", done=3, total=150, state="completed", log_lines=lines)
    app = local_app(run.parent)
    async with app.run_test(size=(120, 40)) as pilot:
        box = await connected(app, pilot)
        pane = box.query_one(LogPane)
        log = pane.log_view
        await until(pilot, lambda: len(pane.log_view.lines) == len(lines) and log.max_scroll_x)
        assert "41.2s" not in screen_text(app)
        half = log.scrollable_content_region.width // 2
        await pilot.press("right")
        await until(pilot, lambda: log.scroll_x == half)
        await until_shown(pilot, "recall 0.5200")
        await pilot.press("right")  # as far as the longest line goes
        await until(pilot, lambda: log.scroll_x == min(2 * half, log.max_scroll_x))
        await until_shown(pilot, "41.2s")
        await pilot.press("left", "left")
        await until(pilot, lambda: log.scroll_x == 0)
        await pilot.press("question_mark")
        await until(pilot, lambda: shown(app, HelpScreen))
        listed = app.screen.section("Log pane")
        assert "Half a screen left / right" in listed["← / →"]
        assert "Wrap long lines" in listed["W"]


async def test_the_log_pane_keeps_textuals_logger() -> None:
    """Textual logs through every widget's ``log`` (a timer that fires with no screen, a
    message posted to a widget not running in debug mode): the pane's ``Log`` widget is
    ``log_view``, and ``log`` stays Textual's logger."""
    from textual.app import App, ComposeResult

    class Bare(App[None]):
        def compose(self) -> ComposeResult:
            yield LogPane()

    async with Bare().run_test() as pilot:
        pane = pilot.app.query_one(LogPane)
        pane.log.warning("a timer fired with no screen")
        pane.log("and a plain line")
        assert pane.log_view.id == "log"
