"""Snapshots of the main states (pytest-textual-snapshot) at 80x24 and 160x48. Inputs are
fixed: run directories written with RunWriter, a frozen clock, no connection; update with
``pytest --snapshot-update`` after a deliberate change and look at the SVGs."""

from __future__ import annotations

import pytest

from remote.watch.events import ConnectionEvent
from tests.fixtures.tui_scenes import PROFILE, destroy_costs, scene_app, show_scene
from tui.box.reports import instance_costs
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.profile import ProfileCard

SMALL, LARGE = (80, 24), (160, 48)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_main_screen_live_run(snap_compare, tmp_path, size):
    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=size, run_before=show_scene)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_dead_run(snap_compare, tmp_path, size):
    assert snap_compare(scene_app(tmp_path, "dead"), terminal_size=size, run_before=show_scene)


def test_link_down_dims_the_panes(snap_compare, tmp_path):
    async def before(pilot):
        box = await show_scene(pilot)
        box.watching.deliver(1, ConnectionEvent("stale", "no data for 5s", silent_for=34.0))
        box.watching.deliver(1, ConnectionEvent("reconnecting", "timed out", attempt=3))
        await pilot.pause(0.3)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=LARGE, run_before=before)


@pytest.mark.parametrize("size", [SMALL, LARGE], ids=["80x24", "160x48"])
def test_launch_form(snap_compare, tmp_path, size):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.press("l")
        for _ in range(100):
            await pilot.pause(0.1)
            findings = pilot.app.screen.query("#findings")
            if findings and "preflight" in str(findings.first().content):
                break
        for box in pilot.app.screen.query("Input"):
            box.cursor_blink = False  # the focused field's cursor: on, not blinking
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=size, run_before=before)


def test_quit_on_a_billing_box(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.press("q")
        await pilot.pause(0.3)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=SMALL, run_before=before)


def test_profile_card(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.app.push_screen(ProfileCard(PROFILE))
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=LARGE, run_before=before)


def test_destroy_dialog_unsafe_weights(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        dialog = DestroyDialog("4100001", False, instance_costs(destroy_costs(), "destroy"))
        await pilot.app.push_screen(dialog)
        for box in dialog.query("Input"):
            box.cursor_blink = False  # the id field has the focus: its cursor on, not blinking
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=LARGE, run_before=before)


def test_help_screen(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "done"), terminal_size=LARGE, run_before=before)
