"""Runs that have not written status.json yet: a run directory holding only the
launcher's ``launch.pid`` and ``console.log`` is a run, ``starting`` while its pid lives
and ``failed`` (its console's last lines the reason) once it is gone: in the verdict,
the follower and the watcher, ``gpurent runs/status/launch`` over sshd, and the TUI."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Button, Input

from remote.runs.read import list_runs, read_run
from remote.transport.local import LocalTransport
from remote.watch.events import StatusEvent
from remote.watch.watcher import Watcher
from tests.fixtures.cli import gpurent, ssh_home
from tests.fixtures.pilot import messages, shown, until
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_e2e_kit import ssh_spec
from tests.fixtures.watch_log import Collector, wait_until
from trainer import runfiles
from trainer.health import Health, LaunchRead, judge_health
from trainer.runfiles import StatusRead
from tui.app import GpurentApp
from tui.box import launching
from tui.box.view import BoxView
from tui.dialogs.launch import LaunchForm
from tui.widgets.logpane import CONSOLE_TITLE, LogPane
from tui.widgets.runs import RunsList
from tui.widgets.textline import TextLine

TRACEBACK = ("Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\n"
             "    import numpy\nModuleNotFoundError: No module named 'numpy'\n")


def test_the_verdict_of_a_run_without_status() -> None:
    missing = StatusRead(None, "no status.json in r", missing=True)
    launch = LaunchRead(4242, TRACEBACK.strip())
    alive = judge_health(missing, now=0.0, pid_alive=lambda pid: pid == 4242, launch=launch)
    assert alive.verdict == "starting" and "pid 4242" in alive.reason
    assert alive.reason.endswith("No module named 'numpy'")
    dead = judge_health(missing, now=0.0, pid_alive=lambda _pid: False, launch=launch)
    assert dead.verdict == "failed"
    assert dead.reason.startswith("failed to start: ") and \
        dead.reason.endswith("ModuleNotFoundError: No module named 'numpy'")
    silent = judge_health(missing, now=0.0, pid_alive=lambda _pid: False,
                          launch=LaunchRead(4242, ""))
    assert silent == Health("failed", "failed to start: no output")
    # Not a launched run, or a status.json that exists but cannot be read: unreadable.
    assert judge_health(missing, now=0.0).verdict == "unreadable"
    broken = StatusRead(None, "status.json is not valid JSON")
    assert judge_health(broken, now=0.0, pid_alive=lambda _pid: False,
                        launch=launch).verdict == "unreadable"


def launched(run_dir: Path, pid: int, console: str) -> Path:
    """A run directory as the launcher leaves it before the run writes anything."""
    run_dir.mkdir(parents=True)
    (run_dir / runfiles.LAUNCH_PID_FILE).write_text(f"{pid}\n")
    (run_dir / runfiles.CONSOLE_FILE).write_text(console)
    return run_dir


def test_a_run_that_died_in_setup_is_listed_and_read_as_failed(tmp_path: Path) -> None:
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    run = launched(tmp_path / "proj" / "bad", int(gone), TRACEBACK + "\x1b[2J\x07")
    runfiles.RunWriter(tmp_path / "proj" / "good").write_status({"state": "completed"})
    transport = LocalTransport()
    listed = {r.name: r for r in list_runs(transport, str(tmp_path / "proj"))}
    assert set(listed) == {"bad", "good"}
    assert listed["bad"].health == "failed" and "No module named 'numpy'" in listed["bad"].reason
    summary = read_run(transport, str(run)).summary()
    assert summary["health"] == "failed" and summary["pid"] == int(gone)
    assert summary["pid_alive"] is False and summary["state"] is None
    assert summary["console"] == TRACEBACK.strip()  # control characters removed


@pytest.mark.parametrize("python", [True, False], ids=["follower", "polling"])
def test_the_follower_and_watcher_see_a_start_fail(tmp_path: Path, python: bool) -> None:
    """A real follower on a real process (or, on a box without python, the watcher's
    polling): starting while it lives (its console resent as it grows), failed with the
    console's last lines once it exits."""

    def connect() -> LocalTransport:
        transport = LocalTransport()
        if not python:
            transport.trainer_prefix = str(tmp_path / "no" / "python3")
        return transport

    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"],
                            start_new_session=True)
    try:
        run = launched(tmp_path / "r", proc.pid, "loading the dataset\n")
        events = Collector()
        watcher = Watcher(connect, str(run), events, poll_interval=0.1)
        watcher.start()

        def statuses() -> list[StatusEvent]:
            return [e for _, e in events.snapshot() if isinstance(e, StatusEvent)]

        try:
            assert wait_until(lambda: any(s.health.verdict == "starting" for s in statuses()))
            with open(run / runfiles.CONSOLE_FILE, "a") as fh:
                fh.write(TRACEBACK)
            assert wait_until(lambda: "numpy" in statuses()[-1].console, 15)
            proc.kill()
            proc.wait(10)
            assert wait_until(lambda: statuses()[-1].health.verdict == "failed", 15)
        finally:
            watcher.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert watcher.polling is not python
    last = statuses()[-1]
    assert last.health.reason.endswith("ModuleNotFoundError: No module named 'numpy'")
    assert last.console.splitlines()[0] == "loading the dataset" and last.pid_alive is False


@pytest.mark.timeout(300)
def test_cli_over_ssh_reports_lists_and_shows_a_run_that_died_in_setup(
        tmp_path: Path, sshd: SSHServer) -> None:
    env = ssh_home(tmp_path, sshd)
    project = Path(sshd.home) / "start-cli"
    launched_ = gpurent("launch", f"box:{project}", "name=typo", "data=/no/such/data.yaml",
                        "epochs=1", "--wait", "120", env=env, timeout=180)  # a loaded box
    assert launched_.returncode == 1, launched_.stdout + launched_.stderr
    error = launched_.stderr.strip().splitlines()[-1]
    assert error.startswith("gpurent launch: failed to start: ") and \
        "data file '/no/such/data.yaml' does not exist" in error

    listed = gpurent("runs", f"box:{project}", "--json", env=env)
    assert listed.returncode == 0, listed.stderr
    [row] = json.loads(listed.stdout)
    assert (row["name"], row["health"]) == ("typo", "failed")

    status = gpurent("status", f"box:{project}/typo", env=env)
    assert status.returncode == 0, status.stderr
    lines = status.stdout.splitlines()
    assert lines[1].split()[-1] == "failed" and "does not exist" in lines[2]
    assert "console.log (last lines; no status.json yet):" in lines
    followed = gpurent("follow", f"box:{project}/typo", env=env)
    assert followed.returncode == 1 and "console.log: train: data file" in followed.stderr


@pytest.mark.anyio
@pytest.mark.timeout(300)
async def test_the_tui_shows_a_run_that_died_in_setup(sshd: SSHServer, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch):
    # The dataset doctor refuses a missing path once typing pauses; a Launch pressed
    # before it answered starts the run. Held back here, so that each key waits for the
    # form's state instead of racing the doctor (on a loaded machine it answered between
    # the focus on Launch and the Enter).
    monkeypatch.setattr(launching, "DOCTOR_DEBOUNCE", 3600.0)
    project = str(tmp_path / "tui-start")
    app = GpurentApp([ssh_spec(sshd, project, sshd.known_hosts)])
    async with app.run_test(size=(150, 46)) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.transport is not None, timeout=120)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        values = {"data": "/no/such/data.yaml", "epochs": "1", "name": "typo",
                  "device": "cpu"}
        for key, value in values.items():
            form.query_one(f"#f-{key}", Input).value = value
        launch = form.query_one("#launch", Button)
        # Every value checked (its change handled: the command shows it), Launch allowed.
        await until(pilot, lambda: all(f"{key}={value}" in str(
            form.query_one("#command").render()) for key, value in values.items())
            and not launch.disabled)
        launch.focus()
        await until(pilot, lambda: app.focused is launch)
        await pilot.press("enter")
        state = box.state
        await until(pilot, lambda: state.run_dir == f"{project}/typo" and state.status is not None
                    and state.status.health.verdict == "failed", timeout=120)
        # Said with the bell: by the launch when the run died within its wait, else by
        # the watcher when it saw it ("run typo failed: failed to start: ...").
        await until(pilot, lambda: any(
            m.startswith(("failed to start: ", "run typo failed: failed to start: "))
            and "does not exist" in m for m in messages(app)))
        assert "does not exist" in box.header.query_one("#ident", TextLine).text.plain
        pane = box.query_one(LogPane)
        await until(pilot, lambda: any("does not exist" in line for line in pane.log_view.lines))
        assert pane.border_title == CONSOLE_TITLE
        assert [(r.name, r.health) for r in box.query_one(RunsList).runs] == [("typo", "failed")]
    assert not (Path(project) / "typo" / runfiles.STATUS_FILE).exists()
