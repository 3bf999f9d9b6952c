"""Words that were true a minute ago must not stay on screen once they are not: a pull
made with the CLI reaches the weights badge; a destroyed box's badges say what is true
after it (its weights judged without it, no guard words about its disk); a tab opened
from a fleet row knows the row's price; quitting a box never reached says what its
provider said; the launch form keeps a value the user chose on a box without a GPU."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from textual.widgets import Input

from remote.billing import Account
from remote.cli import main as gpurent
from remote.fleet import FleetOptions, list_fleet
from tests.fixtures.launched import kill_launched
from tests.fixtures.pilot import connected, local_app, press_button, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import until_shown
from tests.fixtures.tui_main_kit import specs
from trainer import runfiles
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.launch import LaunchForm
from tui.dialogs.quit import QuitDialog
from tui.screens.fleet import FleetScreen
from tui.spec import BoxSpec
from tui.widgets.badges import WeightsBadge
from tui.widgets.textline import TextLine

pytestmark = pytest.mark.anyio
SIZE = (150, 46)


def judged_unsafe(app: GpurentApp) -> bool:
    """The weights badge says "not safe" and no judgement is under way (one that started
    before a pull would see the pull too)."""
    judging = any(w.name == "refresh_safety" and not w.is_finished for w in app.workers)
    return not judging and app.query_one(BoxView).query_one(WeightsBadge).safe_now is False


def badge_text(box: BoxView) -> str:
    """What the weights badge says now."""
    return box.query_one(WeightsBadge).content.plain


async def destroy(app: GpurentApp, pilot, iid: str, *, override: bool = False) -> None:
    """D, the id typed (and 'destroy anyway' ticked), Destroy; until the app says the
    instance was destroyed."""
    await pilot.press("D")
    await until(pilot, lambda: shown(app, DestroyDialog))
    if override:
        app.screen.query_one("#override").value = True
    app.screen.query_one("#typed", Input).value = iid
    await pilot.pause(0.1)
    await press_button(pilot, "#destroy")
    await until(pilot, lambda: app.query_one(BoxView).state.destroyed, timeout=60)


async def test_a_pull_made_with_the_cli_reaches_the_weights_badge(run_factory, tmp_path):
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"best weights")
    app = local_app(run.parent)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        badge = box.query_one(WeightsBadge)
        await until(pilot, lambda: judged_unsafe(app))
        assert gpurent(["pull", str(run), str(tmp_path / "pulled")]) == 0  # beside the app
        await until(pilot, lambda: badge.safe_now is True, timeout=20)
        assert "weights safe" in badge_text(box) and "laptop" in badge_text(box)


async def test_after_a_destroy_the_weights_badge_says_where_the_copies_are(
        run_factory, vast_standin, monkeypatch, tmp_path):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"best weights")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: judged_unsafe(app))
        assert gpurent(["pull", str(run), str(tmp_path / "pulled")]) == 0
        await until(pilot, lambda: box.query_one(WeightsBadge).safe_now is True, timeout=20)
        await destroy(app, pilot, iid)
        await until(pilot, lambda: "destroyed" in badge_text(box))
        said = badge_text(box)
        assert "laptop" in said and "not safe" not in said and "⚠" not in said, said


async def test_after_a_destroy_the_weights_badge_names_what_had_no_copy(
        run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance()
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(b"never copied")
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        await until(pilot, lambda: box.query_one(WeightsBadge).safe_now is False)
        await destroy(app, pilot, iid, override=True)
        await until(pilot, lambda: "destroyed" in badge_text(box))
        said = badge_text(box)
        assert "not safe" not in said and "exp1/weights/best.pt" in said, said


async def test_after_a_destroy_the_guard_says_nothing_of_the_disk(
        run_factory, vast_standin, monkeypatch):
    iid = vast_standin.add_instance(actual_status="stopped", intended_status="stopped",
                                    cur_state="stopped")
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("exp1", done=3, total=3, state="completed")
    stopped = f"Vast instance {iid} is stopped; its disk keeps billing $0.0694/h"
    runfiles.atomic_write_json(run / "guard.json", {  # as the guard leaves it
        "schema_version": 1, "state": "done", "armed": False, "when": "run-ends",
        "then": "stop", "provider": "vast", "instance": iid, "last_decision": stopped,
        "outcome": {"action": "stop", "wanted": "stop", "instance_id": iid,
                    "confirmed": True, "state": "stopped", "billing_per_hour": 0.0694,
                    "tries": 1, "message": stopped, "alarm": False}})
    app = local_app(run.parent, provider="vast", instance=iid,
                    provider_url=vast_standin.base_url)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = await connected(app, pilot)
        guard = box.query_one("#guard-badge", TextLine)
        await until(pilot, lambda: "keeps billing" in guard.text.plain)
        await destroy(app, pilot, iid)  # no weights: nothing to lose
        await until(pilot, lambda: "destroyed" in guard.text.plain)
        assert "billing" not in guard.text.plain, guard.text.plain


def closed_port() -> int:
    """A port on this machine where nothing listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_quitting_a_box_never_reached_says_what_its_provider_said(
        vast_standin, monkeypatch):
    iid = vast_standin.add_instance()  # running, $0.4520/h
    vast_standin.set_address(iid, "127.0.0.1", closed_port())
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    app = GpurentApp([BoxSpec("ssh", f"vast:{iid}", provider="vast", instance=iid,
                              provider_url=vast_standin.base_url)])
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.connect_error is not None)
        await until(pilot, lambda: "$0.45/h" in box.money_text().plain, timeout=20)
        await pilot.press("q")
        await until(pilot, lambda: shown(app, QuitDialog))
        words = app.screen.query_one("#body").content.plain
    assert "nothing is known" not in words, words
    assert "never reached" in words and "vast says it is running" in words, words
    assert "$0.45/h" in words, words


async def test_a_tab_opened_from_a_fleet_row_knows_the_rows_price(provider_standin):
    vast = provider_standin("vast")
    iid = vast.add_instance()  # no address: the listing reaches no box
    account = Account("vast", "work", vast.key, vast.base_url)
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet([account], FleetOptions(timeout=5, weights=False))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until_shown(pilot, f"vast:{iid}", "1 instance,")
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("enter")
        await until(pilot, lambda: not isinstance(app.screen, FleetScreen)
                    and bool(app.query(BoxView)))
        money = app.query_one(BoxView).money_text().plain
    assert "$0.45/h" in money and "give --price" not in money, money


async def test_the_launch_form_keeps_a_cloned_size_on_a_box_without_a_gpu(run_factory):
    run = run_factory("exp1", done=2, total=5, state="completed")
    status = runfiles.read_status(run).fields or {}
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, {**status, "imgsz": 96})
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        box = await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm))
        form = app.screen
        imgsz = form.query_one("#f-imgsz", Input)
        await until(pilot, lambda: box.state.preflight is not None and imgsz.value == "160")
        await pilot.press("ctrl+o")  # the watched run's settings: imgsz 96
        await until(pilot, lambda: imgsz.value == "96")
        # A dataset path typed: the checks run again for it (the doctor refuses it).
        form.query_one("#f-data", Input).value = str(Path(run.parent) / "missing.yaml")
        await until(pilot, lambda: bool(form.doctor_blocks), timeout=60)
        note = str(form.query_one("#note-imgsz").content)
        assert imgsz.value == "96" and "no GPU" not in note, (imgsz.value, note)


async def test_the_demos_launch_form_keeps_the_demos_own_sizes(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    app = GpurentApp(specs("--demo"))
    try:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            box = app.query_one(BoxView)
            await until(pilot, lambda: box.state.run_dir is not None
                        and box.state.transport is not None, timeout=240)
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm))
            form = app.screen
            # The box's checks came back for the demo's data: this machine has no GPU.
            await until(pilot, lambda: box.state.preflight is not None
                        and "doctor" in str(form.query_one("#findings").content), timeout=120)
            values = form.values()
            notes = " ".join(str(form.query_one(f"#note-{k}").content)
                             for k in ("imgsz", "batch", "epochs"))
    finally:
        for pid_file in (tmp_path / "cache").glob("gpurent/demo/runs/*/launch.pid"):
            kill_launched(pid_file.parent)
    assert (values["imgsz"], values["batch"], values["epochs"]) == ("96", "16", "15"), values
    assert values["device"] == "cpu" and "no GPU" not in notes, notes


async def test_f_from_a_tab_shows_the_fleet_on_the_tabs_instance(provider_standin):
    """F from a box tab opened from a row puts the fleet's cursor on that row (the taken-
    away tab says "F then m": m acts on the row under the cursor)."""
    vast = provider_standin("vast")
    first, second = vast.add_instance(), vast.add_instance()
    account = Account("vast", "work", vast.key, vast.base_url)
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet([account], FleetOptions(timeout=5, weights=False))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until_shown(pilot, f"vast:{first}", f"vast:{second}")
        fleet = app.screen
        keys = [row.target for row in fleet.rows]
        await pilot.press(*["j"] * keys.index(f"vast:{second}"), "enter")
        await until(pilot, lambda: not isinstance(app.screen, FleetScreen)
                    and bool(app.query(BoxView)))
        await pilot.press("F")
        await until(pilot, lambda: app.screen is fleet)
        elsewhere = "g" if keys.index(f"vast:{first}") == 0 else "G"
        await pilot.press(elsewhere, "escape")  # the cursor on the other row, back in the tab
        assert fleet.selected() is None or fleet.selected().target == f"vast:{first}"
        await until(pilot, lambda: app.screen is not fleet)
        await pilot.press("F")
        await until(pilot, lambda: app.screen is fleet)
        assert fleet.selected().target == f"vast:{second}", fleet.selected().target
