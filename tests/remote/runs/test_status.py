"""``gpurent status HOST:RUN`` reads a run in one exec of ``sh``, with no bootstrap
(``remote.runs.status``): over a real sshd, for every kind of run, it reaches the same
summary and guard state as the readers that ask file by file over SFTP."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.runs.guard import read_guard
from remote.runs.read import read_run, run_extras
from remote.runs.status import quick_read
from remote.transport.base import TransportError
from tests.fixtures.gate_kit import Counting
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_runs import write_run
from trainer import procid, runfiles


@pytest.fixture
def runs(sshd: SSHServer, request: pytest.FixtureRequest):
    """Every kind of run, in one project on the box; a live pid for those that need one."""
    root = Path(sshd.home) / "quick" / request.node.name
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    pid = sleeper.pid
    write_run(root / "completed", done=3, total=3, state="completed")
    write_run(root / "live", done=1, total=5, state="running", pid=pid, epoch_seconds=3600)
    write_run(root / "dead", done=1, total=5, state="running", pid=2999998)
    starting = root / "starting"
    starting.mkdir(parents=True)
    (starting / runfiles.LAUNCH_PID_FILE).write_text(f"{pid} 1 x\n")
    (starting / runfiles.CONSOLE_FILE).write_text("loading the data\n")
    failed = root / "failed"
    failed.mkdir()
    (failed / runfiles.CONSOLE_FILE).write_bytes(b"Traceback\nOSError: no space\x1b[2J")
    (failed / runfiles.LAUNCH_PID_FILE).write_text("2999997\n")
    broken = root / "broken"
    broken.mkdir()
    (broken / runfiles.STATUS_FILE).write_text('{"state": "running", "pid": "12"}')
    guarded = write_run(root / "guarded", done=2, total=2, state="completed")
    runfiles.atomic_write_json(guarded / "guard.json", {
        "state": "armed", "when": "done", "then": "stop", "pid": pid,
        "started_at": runfiles.utc_now_iso(time.time() - 5), **procid.identity(pid),
        "alarm": {"at": "2026-07-31T10:00:00Z", "message": "could not stop"}})
    runfiles.atomic_write_json(guarded / "guard.ack.json",
                               {"alarm_at": "2026-07-31T10:00:00Z"})
    # What LibreYOLO leaves: launch files beside the run, a final status without the
    # epoch count or the best metric's name, a stop mark, its config and plots.
    (root / ".gpurent").mkdir()
    (root / ".gpurent" / "beside.launch.pid").write_text("2999995\n")
    (root / ".gpurent" / "beside.console.log").write_text("Traceback\nKeyError: 'x'\n")
    (root / "beside").mkdir()
    libre = write_run(root / "libre", done=3, total=3, state="completed")
    status = runfiles.read_status(libre).fields or {}
    for key in ("completed_epochs", "best_metric_name", "best_metric", "best_epoch"):
        status.pop(key, None)
    runfiles.atomic_write_json(libre / runfiles.STATUS_FILE, status)
    (libre / "train_config.yaml").write_text("model: yolo9t\nepochs: 3\n")
    (libre / "val" / "plots").mkdir(parents=True)
    for name in ("a.png", "b.png"):
        (libre / "val" / "plots" / name).write_bytes(b"png")
    (libre / "weights" / "best.pt").write_bytes(b"w")
    (libre / runfiles.RESULTS_FILE).write_text("epoch\n1\n")
    stopped = write_run(root / "stopped", done=1, total=5, state="failed",
                        error={"type": "KeyboardInterrupt", "message": ""})
    status = runfiles.read_status(stopped).fields or {}
    status["pid"] = 2999994
    runfiles.atomic_write_json(stopped / runfiles.STATUS_FILE, status)
    (root / ".gpurent" / "stopped.stop.json").write_text('{"pid": 2999994}')
    gone = write_run(root / "guard-gone", done=2, total=2, state="completed")
    runfiles.atomic_write_json(gone / "guard.json", {
        "state": "armed", "when": "done", "then": "stop", "pid": 2999996,
        "started_at": runfiles.utc_now_iso(time.time() - 5)})
    yield root
    sleeper.kill()
    sleeper.wait()


KINDS = ("completed", "live", "dead", "starting", "failed", "broken", "guarded",
         "guard-gone", "beside", "libre", "stopped")


def test_one_exec_reaches_what_the_file_readers_reach(sshd: SSHServer, runs: Path) -> None:
    with sshd.connect() as link:
        for kind in KINDS:
            run_dir = str(runs / kind)
            counted = Counting(link)
            quick, guard, extras = quick_read(counted, run_dir)
            assert len(counted.execs) == 1 and counted.sftp == 0, kind
            slow, slow_guard = read_run(link, run_dir), read_guard(link, run_dir)
            assert extras == run_extras(link, run_dir), kind
            fast, want = quick.summary(), slow.summary()
            if kind in ("live", "dead"):  # judged against the box's clock, not ours
                fast.pop("reason")
                want.pop("reason")
            assert fast == want, kind
            assert (guard is None) == (slow_guard is None), kind
            if guard is not None:
                assert guard.to_dict() == slow_guard.to_dict()


def test_the_health_of_each_kind(sshd: SSHServer, runs: Path) -> None:
    with sshd.connect() as link:
        verdicts = {kind: quick_read(link, str(runs / kind))[0].health.verdict
                    for kind in KINDS}
        guard = quick_read(link, str(runs / "guarded"))[1]
    assert verdicts == {"completed": "completed", "live": "live", "dead": "dead",
                        "starting": "starting", "failed": "failed", "broken": "unreadable",
                        "guarded": "completed", "guard-gone": "completed",
                        "beside": "failed", "libre": "completed", "stopped": "stopped"}
    assert guard is not None and guard.watching and guard.alarm is not None
    assert not guard.alarm_active  # acknowledged


def test_a_missing_directory_is_one_line(sshd: SSHServer) -> None:
    with sshd.connect() as link, pytest.raises(TransportError, match="not a directory"):
        quick_read(link, f"{sshd.home}/quick/nope")


def test_the_cli_answers_from_one_exec(sshd: SSHServer, runs: Path, tmp_path: Path) -> None:
    from tests.fixtures.cli import gpurent, ssh_home

    env = ssh_home(tmp_path, sshd)
    done = gpurent("status", f"box:{runs / 'failed'}", env=env)
    assert done.returncode == 0, done.stderr
    assert "health: failed" in done.stdout and "OSError: no space" in done.stdout
    assert "\x1b" not in done.stdout
