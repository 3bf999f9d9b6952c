"""A second stop of a run whose first stop is still saving: it sends nothing, waits, and
never kills the run; ``gpurent stop --force`` still does. The real trainer on CPU, whose
epoch end is held by the ``tests.fixtures.slow_save`` callback (a slow final save)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from remote.cli import main
from remote.runs.launch import LaunchSpec, launch_run
from remote.runs.stop import stop_in_progress, stop_run
from remote.transport.local import LocalTransport
from trainer import engines, procid, runfiles
from trainer.health import local_pid_alive


class ReleasingTransport(LocalTransport):
    """A local box that lets the held run go on once the stop has read its stop mark (so
    the run ends while that stop waits)."""

    def __init__(self, release: Path) -> None:
        super().__init__()
        self.release = release

    def read(self, path: str, offset: int, length: int) -> bytes:
        """Read, and release the run when the stop mark is read."""
        if path.endswith(engines.BESIDE_STOP):
            self.release.touch()
        return super().read(path, offset, length)


def until(what: str, ok, seconds: float = 60.0) -> None:
    """Wait until ``ok()`` holds."""
    deadline = time.monotonic() + seconds
    while not ok():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)


@pytest.fixture
def sleeper_run(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], Path]]:
    """A running run whose process (a ``sleep``) ends at SIGTERM, as our trainer does."""
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    run = tmp_path / "exp"
    run.mkdir()
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, {
        "schema_version": 1, "state": "running", "pid": proc.pid,
        **procid.identity(proc.pid), "started_at": runfiles.utc_now_iso(),
        "updated_at": runfiles.utc_now_iso(), "completed_epochs": 1, "total_epochs": 10})
    try:
        yield proc, run
    finally:
        proc.kill()
        proc.wait()


def leave_mark(run: Path, pid: int, age: float) -> Path:
    """The stop mark a ``gpurent stop`` of pid ``pid`` wrote ``age`` seconds ago."""
    mark = Path(engines.beside_path(run, engines.BESIDE_STOP))
    mark.parent.mkdir(exist_ok=True)
    when = time.time() - age
    mark.write_text(json.dumps({"pid": pid, "signal": "SIGTERM", "by": "gpurent stop",
                                "at": runfiles.utc_now_iso(when), "torn": []}) + "\n")
    os.utime(mark, (when, when))
    return mark


@pytest.mark.parametrize(("same_pid", "age"), [(False, 0.0), (False, 3600.0), (True, 3600.0)])
def test_a_stop_mark_of_another_process_does_not_hold_the_next_stop(
        sleeper_run: tuple[subprocess.Popen[bytes], Path], same_pid: bool,
        age: float) -> None:
    # Left by the stop of the run's process before a resume (a box restarted for the
    # resume may hand the new process the same pid), or naming another process. Taken
    # for a stop in progress, every later stop would only wait while the box bills.
    proc, run = sleeper_run
    mark = leave_mark(run, proc.pid if same_pid else 2999990, age)
    box = LocalTransport()
    assert stop_in_progress(box, str(run), proc.pid, time.time() - 1) is None
    stopped = stop_run(box, str(run), timeout=5, poll=0.02)
    assert stopped.outcome == "stopped", stopped.detail
    assert stopped.detail.startswith(f"pid {proc.pid} ended ") and "after SIGTERM" in \
        stopped.detail, stopped.detail
    assert proc.wait(5) == -signal.SIGTERM
    assert engines.parse_stop(mark.read_bytes()) == proc.pid  # its own mark now


def test_a_stop_mark_of_this_process_is_a_stop_in_progress(
        sleeper_run: tuple[subprocess.Popen[bytes], Path]) -> None:
    proc, run = sleeper_run
    leave_mark(run, proc.pid, 0)
    sent = stop_in_progress(LocalTransport(), str(run), proc.pid, time.time() - 1)
    assert sent is not None and sent.signal == "SIGTERM"
    waited = stop_run(LocalTransport(), str(run), timeout=0.2, poll=0.02)
    assert waited.outcome == "stopping" and "not signalled again" in waited.detail, \
        waited.detail
    assert proc.poll() is None


def test_second_stop_waits_for_a_slow_save_and_force_kills(
        shapes_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    box = LocalTransport()
    args = {"model": "n", "imgsz": "64", "workers": "0", "seed": "0", "batch": "8",
            "epochs": "40", "data": str(shapes_data),
            "callbacks": "tests.fixtures.slow_save"}
    runs = {name: launch_run(box, LaunchSpec("trainer", str(tmp_path), name, args))
            for name in ("slow", "forced")}
    pool = ThreadPoolExecutor(2)
    try:
        for name in runs:
            until(f"{name} ends epoch 1", (tmp_path / name / "held").exists, 120)
        first = {name: pool.submit(stop_run, box, r.run_dir, 60) for name, r in runs.items()}
        marks = {name: Path(engines.beside_path(r.run_dir, engines.BESIDE_STOP))
                 for name, r in runs.items()}
        until("both stops marked", lambda: all(m.exists() for m in marks.values()))
        marked = time.monotonic()

        # The still-saving run is waited for, not signalled or killed, and --force kills.
        forced = runs["forced"]
        waited = stop_run(box, forced.run_dir, timeout=0.5)
        assert waited.outcome == "stopping", waited.detail
        assert "is in progress: waited 0.5s" in waited.detail
        assert "still saving" in waited.detail and "gpurent stop --force" in waited.detail
        assert local_pid_alive(forced.pid)
        assert main(["stop", forced.run_dir, "--force", "--json"]) == 0
        said = json.loads(capsys.readouterr().out)
        assert said["outcome"] == "killed" and "(SIGKILL)" in said["detail"], said
        assert not local_pid_alive(forced.pid)
        assert first["forced"].result(30).outcome == "stopped"

        # 15 s after the first stop (past the trainer's 10 s repeat rule) the second one
        # still only waits: the run ends stopped with last.pt of its last epoch.
        slow = runs["slow"]
        until("15 s after the first stop", lambda: time.monotonic() - marked >= 15, 30)
        second = stop_run(ReleasingTransport(tmp_path / "slow" / "release"), slow.run_dir,
                          timeout=60)
        assert second.outcome == "stopped", second.detail
        assert second.detail.startswith("a stop sent at "), second.detail
        assert "s ago) is in progress: waited, pid" in second.detail
        assert second.detail.endswith("state stopped"), second.detail
        assert first["slow"].result(30).outcome == "stopped"
        status = runfiles.read_status(tmp_path / "slow")
        assert status.get("state") == "stopped" and status.get("completed_epochs") == 1
        log = (tmp_path / "slow" / runfiles.LOG_FILE).read_text()
        assert "without saving" not in log
        import torch
        last = torch.load(tmp_path / "slow" / "weights" / "last.pt", weights_only=False)
        assert last["epoch"] == 1
    finally:
        for name, r in runs.items():
            (tmp_path / name / "release").touch()
            if local_pid_alive(r.pid):
                os.killpg(r.pid, signal.SIGKILL)
        pool.shutdown(wait=False)
