"""The fleet as a live screen, driven with Pilot over the providers' stand-ins (their
rate limits on): it lists itself again without meeting a 429, says when it listed,
keeps the cursor on its instance through listings and a stop, moves ``spent`` and the
idle minutes on between listings, keeps an account's last-known rows (marked, the total
said incomplete) while the account errs, and answers j/k/g/G, ``/``, ``o`` and the
command palette. No SSH box: the listing does not reach boxes here."""

from __future__ import annotations

import asyncio
import time

import pytest

from remote.billing import Account, want_running
from remote.fleet import FleetOptions, FleetRow, Idle, Rules, list_fleet, set_lease, watch_once
from tests.fixtures.screen import until_shown, until_true, widget_text
from trainer.providers import Instance
from tui.app import GpurentApp
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.quit import QuitDialog
from tui.screens.fleet import FleetScreen

pytestmark = pytest.mark.anyio
SIZE = (160, 48)
NO_BOXES = FleetOptions(timeout=10, ssh=False, weights=False)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def fleet_app(*accounts: Account) -> GpurentApp:
    """The app with no host: the fleet of ``accounts``, listed without reaching boxes."""
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet(list(accounts), NO_BOXES)
    return app


def fleet(app: GpurentApp) -> FleetScreen:
    """The app's fleet screen (shown or not)."""
    screen = app.get_screen("fleet")
    assert isinstance(screen, FleetScreen)
    return screen


async def test_it_lists_again_within_the_rate_limits_and_keeps_the_cursor_through_a_stop(
        provider_standin, monkeypatch):
    """With the provider's own intervals (pace 1) and a refresh period far under them,
    every listing waits its turn: no 429 is met. The cursor stays on its instance through
    the listings and a stop; ``s`` on the stopped instance says so and asks nothing; the
    quit dialog says what the fleet keeps billing."""
    vast = provider_standin("vast", pace=1.0, settle_polls=1)
    ids = [vast.add_instance(dph_base=price) for price in (0.5, 1.0, 2.0)]
    monkeypatch.setattr(FleetScreen, "REFRESH", 0.1, raising=False)
    app = fleet_app(Account("vast", "work", vast.key, vast.base_url))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until_shown(pilot, f"vast:{ids[2]}", "as of ")
        screen = fleet(app)
        await pilot.press("j")
        target = screen.selected().target
        assert target == f"vast:{ids[1]}"
        lists = len(vast.calls("GET"))
        await until_true(pilot, lambda: len(vast.calls("GET")) >= lists + 3)
        assert screen.selected().target == target
        await pilot.press("s")
        await until_shown(pilot, "Stop the instance?")
        app.screen.query_one("#confirm").focus()
        await pilot.pause()
        await pilot.press("enter")
        await until_true(pilot, lambda: screen.selected().instance.state == "stopped",
                         timeout=60)
        assert screen.selected().target == target  # not back on row 1
        await pilot.press("s")
        await until_true(pilot, lambda: any(f"{target} is already stopped" in m
                                            for m in getattr(app, "notified", [])))
        assert not isinstance(app.screen, ConfirmDialog)
        assert len(vast.calls("PUT")) == 1
        assert [r.path for r in vast.requests if r.fault == "limit"] == []
        await pilot.press("q")
        await until_true(pilot, lambda: isinstance(app.screen, QuitDialog))
        await until_shown(pilot, "The fleet (as of", "Quitting stops none of them",
                          "Detach and quit")


async def test_spent_moves_on_between_listings(provider_standin, monkeypatch):
    """$36/h is a cent a second: ``spent`` moves on screen while nothing is listed."""
    vast = provider_standin("vast")
    vast.started(vast.add_instance(dph_base=36.0), 600)
    monkeypatch.setattr(FleetScreen, "REFRESH", 3600.0, raising=False)
    app = fleet_app(Account("vast", "work", vast.key, vast.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await until_shown(pilot, "1 instance, billing $36.")
        screen = app.screen
        first = screen.query_one("#fleet").get_cell_at((0, 3)).plain
        lists = len(vast.calls("GET"))
        await until_true(pilot, lambda: screen.query_one("#fleet").get_cell_at(
            (0, 3)).plain != first)
        assert len(vast.calls("GET")) == lists


def test_the_idle_minutes_move_on_with_the_clock() -> None:
    """A row's idle words at a later moment say the later minutes and dollars."""
    inst = Instance("running", 3.6, 0.1, 250.0, "RTX 4090", None, None, id="7",
                    provider="vast", started_at=0.0)
    row = FleetRow("work", "vast", inst, idle=Idle(1000.0, "no live run", 600.0, 0.6))
    assert "idle 10 min, $0.60" in row.words(1600.0)
    assert "idle 12 min, $0.72" in row.words(1720.0)


async def test_an_account_that_errs_keeps_its_last_rows_and_the_total_says_incomplete(
        provider_standin, monkeypatch):
    """A 500 from one account: its instance stays, marked as of the last listing, and
    the total is never the lower one; the failure's row says why ⏎ does nothing. Once
    it answers again, the rows are fresh and the total complete."""
    vast = provider_standin("vast")
    vast.add_instance(dph_base=0.40)
    runpod = provider_standin("runpod")
    pod = runpod.add_instance()
    monkeypatch.setattr(FleetScreen, "REFRESH", 3600.0, raising=False)
    app = fleet_app(Account("vast", "work", vast.key, vast.base_url),
                    Account("runpod", "lab", runpod.key, runpod.base_url))
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        text = await until_shown(pilot, f"runpod:{pod}", "2 instances, billing")
        total = next(w for w in text.split(";") if "2 instances, billing" in w).strip()
        runpod.fail(500, times=2)  # the client's try and its retry
        await pilot.press("r")
        await until_shown(pilot, "INCOMPLETE: runpod/lab did not answer (1 instance as "
                          "last listed)", total, f"runpod:{pod}", "running, as of")
        screen = fleet(app)
        assert [r.target for r in screen.fleet.rows if r.stale is not None] == \
            [f"runpod:{pod}"]
        keys = [r.instance is None for r in screen.rows]
        await pilot.press("j")  # the vast row, then the failure's
        assert screen.under_cursor().instance is None
        await pilot.press("enter")
        await until_true(pilot, lambda: any("runpod/lab: the account did not answer" in m
                                            for m in getattr(app, "notified", [])))
        assert isinstance(app.screen, FleetScreen) and app.specs == [] and any(keys)
        await pilot.press("r")
        await until_true(pilot, lambda: not any(r.stale for r in screen.fleet.rows)
                         and all(r.instance is not None for r in screen.fleet.rows))
        await until_shown(pilot, total)


async def test_keys_filter_sort_and_the_palette_find_instances(provider_standin,
                                                               monkeypatch, tmp_path):
    """j/k/g/G move the cursor, ``/`` filters (Esc clears), ``o`` sorts by the price now
    (the cursor stays on its instance), ctrl+p finds an instance by its id and puts the
    cursor on it; the account's whole name is in the table at 160 columns beside the
    longest state, notes and GPU."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # its own intents
    vast = provider_standin("vast")
    ids = [vast.add_instance(dph_base=p, gpu_name=g)
           for p, g in ((0.3, "RTX 3090"), (2.0, "H100 SXM"), (0.9, "RTX 4090"),
                        (1.5, "NVIDIA H100 80GB HBM3 SXM5"))]
    want_running(f"vast:{ids[3]}")
    vast.take_away(ids[3])  # the longest state and notes there are
    monkeypatch.setattr(FleetScreen, "REFRESH", 3600.0, raising=False)
    app = fleet_app(Account("vast", "research-lab-eu-west-1", vast.key, vast.base_url))
    async with app.run_test(size=SIZE) as pilot:
        await until_shown(pilot, f"vast:{ids[3]}", "taken away")
        assert "vast/research-lab-eu-west-1" in widget_text(app, app.screen.query_one("#fleet"))
        screen = fleet(app)

        def under() -> str:
            return screen.selected().target

        await pilot.press("G")
        assert under() == f"vast:{ids[3]}"
        await pilot.press("k", "k")
        assert under() == f"vast:{ids[1]}"
        await pilot.press("g")
        assert under() == f"vast:{ids[0]}"
        await pilot.press("j")
        await pilot.press("o", "o")  # as listed -> $/h now -> ...: one o is $/h
        await pilot.press("o", "o", "o", "o", "o")  # round and back to $/h now
        await until_shown(pilot, "sorted by $/h now")
        assert [r.target for r in screen.rows] == [f"vast:{i}" for i in
                                                   (ids[1], ids[3], ids[2], ids[0])]
        assert under() == f"vast:{ids[1]}"
        await pilot.press("slash", *"4090")
        await until_shown(pilot, "filter '4090': 1 of 4 rows")
        assert [r.target for r in screen.rows] == [f"vast:{ids[2]}"]
        await pilot.press("enter", "escape")
        await until_true(pilot, lambda: len(screen.rows) == 4)
        assert isinstance(app.screen, FleetScreen)
        await pilot.press("ctrl+p")
        await pilot.pause()
        await pilot.press(*ids[0])
        await until_shown(pilot, f"instance vast:{ids[0]}")
        await pilot.press("enter")
        await until_true(pilot, lambda: isinstance(app.screen, FleetScreen)
                         and under() == f"vast:{ids[0]}")


async def test_the_fleet_says_whether_a_watchdog_was_seen_enforcing_leases(
        provider_standin, monkeypatch, tmp_path):
    """Before any watchdog pass here: said, with what enforces a lease then. After a
    real pass of ``gpurent watchdog`` (one ``watch_once``): when, and how many leases it
    held to. A pass long ago is not a watchdog that runs."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    vast = provider_standin("vast")
    iid = vast.add_instance()
    set_lease(f"vast:{iid}", 3600)
    monkeypatch.setattr(FleetScreen, "REFRESH", 3600.0, raising=False)
    account = Account("vast", "work", vast.key, vast.base_url)
    app = fleet_app(account)
    async with app.run_test(size=SIZE) as pilot:
        await until_shown(pilot, "1 lease here; no watchdog seen on this laptop: leases "
                          "are enforced only by an armed guard on the box")
        await asyncio.to_thread(watch_once, [account], Rules(), NO_BOXES)
        await pilot.press("r")
        await until_shown(pilot, "1 lease here; a watchdog enforces leases: last pass ",
                          "held to 1 lease")
        from remote.fleet.watchrecords import record_pass

        record_pass(1, 300.0, time.time() - 3600)
        await pilot.press("r")
        await until_shown(pilot, "NO watchdog seen lately: the last pass was 60 min ago")
