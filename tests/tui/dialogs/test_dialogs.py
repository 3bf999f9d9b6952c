"""Pilot tests of the dialogs as a user types into them: the focus starts on the first
thing to type or choose (never on a button that acts), Enter answers, Escape cancels,
and how each dialog ended is in the events history."""

from __future__ import annotations

import pytest
from textual.widgets import Select

from tests.fixtures.pilot import (  # noqa: F401 (quiet_env: autouse fixture)
    connected,
    local_app,
    messages,
    press_button,
    quiet_env,
    shown,
    until,
)
from tests.fixtures.screen import history as events
from tests.fixtures.screen import until_shown
from tui.dialogs.base import Dialog
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.guard import GuardDialog
from tui.dialogs.pull import PullDialog
from tui.dialogs.push import PushDialog

pytestmark = pytest.mark.anyio
SIZE = (150, 46)


def test_the_push_dialog_names_what_trainer_push_sends() -> None:
    from remote.weights import PUSHED_FILES
    from trainer.hub.push import DEFAULT_FILES

    assert PUSHED_FILES == DEFAULT_FILES


async def test_push_dialog_takes_the_repo_as_typed_and_enter_pushes(run_factory,
                                                                    monkeypatch):
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"weights")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 30)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the push fails there
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("u")
        await until(pilot, lambda: shown(app, PushDialog))
        assert app.focused.id == "repo"
        # It names the run and every file the push sends.
        await until_shown(pilot, "Push run exp1", str(run), "best.pt", "last.pt",
                          "summary.json", "results.csv")
        await pilot.press(*"me/detector", "enter")
        await until(pilot, lambda: not isinstance(app.screen, PushDialog))
        assert "Push run exp1 to the Hugging Face Hub: confirmed: push to me/detector " \
               "(private)" in events(app)
        await until(pilot, lambda: any("failed" in m for m in messages(app)), timeout=60)


async def test_escape_cancels_each_dialog_and_the_events_say_how_it_ended(run_factory,
                                                                          sleeper,
                                                                          monkeypatch):
    # This machine as a rented box (its environment names the instance): a guard may be
    # armed here.
    monkeypatch.setattr("tui.box.guard.this_machine", lambda: ("vast", "4242"))
    run = run_factory("exp1", done=3, total=30, pid=sleeper.pid)
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        for key, dialog, focused in (("x", ConfirmDialog, "cancel"),
                                     ("u", PushDialog, "repo"),
                                     ("w", PullDialog, "folder"),
                                     ("a", GuardDialog, "when")):
            await pilot.press(key)
            await until(pilot, lambda d=dialog: shown(app, d))
            title = app.screen.title_text
            assert app.focused.id == focused, f"{key}: {app.focused}"
            if isinstance(app.focused, Select):
                assert not app.focused.expanded
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, Dialog))
            assert f"{title}: cancelled" in events(app)
        await pilot.press("x")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: "Stop training: confirmed" in events(app))
        assert sleeper.wait(timeout=10) != 0


async def test_destroy_takes_the_id_first_and_enter(run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=1, total=3, state="completed")  # no weights: safe
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog))
        assert app.screen.weights_safe and app.focused.id == "typed"
        await pilot.press(*iid, "enter")
        await until(pilot, lambda: any("destroyed" in m for m in messages(app)), timeout=60)
        assert any(s.method == "DELETE" and iid in s.path for s in vast_standin.requests)
        assert "Destroy instance: confirmed" in events(app)


async def test_destroy_with_unsafe_weights_needs_the_override_ticked(run_factory,
                                                                    vast_standin,
                                                                    monkeypatch):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=1, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"unsaved")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("D")
        await until(pilot, lambda: shown(app, DestroyDialog))
        assert not app.screen.weights_safe and app.focused.id == "typed"
        await pilot.press(*iid, "enter")  # refused, and it says what is missing
        await until_shown(pilot, "tick 'destroy anyway'")
        assert isinstance(app.screen, DestroyDialog)
        assert not any(s.method == "DELETE" for s in vast_standin.requests)
        await pilot.press("tab")
        assert app.focused.id == "override"
        await pilot.press("space", "enter")
        await until(pilot, lambda: any("destroyed" in m for m in messages(app)), timeout=60)
        assert any(s.method == "DELETE" and iid in s.path for s in vast_standin.requests)
        assert "Destroy instance: confirmed, weights NOT safe (destroy anyway)" in events(app)
