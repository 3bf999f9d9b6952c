"""One clock for a run's money (issue 29): a box whose clock is 2 h behind this laptop's
writes ``updated_at`` 2 h in the past. The watcher measures the offset (the follower's
hello, or ``date +%s`` when polling) and hands it on with each status; the money lines
judge the box's timestamps on the box's clock: no "spent $6.42" for a true $0.42, no
"idle 2h" right after the run ended."""

from __future__ import annotations

import dataclasses
import stat
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from remote.transport.local import PACKAGE_ROOT, LocalTransport
from remote.transport.ssh import SSHTransport
from remote.watch.delivery import Delivery
from remote.watch.events import StatusEvent
from remote.watch.polling import box_clock_skew
from remote.watch.watcher import Watcher
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_runs import FROZEN_NOW, frozen_status
from tests.fixtures.tui_scenes import infos, scene_app, show_scene
from tests.fixtures.watch_log import Collector, wait_until
from trainer import procid, runfiles
from trainer.runfiles import StatusRead

#: How far the box's clock is behind this laptop's.
BEHIND = 7200


def slow_clock_box(box_factory: Callable[..., SSHServer], tmp_path: Path) -> SSHServer:
    """A real sshd whose sessions' ``date`` is ``BEHIND`` seconds behind (as a box whose
    clock was never set), everything else as on this machine."""
    bin_dir = tmp_path / "slow-clock-bin"
    bin_dir.mkdir()
    date = bin_dir / "date"
    date.write_text(f"#!/bin/sh\necho $(( $(/usr/bin/date +%s) - {BEHIND} ))\n")
    date.chmod(date.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return box_factory(path=[str(bin_dir), "/usr/local/bin", "/usr/bin", "/bin"])


def write_slow_status(run: Path, pid: int) -> None:
    """A live run (``pid``) that wrote its status 5 s ago by a clock ``BEHIND`` slow."""
    runfiles.RunWriter(run).write_status({
        "state": "running", "pid": pid, "total_epochs": 30, "completed_epochs": 3,
        "elapsed_seconds": 126.0, "mean_epoch_seconds": 42.0, "epoch_seconds": 42.0,
        **procid.identity(pid)})
    status = runfiles.read_status(run).fields or {}
    status["updated_at"] = runfiles.utc_now_iso(time.time() - BEHIND - 5)  # its clock
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, status)


def first_status(connect: Callable[[], Any], run: Path,
                 **options: Any) -> tuple[Watcher, StatusEvent]:
    """The first status a watcher of ``run`` delivers (the watcher stopped after it)."""
    events = Collector()
    watcher = Watcher(connect, str(run), events, poll_interval=0.1, **options)
    watcher.start()
    try:
        assert wait_until(lambda: any(isinstance(e, StatusEvent)
                                      for _, e in events.snapshot()), 60)
    finally:
        watcher.stop()
    [status, *_] = [e for _, e in events.snapshot() if isinstance(e, StatusEvent)]
    return watcher, status


def test_polling_measures_the_box_clock_and_judges_the_run_on_it(box_factory, tmp_path):
    """A box without a usable python (file polling): ``date +%s`` gives the offset, each
    status carries it, and a run that wrote its status a moment ago by its own clock
    is live (not overdue by the 2 h between the clocks)."""
    box = slow_clock_box(box_factory, tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)
    try:
        run = Path(box.home) / "clock" / "exp"
        write_slow_status(run, proc.pid)
        with box.connect() as transport:
            skew = box_clock_skew(transport)
        assert skew is not None and abs(skew + BEHIND) < 5, skew

        def connect() -> SSHTransport:
            transport = box.connect()
            transport.trainer_prefix = str(tmp_path / "no" / "python3")  # polling
            return transport

        watcher, status = first_status(connect, run)
        assert watcher.polling
        assert abs(status.skew + BEHIND) < 5, status.skew
        assert status.health.verdict == "live", status.health
    finally:
        proc.kill()
        proc.wait()


def test_the_follower_s_hello_measures_the_box_clock(tmp_path: Path) -> None:
    """The real follower (``python3 -m trainer follow``) on a box whose clock is
    ``BEHIND`` slow: its hello's ``now`` gives the offset (the box's clock minus this
    laptop's), each status carries it, and the run that wrote its status 5 s ago by its
    own clock is live, not overdue by 2 h."""
    site = tmp_path / "slow-clock-site"  # the box's python: time.time() BEHIND slow
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import time\n_real = time.time\ntime.time = lambda: _real() - {BEHIND}\n")
    box = LocalTransport()
    box.trainer_prefix = f"PYTHONPATH={site}:{PACKAGE_ROOT} {sys.executable}"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)
    try:
        run = tmp_path / "clock" / "exp"
        write_slow_status(run, proc.pid)
        watcher, status = first_status(lambda: box, run, close_transport=False)
        assert not watcher.polling
        assert abs(status.skew + BEHIND) < 5, status.skew
        assert status.health.verdict == "live", status.health
    finally:
        proc.kill()
        proc.wait()


def test_the_follower_s_offset_reaches_each_status() -> None:
    """The delivery's offset (what the follower's hello sets, tested above): every
    status delivered after it carries it."""
    got: list[object] = []
    delivery = Delivery(got.append)
    delivery.skew = -float(BEHIND)
    delivery.set_status(StatusRead({"state": "completed"}), None)
    [event] = got
    assert isinstance(event, StatusEvent) and event.skew == -BEHIND
    assert event.box_time(FROZEN_NOW) == FROZEN_NOW - BEHIND


def behind(event: StatusEvent, run: Path, ago: float) -> StatusEvent:
    """``event`` as a box ``BEHIND`` seconds slow delivers it: its status written ``ago``
    seconds before now by the box's clock, and the offset measured."""
    status = runfiles.read_status(run).fields or {}
    status["updated_at"] = runfiles.utc_now_iso(FROZEN_NOW - BEHIND - ago)
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, status)
    return dataclasses.replace(event, read=runfiles.read_status(run), skew=-float(BEHIND))


@pytest.mark.anyio
@pytest.mark.parametrize("which", ["live", "done"])
async def test_the_money_lines_read_the_box_s_timestamps_on_the_box_s_clock(tmp_path, which):
    """At $3.00/h: the live run trained 12 x 42 s and wrote its status 5 s ago (box
    clock): spent $0.42, not $6.42; the completed run ended 5 s ago: idle 0 min."""
    app = scene_app(tmp_path, which)
    async with app.run_test(size=(160, 48)) as pilot:
        box = await show_scene(pilot)
        runs, _ = app.scene
        run = runs[which]
        event = frozen_status(run, pid_alive=which == "live")
        box.watching.deliver(1, behind(event, run, 5.0))
        box.tick()
        await pilot.pause()
        money = box.money_text().plain
        if which == "live":
            assert "$0.42" in money and "$6.42" not in money, money
        else:
            assert "idle 0 min: $0.0042 and counting" in money, money  # 5 s at $3/h
            assert "2h" not in money


def test_no_clock_on_the_box_leaves_the_offset_unknown(box_factory, tmp_path) -> None:
    """A box whose ``date`` says something else than seconds: no offset (the status's
    own times are used as they are), never a wrong one."""
    bin_dir = tmp_path / "odd-bin"
    bin_dir.mkdir()
    date = bin_dir / "date"
    date.write_text("#!/bin/sh\necho 'Thu Jan  1 00:00:00 UTC 1970'\n")
    date.chmod(0o755)
    box = box_factory(path=[str(bin_dir), "/usr/bin", "/bin"])
    with box.connect() as transport:
        assert box_clock_skew(transport) is None


@pytest.mark.anyio
async def test_a_box_where_another_run_trains_is_not_idle(tmp_path):
    """The watched run completed, but the box's other run (exp3) trains: the money line
    says so instead of "idle ... and counting" (issue 38: said while another run trained)."""
    app = scene_app(tmp_path, "done")
    async with app.run_test(size=(160, 48)) as pilot:
        box = await show_scene(pilot)
        runs, _ = app.scene
        box.watching.show_runs(infos(runs))
        box.tick()
        await pilot.pause()
        money = box.money_text().plain
        assert "run exp3 trains on this box" in money and "and counting" not in money, money
        box.watching.show_runs([dataclasses.replace(r, health="completed")
                                if r.name == "exp3" else r for r in infos(runs)])
        box.tick()
        await pilot.pause()
        assert "and counting" in box.money_text().plain  # exp3 ended: the box idles
