"""The fleet screen, driven with Pilot: ``gpurent-tui`` with no host opens it; the rows
come from the real listing (provider stand-in, a real sshd box) with the idle words and
dollars; hostile provider text is shown inert; ``s`` stops through the dialog; Enter
opens the instance as a box tab; ``D`` opens the destroy dialog with the weights verdict;
``L`` gives the instance a lease, shows it when reopened, and asks before clearing it."""

from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import pytest
from textual.widgets import Button, Input

from remote.billing import Account, want_running
from remote.fleet import FleetOptions, lease_for, list_fleet
from tests.fixtures.gpubox import quiet_lines
from tests.fixtures.screen import until_shown, until_true, widget_text
from tests.fixtures.sshd import SSHServer
from trainer import runfiles
from tui.app import GpurentApp
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.lease import LeaseDialog
from tui.screens.fleet import FleetScreen

pytestmark = pytest.mark.anyio
SIZE = (170, 40)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def box_options(box: SSHServer, tmp_path: Path, target: str, **more) -> FleetOptions:
    """The listing's options for ``box``, known as ``target`` (``vast:ID``), this test's
    key and known_hosts."""
    known = tmp_path / "known_hosts"
    known.write_text(f"{target} {box.host_key_line}\n")
    return FleetOptions(timeout=10, ssh_options={
        "known_hosts": str(known), "identity_files": (box.key_path,), "allow_agent": False,
        "ssh_config": box.ssh_config}, **more)


async def test_the_fleet_opens_without_a_host_and_acts_on_its_rows(provider_standin, box,
                                                                  tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    idle = vast.add_instance(dph_base=1.0, storage_total_cost=0.2,
                             gpu_name="[/]\x1b]0;pwned\x07 4090")
    vast.set_address(idle, box.host, box.port)
    vast.started(idle, 47 * 60 + 5)
    options = box_options(box, tmp_path, f"vast:{idle}")
    account = Account("vast", "work", vast.key, vast.base_url)
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet([account], options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        text = await until_shown(pilot, f"vast:{idle}", "idle 47 min, $0.94", "1 instance,")
        assert isinstance(app.screen, FleetScreen)
        assert "[/] 4090" in text and "pwned" not in text.replace("]0;pwned", "")  # inert
        await pilot.press("s")
        await until_shown(pilot, "Stop the instance?", "keeps billing")
        assert isinstance(app.screen, ConfirmDialog)
        app.screen.query_one("#confirm").focus()  # keys, not a click a toast could take
        await pilot.pause()
        await pilot.press("enter")
        await until_shown(pilot, "is stopped")
        assert len(vast.calls("PUT")) == 1
        assert vast.instances[idle]["actual_status"] == "stopped"
        deadline = time.monotonic() + 20
        while "stopped: disk" not in " ".join(app.screen.fleet.rows[0].words(time.time())):
            assert time.monotonic() < deadline
            await pilot.pause(0.1)
        await pilot.press("enter")
        await pilot.pause(0.2)
        assert not isinstance(app.screen, FleetScreen)
        assert [s.target for s in app.specs] == [f"vast:{idle}"]
        assert (app.specs[0].provider, app.specs[0].instance) == ("vast", idle)
        await pilot.press("F")  # back to the list from the box
        await until_shown(pilot, f"vast:{idle}", "listed in")


async def test_d_on_a_row_opens_the_destroy_dialog_with_the_weights_verdict(
        provider_standin, box, tmp_path):
    """One key on the list: the box is reached as the listing reached it, and the destroy
    dialog asks over the fleet with the gate's verdict (a run whose best.pt was never
    pushed: not safe, named); the row itself said so already. Cancel is back in the
    fleet."""
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    run = Path(box.home) / "proj" / "exp"
    runfiles.RunWriter(run).write_status({"state": "completed", "total_epochs": 1,
                                          "completed_epochs": 1, "best_epoch": 1})
    runfiles.atomic_write_bytes(run / "weights" / "best.pt", b"never pushed")
    registry = Path(box.home) / ".cache" / "gpurent" / "runs.txt"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(f"{run}\n")
    options = box_options(box, tmp_path, f"vast:{iid}")
    account = Account("vast", "work", vast.key, vast.base_url)
    app = GpurentApp([])
    app.fleet_lister = lambda: list_fleet([account], options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until_shown(pilot, f"vast:{iid}", "NOT safe: exp/weights/best.pt")
        await pilot.press("D")
        deadline = time.monotonic() + 15
        while not isinstance(app.screen, DestroyDialog):
            assert time.monotonic() < deadline, [e.message for e in app.history]
            await pilot.pause(0.1)
        assert not app.screen.weights_safe
        await until_shown(pilot, "exp/weights/best.pt")
        assert app.specs == []  # asked from the fleet: no tab to wait on
        await pilot.press("escape")  # Cancel lands back in the fleet
        await until_true(pilot, lambda: isinstance(app.screen, FleetScreen))
        assert not vast.calls("DELETE")


async def test_l_on_a_row_gives_the_instance_a_lease_here_and_on_its_box(
        provider_standin, box, tmp_path):
    """``L``, a duration, Enter: the lease is kept on this laptop (the watchdog's) and
    written on the box the listing reached (the guard's), and the row says it; ``L`` and
    an empty duration clear it in both places, once asked (one Enter keeps it). A
    duration that is not one is refused in the dialog, nothing set."""
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    options = box_options(box, tmp_path, f"vast:{iid}")
    account = Account("vast", "work", vast.key, vast.base_url)
    on_box = Path(box.home) / ".cache" / "gpurent" / "lease.json"
    app = GpurentApp([])
    app.fleet_lister = lambda: list_fleet([account], options)
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await until_shown(pilot, f"vast:{iid}", "listed in")
        await pilot.press("L")
        await until_shown(pilot, f"Lease for vast:{iid}", "no lease")
        assert isinstance(app.screen, LeaseDialog)
        await pilot.press(*"6 hours", "enter")
        await until_shown(pilot, "is not a duration")
        assert isinstance(app.screen, LeaseDialog) and lease_for(f"vast:{iid}") is None
        app.screen.query_one("#duration", Input).value = ""
        before = time.time()
        await pilot.press(*"6h", "enter")
        await until_shown(pilot, "written on the box", "lease 5 h 59 min left")
        lease = lease_for(f"vast:{iid}")
        assert lease is not None and lease.then == "stop"
        assert before + 6 * 3600 <= lease.until <= time.time() + 6 * 3600
        assert json.loads(on_box.read_text())["until"] == lease.until
        await pilot.press("L")
        until = time.strftime("%H:%M", time.localtime(lease.until))
        await until_shown(pilot, f"lease until {until} (in 5 h 59 min), then stop")
        await pilot.press("enter")  # an empty duration asks before clearing...
        await until_shown(pilot, "Clear the lease?")
        await pilot.press("enter")  # ...and one more Enter is its Cancel
        await until_true(pilot, lambda: isinstance(app.screen, LeaseDialog))
        assert lease_for(f"vast:{iid}") is not None and on_box.exists()
        await pilot.press("enter")
        await until_shown(pilot, "Clear the lease?")
        app.screen.query_one("#confirm").focus()
        await pilot.pause()
        await pilot.press("enter")
        await until_shown(pilot, f"vast:{iid}: no lease; written on the box")
        assert lease_for(f"vast:{iid}") is None and not on_box.exists()


async def test_the_details_say_the_gpus_over_the_last_minutes_within_80_columns(
        provider_standin, gpu_box, tmp_path):
    """The box's GPU ring in the highlighted row's details, whole within 80 columns
    (the table's compact columns as they were), its garbage never shown."""
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, gpu_box.server.host, gpu_box.server.port)
    gpu_box.smi.answer(3)
    gpu_box.plant("\x1b]0;pwned\x07[/][bold]\n" + quiet_lines(25 * 60, 8 * 60, 60)
                  + quiet_lines(7 * 60, 7 * 60, 60, util=7) + quiet_lines(6 * 60, 60, 60))
    options = box_options(gpu_box.server, tmp_path, f"vast:{iid}", weights=False)
    account = Account("vast", "work", vast.key, vast.base_url)
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet([account], options)
    async with app.run_test(size=(80, 24)) as pilot:
        text = await until_shown(pilot, f"vast:{iid}", "instance", "state", "$/h now",
                                 "GPU 3% now, 1.2/80 GiB; 25 min: avg 2%, max 7%, "
                                 "1.3/80 GiB at most")
        assert "pwned" not in text and "[/]" not in text
        detail = app.screen.query_one("#fleet-detail")
        assert detail.region.right <= 80 and detail.virtual_size.width <= 80


def closed_port() -> int:
    """A local port nothing listens on (a box that refuses)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_at_80x24_not_safe_shows_and_d_on_a_dead_box_asks_at_once_behind_unknown(
        provider_standin, box, tmp_path, monkeypatch):
    """At 80x24 the weights verdict of a reached box is in its column beside a row taken
    away by its provider (the longest state) and a Lambda instance (the longest id).
    ``D`` on the box that cannot be reached opens the destroy dialog at once, over the
    fleet (no tab, no wait on the box), behind the
    "weights unknown" gate, its buttons on screen; Cancel is back in the fleet; the typed
    id alone is refused, the id and the tick destroy it through the gate."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # its own intents
    vast = provider_standin("vast", settle_polls=1)
    reached = vast.add_instance()
    vast.set_address(reached, box.host, box.port)
    run = Path(box.home) / "proj" / "exp"
    runfiles.RunWriter(run).write_status({"state": "completed", "total_epochs": 1,
                                          "completed_epochs": 1, "best_epoch": 1})
    runfiles.atomic_write_bytes(run / "weights" / "best.pt", b"never pushed")
    registry = Path(box.home) / ".cache" / "gpurent" / "runs.txt"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text(f"{run}\n")
    dead = vast.add_instance()
    vast.set_address(dead, "127.0.0.1", closed_port())
    runpod = provider_standin("runpod")  # "taken away: stopped (EXITED)"
    taken = runpod.add_instance()
    want_running(f"runpod:{taken}")
    runpod.take_away(taken)
    lam = provider_standin("lambda")  # its ids are 32 characters
    lam.set_address(lam.add_instance(), "127.0.0.1", closed_port())
    options = box_options(box, tmp_path, f"vast:{reached}")
    accounts = [Account("vast", "work", vast.key, vast.base_url),
                Account("runpod", "pods", runpod.key, runpod.base_url),
                Account("lambda", "lab", lam.key, lam.base_url)]
    app = GpurentApp([])
    app.fleet_lister = lambda: list_fleet(accounts, options)
    async with app.run_test(size=(80, 24), notifications=True) as pilot:
        await until_shown(pilot, f"vast:{dead}", "taken away", "NOT safe")
        screen = app.screen
        assert isinstance(screen, FleetScreen)
        assert "NOT safe" in widget_text(app, screen.query_one("#fleet"))  # in its column
        for _ in range(3):  # j moves the cursor (down to the dead box's row)
            if screen.selected().target == f"vast:{dead}":
                break
            await pilot.press("j")
        assert screen.selected().target == f"vast:{dead}"
        await pilot.press("D")
        await until_true(pilot, lambda: isinstance(app.screen, DestroyDialog), timeout=5)
        assert app.specs == []
        await until_shown(pilot, "Weights UNKNOWN", "Cancel", "Destroy")
        for button in app.screen.query(Button):
            region = button.region
            assert region.height and region.bottom <= 24 and region.right <= 80, region
        await pilot.press("escape")
        await until_true(pilot, lambda: app.screen is screen)
        await pilot.press("D")
        await until_true(pilot, lambda: isinstance(app.screen, DestroyDialog))
        await pilot.press(*dead, "enter")
        await until_shown(pilot, "the weights are unknown: tick")
        assert isinstance(app.screen, DestroyDialog) and not vast.calls("DELETE")
        await pilot.press("tab", "space", "enter")
        await until_true(pilot, lambda: bool(vast.calls("DELETE")))
        await until_true(pilot, lambda: any(f"{dead}" in m and "destroy" in m
                                            for m in getattr(app, "notified", [])),
                         timeout=60)
        assert [c.path for c in vast.calls("DELETE")] == [f"/api/v0/instances/{dead}/"]
