"""Every widget that shows a box value, walked with a hostile value in every field of
status, metrics, log, GPU, connection, preflight, doctor, profile, guard and the Hub
answer (and wrongly typed fields where the file is not validated as a whole). What the
app would write to the terminal is rendered and searched: none of the box's escape
sequences, controls, bidi or zero-width characters get there, markup stays text, and
nothing crashes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from remote.runs.guard import GuardState
from remote.runs.read import list_runs
from remote.transport.local import LocalTransport
from remote.watch.events import ConnectionEvent, GpuEvent, GpuSample, LogEvent, MetricsEvent
from remote.weights.safety import weights_safety
from tests.fixtures.tui_hostile_fields_kit import HOSTILE, hostile_run
from tests.fixtures.tui_runs import FROZEN_NOW, frozen_status
from trainer import runfiles
from tui.app import GpurentApp
from tui.box.reports import findings_text
from tui.box.view import BoxView
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.launch import FormHooks, LaunchForm
from tui.dialogs.profile import ProfileCard
from tui.spec import BoxSpec
from tui.widgets.runs import RunsList

pytestmark = pytest.mark.anyio

#: What Textual itself writes: colours and cursor moves. Anything else is the box's.
_OWN = re.compile(r"\x1b\[[0-9;:]*[mH]")
_FORBIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def terminal_output(app: GpurentApp) -> str:
    """What the app would write to the terminal for a full repaint of its screen."""
    update = app.screen._compositor.render_full_update()
    return update.render_segments(app.console)


def assert_inert(app: GpurentApp, *, expect: tuple[str, ...] = ()) -> str:
    raw = terminal_output(app)
    text = _OWN.sub("", raw)
    assert "\x1b" not in text, repr(text[max(0, text.find("\x1b") - 40):][:120])
    bad = _FORBIDDEN.search(text.replace("\n", ""))
    assert bad is None, repr(text[max(0, bad.start() - 40):][:120])
    assert "PWNED" not in text and "cHduZWQ=" not in text
    flat = re.sub(r"\s+", "", text)
    for needle in expect:
        assert re.sub(r"\s+", "", needle) in flat, needle
    assert app.is_running
    return text


PREFLIGHT = {"ok": False, "failed": [HOSTILE, 7, {}], "checks": [
    {"status": HOSTILE, "name": HOSTILE, "message": HOSTILE},
    {"status": ["fail"], "name": {"x": 1}, "message": None}, 5, "text"]}
DOCTOR = {"ok": "no", "findings": {"not": "a list"}}
DOCTOR_LIST = {"findings": [{"severity": HOSTILE, "kind": HOSTILE, "message": HOSTILE,
                             "examples": [HOSTILE]}, [HOSTILE]]}
PROFILE = {"verdict": HOSTILE, "why": HOSTILE, "config": [HOSTILE],
           "timing": {"step_seconds": HOSTILE, "data_wait_fraction": [1],
                      "images_per_second": True},
           "gpu_busy_fraction": HOSTILE,
           "verdicts": [HOSTILE, {"name": HOSTILE, "why": {"a": 1}, "faster_gpu": HOSTILE,
                                  "levers": [HOSTILE, 3]}, {"levers": HOSTILE}],
           "cannot_tell": [{"name": HOSTILE, "reason": HOSTILE}, HOSTILE],
           "cost": {"epoch_seconds": 12.0, "epoch_images": HOSTILE, "cost_per_epoch": HOSTILE}}
GUARD = {"state": "armed", "armed": "yes", "when": HOSTILE, "then": HOSTILE,
         "max_hours": HOSTILE, "pid": "12", "pgid": [1], "provider": HOSTILE,
         "instance": HOSTILE, "last_decision": HOSTILE, "outcome": HOSTILE}


async def test_every_box_field_reaches_the_terminal_inert(tmp_path: Path) -> None:
    run = hostile_run(tmp_path / "project")
    other = runfiles.RunWriter(tmp_path / "project" / HOSTILE.replace("/", "_"))
    other.write_status({"state": HOSTILE, "total_epochs": 3, "completed_epochs": 1})
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent))],
                     clock=lambda: FROZEN_NOW, autoconnect=False)
    async with app.run_test(size=(160, 50)) as pilot:
        box = app.query_one(BoxView)
        box.state.run_dir, box.state.gen = str(run), 1
        box.state.last_verdict = None
        box.header.show_run(HOSTILE)
        box.query_one(RunsList).show_runs(list_runs(LocalTransport(), str(run.parent)),
                                          str(run))
        box.watching.deliver(1, frozen_status(run, pid_alive=True))
        box.watching.deliver(1, MetricsEvent(runfiles.read_metrics(run).rows, 100))
        box.watching.deliver(1, LogEvent((run / runfiles.LOG_FILE).read_bytes(), 0))
        box.watching.deliver(1, GpuEvent([GpuSample(0, HOSTILE, 50.0, 1.0, 2.0, 3.0, 4.0)],
                                       FROZEN_NOW))
        box.watching.deliver(1, ConnectionEvent(HOSTILE, HOSTILE))
        box.weights.show(weights_safety(LocalTransport(), str(run)))
        box.guard.show(GuardState.from_dict(GUARD, alive=True))
        await pilot.pause(0.3)
        # A ledger entry the Hub cannot confirm (its repo and commit are hostile) is unsafe.
        main = assert_inert(app, expect=("[@click=app.quit]q[/]", "not safe"))
        assert "guard armed: when [@click=app.quit]q[/]" in main

        for report in (PREFLIGHT, DOCTOR, DOCTOR_LIST):
            form = LaunchForm({"name": "exp9"}, "trainer",
                              FormHooks(preview=lambda _r: "cmd", submit=lambda _r: None))
            await app.push_screen(form)
            await pilot.pause(0.1)
            form.show_findings(findings_text("preflight", report))
            await pilot.pause(0.1)
            assert_inert(app, expect=("problems found",))
            app.pop_screen()

        await app.push_screen(ProfileCard(PROFILE))
        await pilot.pause(0.2)
        card = assert_inert(app, expect=("(unreadable)", "[@click=app.quit]q[/]"))
        assert "GPU busy: not measured" in card
        app.pop_screen()

        box.state.transport = LocalTransport()
        box.guard.ask()  # armed and alive: asks to disarm, showing guard.json's summary
        await pilot.pause(0.2)
        assert isinstance(app.screen, ConfirmDialog)
        assert_inert(app, expect=("Disarm",))
        app.pop_screen()
        await pilot.pause(0.1)
        assert_inert(app)


def test_guard_state_reads_each_wrongly_typed_field_as_unset() -> None:
    state = GuardState.from_dict(GUARD, alive=True)
    assert state.unreadable == ("armed", "max_hours", "pid", "pgid", "outcome")
    assert state.max_hours is None and state.pid is None and state.watching
    assert state.when is not None and "\x1b" not in state.when
    assert "unreadable in guard.json: armed, max_hours, pid, pgid, outcome" in state.summary()
