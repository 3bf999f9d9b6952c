"""Snapshots of the main states (pytest-textual-snapshot). Inputs are fixed: run
directories written with RunWriter, a frozen clock, no connection; update with
``pytest --snapshot-update`` after a deliberate change and look at the SVGs."""

from __future__ import annotations

from tests.fixtures.tui_scenes import PROFILE, destroy_costs, scene_app, show_scene
from tui.box.reports import instance_costs
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.profile import ProfileCard

SIZE = (150, 44)


def test_main_screen_live_run(snap_compare, tmp_path):
    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=SIZE, run_before=show_scene)


def test_dead_run(snap_compare, tmp_path):
    assert snap_compare(scene_app(tmp_path, "dead"), terminal_size=SIZE, run_before=show_scene)


def test_launch_form(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.press("l")
        await pilot.pause(0.3)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=SIZE, run_before=before)


def test_profile_card(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.app.push_screen(ProfileCard(PROFILE))
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=SIZE, run_before=before)


def test_destroy_dialog_unsafe_weights(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        dialog = DestroyDialog("4100001", False, instance_costs(destroy_costs(), "destroy"))
        await pilot.app.push_screen(dialog)
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "live"), terminal_size=SIZE, run_before=before)


def test_help_screen(snap_compare, tmp_path):
    async def before(pilot):
        await show_scene(pilot)
        await pilot.press("question_mark")
        await pilot.pause(0.2)

    assert snap_compare(scene_app(tmp_path, "done"), terminal_size=SIZE, run_before=before)
