"""Hostile text from the box (markup, OSC/CSI escapes, invalid UTF-8) is shown inert:
it never crashes the app, never acts as markup and never reaches the terminal raw."""

from __future__ import annotations

import pytest

from remote.runs.read import list_runs
from remote.transport.local import LocalTransport
from remote.watch.events import GpuEvent, GpuSample, LogEvent
from tests.fixtures.tui_runs import FROZEN_NOW, frozen_status, log_event, metrics_event
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.spec import BoxSpec
from tui.widgets.gpu import GpuPane
from tui.widgets.logfeed import LogFeed
from tui.widgets.runs import RunsList
from tui.widgets.textline import TextLine

pytestmark = pytest.mark.anyio

HOSTILE = [
    b"plain [/] closing tag",
    b"[@click=app.quit]x[/] click me",
    b"title \x1b]0;pwned title\x07 set",
    b"clear \x1b[2J screen \x1b[31mred\x1b[0m",
    b"bad utf8 \xff\xfe\xc3( end",
    b"[bold red]markup[/bold red] and [link=file:///etc/passwd]link[/link]",
]


def test_log_feed_cleans_and_keeps_partial_lines():
    feed = LogFeed(max_lines=100)
    feed.feed(LogEvent(b"one\ntw", 0))
    feed.feed(LogEvent(b"o\n\x1b[2Jthree\xff\n", 7))
    reset, lines, sizes, start = feed.drain()
    assert not reset
    assert lines == ["one", "two", "three\ufffd"]
    assert sizes == [4, 4, 11] and start == 0  # the file's bytes, before cleaning
    feed.feed(LogEvent(b"fresh\n", 0, reset=True))
    assert feed.drain() == (True, ["fresh"], [6], 0)


def test_log_feed_is_bounded_when_the_ui_falls_behind():
    feed = LogFeed(max_lines=50)
    for n in range(20):
        feed.feed(LogEvent(b"".join(b"line %d\n" % (n * 10 + i) for i in range(10)), 0))
    _, lines, sizes, start = feed.drain()
    assert len(lines) == 50 and lines[-1] == "line 199"
    assert start == sum(len(b"line %d\n" % n) for n in range(150))


async def test_hostile_text_is_inert_everywhere(run_factory):
    error = {"type": "RuntimeError", "message": "[/] \x1b]0;t\x07 [@click=app.quit]x[/]"}
    run = run_factory("[@click=app.quit]run[bold]", done=3, total=10, state="failed", pid=4242,
                      error=error, log_lines=[h.decode("latin-1") for h in HOSTILE[:1]])
    with open(run / "train.log", "ab") as fh:
        fh.write(b"\n".join(HOSTILE) + b"\n")
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent))],
                     clock=lambda: FROZEN_NOW, autoconnect=False)
    async with app.run_test(size=(150, 44)) as pilot:
        box = app.query_one(BoxView)
        box.state.run_dir, box.state.gen = str(run), 1
        box.state.last_verdict = None
        box.query_one(RunsList).show_runs(list_runs(LocalTransport(), str(run.parent)),
                                          str(run))
        box.header.show_run(run.name)
        box.watching.deliver(1, frozen_status(run, pid_alive=False))
        box.watching.deliver(1, metrics_event(run))
        box.watching.deliver(1, log_event(run))
        box.watching.deliver(1, GpuEvent([GpuSample(0, "[/]\x1b[2J GPU \x1b]0;x\x07")], 0.0))
        await pilot.pause(0.3)
        lines = list(box.log_pane.log_view.lines)
        assert any("[@click=app.quit]x[/] click me" in ln for ln in lines)
        assert any("[/] closing tag" in ln for ln in lines)
        assert all("\x1b" not in ln and "\x07" not in ln for ln in lines)
        assert any("bad utf8 \ufffd\ufffd\ufffd( end" in ln for ln in lines)
        # Search and filter with hostile terms are plain text too.
        box.log_pane.set_search("[/]")
        box.log_pane.set_filter("[@click")
        await pilot.pause(0.2)
        assert list(box.log_pane.log_view.lines) == ["".join(
            ln for ln in lines if "[@click" in ln)]
        screen = app.export_screenshot()
        assert "\x1b" not in screen and "\x07" not in screen
        ident = box.header.query_one("#ident", TextLine).text.plain
        assert "run [@click=app.quit]run[bold]" in ident and "[@click=app.quit]x[/]" in ident
        assert "\x1b" not in ident
        runs = box.query_one(RunsList)
        assert "[@click=app.quit]run[bo…" in runs.get_option_at_index(0).prompt.plain
        assert "[/] GPU" in box.query_one(GpuPane).content.plain
        # Clicking where the hostile "link" is drawn must not quit the app.
        await pilot.click("#log", offset=(2, 0))
        await pilot.pause(0.1)
        assert app.is_running


@pytest.mark.parametrize("raw, one_line, lines", [
    ("plain\ttext\nnext", "plain\ttextnext", "plain\ttext\nnext"),  # fast path
    ("a\x1b]0;t\x07b\nc\x1b[2Jd", "abcd", "ab\ncd"),
    ("x\x9b31my\r\n\x00z", "xyz", "xy\nz"),
    (b"bad \xff utf8\n", "bad \ufffd utf8", "bad \ufffd utf8\n"),
])
def test_clean_text_fast_and_slow_paths_agree(raw, one_line, lines):
    from trainer.text import clean_text

    assert clean_text(raw) == one_line
    assert clean_text(raw, keep_newlines=True) == lines
