"""End to end over a real sshd: bootstrap -> launch a 3-epoch CPU run -> follow it with
the Watcher to ``completed`` -> the received log equals ``train.log`` byte for byte."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from remote.link.bootstrap import bootstrap_box
from remote.runs.launch import LaunchSpec, launch_run
from remote.watch.events import MetricsEvent, StatusEvent
from remote.watch.watcher import Watcher
from tests.fixtures.sshd import SSHServer
from tests.fixtures.watch_log import Collector, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def test_bootstrap_launch_follow_to_completed(sshd: SSHServer) -> None:
    project = Path(sshd.home) / "e2e"
    data = project / "shapes"
    with sshd.connect() as box:
        result = bootstrap_box(box, preflight=False)
        prefix = box.trainer_prefix
        made = box.run(f"{prefix} -m trainer shapes {shlex.quote(str(data))} --train 8 "
                       "--val 4 --imgsz 32", timeout=120)
        assert made.ok, made.stderr
        spec = LaunchSpec("trainer", str(project), "run1", {
            "data": str(data / "data.yaml"), "epochs": "3", "batch": "8", "imgsz": "32",
            "workers": "0", "device": "cpu"})
        started = launch_run(box, spec)
        assert result.trainer_dir in started.command

    def connect():
        transport = sshd.connect()
        transport.trainer_prefix = prefix
        return transport

    events = Collector()
    watcher = Watcher(connect, started.run_dir, events)
    watcher.start()
    run_dir = Path(started.run_dir)

    def completed() -> bool:
        return any(isinstance(e, StatusEvent) and e.health.verdict == "completed"
                   for _, e in events.snapshot())

    try:
        assert wait_until(completed, 360), (run_dir / "console.log").read_text()[-2000:]
        log = run_dir / "train.log"
        assert wait_until(lambda: len(events.log_bytes()) >= log.stat().st_size, 30)
    finally:
        watcher.stop()
    assert events.log_bytes() == log.read_bytes()
    rows = [row for _, e in events.snapshot() if isinstance(e, MetricsEvent) for row in e.rows]
    assert [row["epoch"] for row in rows] == [1, 2, 3]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "completed" and status["pid"] == started.pid
