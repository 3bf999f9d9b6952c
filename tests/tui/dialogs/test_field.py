"""Editing keys act in the order typed (``tui.widgets.field``, Textual #6605): keys sent in
one burst, without waiting between them, as a loaded laptop delivers them to a busy app;
``ctrl+u`` before the text empties the field first, a backspace deletes the letter before
it, in a bare field and in the launch form."""

from __future__ import annotations

import pytest
from textual import events
from textual.app import App, ComposeResult
from textual.widgets import Input

from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401
from tui.dialogs.launch import LaunchForm
from tui.widgets.field import Field

pytestmark = pytest.mark.anyio


def burst(app: App, keys: list[str]) -> None:
    """Post ``keys`` to the app at once (each is a key name or one character)."""
    for key in keys:
        app.post_message(events.Key(key, key if len(key) == 1 else None))


class OneField(App):
    def compose(self) -> ComposeResult:
        yield Field(value="old text", id="f")


async def test_a_burst_of_typing_and_editing_keys_lands_in_order():
    app = OneField()
    async with app.run_test() as pilot:
        field = app.query_one("#f", Input)
        field.focus()
        await pilot.pause()
        burst(app, ["end", "ctrl+u", "b", "a", "backspace", "c", "home", "x", "end", "!"])
        await until(pilot, lambda: field.value == "xbc!", timeout=10)
        burst(app, ["ctrl+u", "n", "e", "w"])
        await until(pilot, lambda: field.value == "new", timeout=10)


async def test_the_launch_form_keeps_the_order_of_a_burst(run_factory):
    run = run_factory("exp1", done=2, total=2, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(150, 46)) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm))
        name = app.screen.query_one("#f-name", Input)
        name.focus()
        await until(pilot, lambda: name.has_focus)
        burst(app, ["end", "ctrl+u", *"typed", "backspace", "d"])
        await until(pilot, lambda: name.value == "typed", timeout=10)
