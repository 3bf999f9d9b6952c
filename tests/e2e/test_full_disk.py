"""A full disk is named as the reason (issue 29): a real training run on a small
filesystem (a 12 MB tmpfs) dies writing its first checkpoint, leaving ``state:
running`` and a gone pid (``dead``) and, in its log, ``No space left on device``; the
trainer's failed checkpoint frees its temp file as it dies, so the disk is not even full
afterwards. ``gpurent status`` (here and over SSH) and the TUI say the disk filled up;
a disk that is still full is named with what is free."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remote.transport.local import LocalTransport
from remote.watch.events import StatusEvent
from remote.watch.watcher import Watcher
from tests.fixtures.cli import gpurent, ssh_home
from tests.fixtures.paths import ROOT
from tests.fixtures.pilot import quiet_env, until  # noqa: F401 (quiet_env: autouse)
from tests.fixtures.screen import flat, screen_text
from tests.fixtures.small_disk import DISK_MB  # noqa: F401 (fixtures)
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_main_kit import specs
from tests.fixtures.watch_log import Collector, wait_until
from trainer import runfiles
from trainer.health import Health, disk_full, parse_df, with_disk
from tui.app import GpurentApp
from tui.box.view import BoxView


@pytest.fixture
def died_of_a_full_disk(small_disk: Path, shapes_data: Path) -> Path:
    """A real run that died of the full disk: its run directory."""
    project = small_disk / "runs"
    out = subprocess.run(
        [sys.executable, "-m", "trainer", "train", "model=n", "imgsz=64", "workers=0",
         "seed=0", f"data={shapes_data}", "epochs=200", "batch=8", f"project={project}",
         "name=full"], cwd=small_disk, capture_output=True, text=True, timeout=600,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"})
    assert out.returncode != 0, out.stdout[-2000:]
    run = project / "full"
    assert runfiles.read_status(run).get("state") == "running"  # never closed: no room
    assert b"No space left on device" in (run / runfiles.LOG_FILE).read_bytes()
    return run


@pytest.mark.slow
@pytest.mark.anyio
async def test_status_here_and_over_ssh_and_the_tui_name_the_full_disk(
        died_of_a_full_disk, sshd: SSHServer, tmp_path: Path) -> None:
    run = died_of_a_full_disk
    here = gpurent("status", str(run), "--json")
    assert here.returncode == 0, here.stderr
    summary = json.loads(here.stdout)
    assert summary["health"] == "dead"
    assert summary["reason"].startswith("the box's disk filled up"), summary["reason"]
    human = gpurent("status", str(run))
    assert 'disk filled up (the log says "No space left on device"' in human.stdout
    # Over SSH: the one-exec status script.
    there = gpurent("status", f"box:{run}", "--json", env=ssh_home(tmp_path, sshd))
    assert there.returncode == 0, there.stderr
    summary = json.loads(there.stdout)
    assert summary["health"] == "dead"
    assert summary["reason"].startswith("the box's disk filled up"), summary["reason"]
    # The TUI, through the real follower.
    app = GpurentApp(specs("--local", str(run.parent)))
    async with app.run_test(size=(160, 48)) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None
                    and box.state.status.health.verdict == "dead", timeout=60)
        assert box.state.status.health.reason.startswith("the box's disk filled up")
        await pilot.pause()
        assert "disk filled up" in flat(screen_text(app))


def test_a_disk_still_full_is_named_with_what_is_free(small_disk: Path) -> None:
    """The run's pid is gone and its disk is full now (something else filled it): the
    follower (a real one, on this machine) sends the disk's room, and the watcher names
    it; ``gpurent status`` does too."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    run = small_disk / "runs" / "exp"
    runfiles.RunWriter(run).write_status({"state": "running", "pid": gone.pid,
                                          "total_epochs": 3})
    fd = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\0" * (1 << 16))
    finally:
        os.close(fd)
    assert shutil.disk_usage(small_disk).free < 4096
    events = Collector()
    watcher = Watcher(LocalTransport, str(run), events)
    watcher.start()
    try:
        assert wait_until(lambda: any(isinstance(e, StatusEvent) and e.health.verdict == "dead"
                                      for _, e in events.snapshot()), 60)
    finally:
        watcher.stop()
    assert not watcher.polling
    dead = [e for _, e in events.snapshot() if isinstance(e, StatusEvent)][-1]
    assert dead.health.reason.startswith("the box's disk is full ("), dead.health.reason
    assert f"free of {DISK_MB * 1024 * 1024 / 1e6:.1f} MB" in dead.health.reason
    status = gpurent("status", str(run), "--json")
    assert json.loads(status.stdout)["reason"].startswith("the box's disk is full (")


def test_the_disk_is_named_only_for_a_run_that_stopped_writing() -> None:
    full = {"free": 4096, "size": 50 * 10**9}
    roomy = {"free": 10 * 10**9, "size": 50 * 10**9}
    for verdict in ("dead", "stalled", "failed"):
        assert with_disk(Health(verdict, "why"), full).reason.startswith(
            "the box's disk is full (4.1 kB free of 50.0 GB): why")
    for verdict in ("live", "slow", "completed", "stopped"):
        assert with_disk(Health(verdict, "why"), full).reason == "why"
    assert with_disk(Health("dead", "why"), roomy).reason == "why"
    assert disk_full(roomy, b"x" * 9000 + b"OSError: [Errno 28] No space left on device\n") \
        == 'the box\'s disk filled up (the log says "No space left on device"; 10.0 GB free now)'
    assert disk_full(None, b"No space left on device" + b"x" * 9000) is None  # long ago
    assert disk_full({"free": True, "size": 1}) is None and disk_full("full") is None
    df = (b"Filesystem     1024-blocks  Used Available Capacity Mounted on\n"
          b"tmpfs                12288     8     12280       1% /tmp/x\n")
    assert parse_df(df) == {"free": 12280 * 1024, "size": 12288 * 1024}
    assert parse_df(b"df: /nope: No such file or directory\n") is None
