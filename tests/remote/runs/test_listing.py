"""Listing a project's runs in one exec (``trainer runs``, ``remote.runs.listing``) over a real
sshd: 500 runs in one exec and no SFTP, newest first; runs that have only ``launch.pid``
and ``console.log`` are runs too (starting while the pid lives, failed after); the box's
verdicts are the ones the SFTP reader reaches; malformed entries are dropped."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from remote.link.tools import parse_report
from remote.runs.listing import RunsBook, box_runs, runs_in
from remote.runs.read import list_runs
from tests.fixtures.gate_kit import Counting, connector_for
from tests.fixtures.sshd import SSHServer
from trainer import runfiles


def quick_run(run: Path, epoch: int, updated: float, state: str = "completed") -> None:
    run.mkdir(parents=True, exist_ok=True)
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, {
        "schema_version": 1, "state": state, "completed_epochs": epoch, "total_epochs": 10,
        "updated_at": runfiles.utc_now_iso(updated), "best_metric": 0.5,
        "best_metric_name": "mAP50"})


def test_five_hundred_runs_are_listed_in_one_exec(sshd: SSHServer) -> None:
    project = Path(sshd.home) / "listing" / "p500"
    now = time.time()
    for i in range(500):
        quick_run(project / f"exp{i}", i % 10, now - 10_000 + i)
    gate = connector_for(sshd)
    with gate.open() as link:
        box_runs(link, str(project), gate)  # the box gets the package, if it lacks it
        counted = Counting(link)
        runs = box_runs(counted, str(project), gate)
    assert len(counted.execs) == 1 and counted.sftp == 0
    assert len(runs) == 500
    assert [r.name for r in runs[:3]] == ["exp499", "exp498", "exp497"]  # newest first
    assert runs[0].epoch == 9 and runs[0].health == "completed"


def test_launched_runs_without_status_and_parity_with_sftp(sshd: SSHServer) -> None:
    project = Path(sshd.home) / "listing" / "mixed"
    quick_run(project / "done", 3, time.time() - 60)
    starting = project / "starting"
    starting.mkdir(parents=True)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (starting / runfiles.LAUNCH_PID_FILE).write_text(f"{sleeper.pid}\n")
        (starting / runfiles.CONSOLE_FILE).write_text("importing torch\n")
        failed = project / "failed"
        failed.mkdir()
        (failed / runfiles.LAUNCH_PID_FILE).write_text("2999999\n")
        (failed / runfiles.CONSOLE_FILE).write_text("Traceback\nModuleNotFoundError: yaml\n")
        (project / "not-a-run").mkdir()
        (project / "notes.txt").write_text("a file, not a run")
        broken = project / "broken"
        broken.mkdir()
        (broken / runfiles.STATUS_FILE).write_text('{"state": 3}')
        # LibreYOLO's ways: launch files beside the run (its folder not made yet), a final
        # status without its epoch count (the metrics row has it), a run gpurent stopped.
        (project / ".gpurent").mkdir()
        (project / ".gpurent" / "beside.launch.pid").write_text("2999993\n")
        (project / ".gpurent" / "beside.console.log").write_text("ImportError: x\n")
        libre = project / "libre"
        quick_run(libre, 4, time.time() - 30)
        status = runfiles.read_status(libre).fields or {}
        status.pop("completed_epochs")
        runfiles.atomic_write_json(libre / runfiles.STATUS_FILE, status)
        (libre / runfiles.METRICS_FILE).write_text('{"epoch": 4, "best_metric": 0.5}\n')
        stopped = project / "stopped"
        quick_run(stopped, 1, time.time() - 20, state="failed")
        status = runfiles.read_status(stopped).fields or {}
        status.update(pid=2999992, error={"type": "KeyboardInterrupt", "message": ""})
        runfiles.atomic_write_json(stopped / runfiles.STATUS_FILE, status)
        (project / ".gpurent" / "stopped.stop.json").write_text('{"pid": 2999992}')
        gate = connector_for(sshd)
        with gate.open() as link:
            listed = {r.name: r for r in box_runs(link, str(project), gate)}
            sftp = {r.name: r for r in list_runs(link, str(project))}
    finally:
        sleeper.kill()
        sleeper.wait()
    assert set(listed) == {"done", "starting", "failed", "broken", "beside", "libre",
                           "stopped"} == set(sftp)
    assert listed["starting"].health == "starting"
    assert listed["beside"].health == "failed" and listed["libre"].epoch == 4
    assert listed["stopped"].health == "stopped"
    assert listed["failed"].health == "failed" and "yaml" in listed["failed"].reason
    assert listed["broken"].health == "unreadable"
    for name, run in listed.items():
        assert (run.health, run.state, run.epoch) == \
            (sftp[name].health, sftp[name].state, sftp[name].epoch), name


def test_malformed_entries_from_the_box_are_dropped() -> None:
    doc = (b'noise\n{"schema": "gpurent.runs/1", "runs": [{"name": "ok", "run_dir": "/p/ok", '
           b'"health": "live", "epoch": "7", "updated": 5}, {"name": 3}, "x", '
           b'{"name": "odd", "run_dir": "/p/odd", "health": "exploded", "updated": 9}]}')
    runs = runs_in(parse_report(doc))
    assert [r.name for r in runs] == ["odd", "ok"]
    assert runs[0].health == "unreadable" and runs[1].epoch is None
    book = RunsBook()
    book.apply({"full": True, "runs": [{"name": "a", "run_dir": "/p/a", "health": "live",
                                        "updated": 1}]})
    merged = book.apply({"full": False, "gone": ["a"], "runs": [
        {"name": "b", "run_dir": "/p/b", "health": "completed", "updated": 2}]})
    assert [r.name for r in merged] == ["b"]
    assert runs_in(parse_report(b"no json here")) is None


def test_the_cli_lists_runs_over_ssh(sshd: SSHServer, tmp_path: Path) -> None:
    from tests.fixtures.cli import gpurent, ssh_home

    project = Path(sshd.home) / "listing" / "cli"
    quick_run(project / "r1", 2, time.time())
    env = {**ssh_home(tmp_path, sshd), "XDG_STATE_HOME": str(tmp_path / "state")}
    done = gpurent("runs", f"box:{project}", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert '"name": "r1"' in done.stdout and '"health": "completed"' in done.stdout
