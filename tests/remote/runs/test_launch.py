"""``remote.runs.launch``, ``remote.runs.stop`` and ``remote.runs.read`` on this machine through
``LocalTransport``: real detached processes, real signals, injection attempts."""

from __future__ import annotations

import hashlib
import os
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from remote.runs.launch import (
    RESET_SIGNALS,
    LaunchSpec,
    RunIsLive,
    build_command,
    launch_run,
    make_spec,
)
from remote.runs.read import list_runs
from remote.runs.stop import stop_run
from remote.transport.local import LocalTransport
from tests.fixtures.launch_kit import sim_transport, wait_for
from trainer import runfiles
from trainer.health import local_pid_alive


def wait_gone(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while local_pid_alive(pid):
        assert time.monotonic() < deadline, f"pid {pid} did not end"
        time.sleep(0.05)


def test_command_shape_is_what_the_design_shows(tmp_path: Path) -> None:
    transport = LocalTransport()
    reset = f"python3 -c {shlex.quote(RESET_SIGNALS)}"
    spec = LaunchSpec("trainer", "/data/runs", "run1", {"model": "gpdet-n", "epochs": "3"})
    assert build_command(spec, transport) == (
        f"mkdir -p /data/runs/run1 && cd /data/runs && {{ setsid nohup {reset} env "
        f"{transport.trainer_prefix} -m trainer train model=gpdet-n epochs=3 project=. "
        f'name=run1 > run1/console.log 2>&1 < /dev/null & p=$!; echo "$p" > run1/launch.pid; '
        f'echo "$p"; }}')
    # LibreYOLO renames an existing folder: nothing is made in it, our files go beside it,
    # and the token (for the push watcher only) is not exported to the engine.
    libre = make_spec("libreyolo", "runs", "a.b-c_1", {"data": "coco 8.yaml", "hub": "o/r"})
    command = build_command(libre, transport, read_secret=True, python="/usr/bin/python3")
    assert command == (
        f"mkdir -p runs/.gpurent && cd runs && {{ IFS= read -r HF_TOKEN; setsid nohup "
        f"/usr/bin/python3 -c {shlex.quote(RESET_SIGNALS)} libreyolo train "
        f"data='coco 8.yaml' project=. name=a.b-c_1 > .gpurent/a.b-c_1.console.log 2>&1 "
        f'< /dev/null & p=$!; echo "$p" > .gpurent/a.b-c_1.launch.pid; HF_TOKEN="$HF_TOKEN" '
        f"setsid nohup env {transport.trainer_prefix} -m trainer push --watch a.b-c_1 "
        f'--repo o/r --pid "$p" > .gpurent/a.b-c_1.push.log 2>&1 < /dev/null & echo "$p"; }}')
    # A resume names the checkpoint; an existing folder gets exist_ok=True.
    resume = make_spec("libreyolo", "runs", "ly", {"resume": "True"})
    assert "resume=True model=ly/weights/last.pt exist_ok=True project=. name=ly" in \
        build_command(resume, transport, run_exists=True)
    with pytest.raises(ValueError, match="pretrained=False with resume"):
        build_command(make_spec("libreyolo", "runs", "ly",
                                {"resume": "True", "pretrained": "False"}), transport)
    with pytest.raises(ValueError, match="trainer pushes itself"):
        build_command(LaunchSpec("trainer", "runs", "r", {}, push="o/r"), transport)


@pytest.mark.parametrize("name", [
    "x; rm -rf /", "$(touch /tmp/pwn)", "`id`", "../up", "a/b", ".hidden", "-rf", "..",
    "a b", "", "new\nline", "x" * 129, "a..b",
])
def test_bad_run_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError, match="run name"):
        build_command(LaunchSpec("trainer", "runs", name, {}), LocalTransport())


@pytest.mark.parametrize(("args", "match"), [
    ({"Model": "x"}, "key"), ({"a-b": "x"}, "key"), ({"x;touch /tmp/pwn": "1"}, "key"),
    ({"project": "/etc"}, "project="), ({"name": "x"}, "name="),
    ({"data": "a\nb"}, "control"), ({"data": "a\rb"}, "control"),
    ({"data": "\x1b[2J"}, "control"), ({"data": "a\x00b"}, "control"),
])
def test_bad_arguments_are_rejected(args: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        build_command(LaunchSpec("trainer", "runs", "r", args), LocalTransport())


@pytest.mark.parametrize("project", ["", "~/runs", "-x", "a\nb"])
def test_bad_projects_are_rejected(project: str) -> None:
    with pytest.raises(ValueError, match="project"):
        build_command(LaunchSpec("trainer", project, "r", {}), LocalTransport())


def test_hostile_values_arrive_verbatim_and_run_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    hostile = {
        "data": f"x'; touch {marker}; echo '",
        "model": f"$(touch {marker})",
        "device": f"`touch {marker}`",
        "workers": f'"; touch {marker}; "',
        "note": "a  b * ~ $HOME \\ | & ; < > !",
    }
    project = tmp_path / "pro ject's $(x)"
    transport = sim_transport()
    result = launch_run(transport, LaunchSpec("trainer", str(project), "r1",
                                          {**hostile, "epochs": "1", "epoch_seconds": "0.05"}))
    facts = wait_for(project / "r1" / "launch.json")
    words = facts["argv"]
    assert words[:3] == ["-m", "trainer", "train"]
    assert dict(w.split("=", 1) for w in words[3:]) == {
        **hostile, "epochs": "1", "epoch_seconds": "0.05", "project": ".", "name": "r1"}
    wait_gone(result.pid)
    assert not marker.exists()
    assert (project / "r1" / runfiles.STATUS_FILE).exists()
    assert result.run_dir == f"{project}/r1"


def test_launch_is_detached_and_the_token_travels_on_stdin(tmp_path: Path) -> None:
    token = "hf_SecretToken1234567890"
    transport = sim_transport()
    spec = LaunchSpec("trainer", str(tmp_path), "run", {"epochs": "1", "hold": "1"})
    result = launch_run(transport, spec, stdin=token.encode())
    try:
        facts = wait_for(tmp_path / "run" / "launch.json")
        assert facts["pid"] == result.pid
        assert facts["sid"] == facts["pgid"] == result.pid  # its own session and group
        assert facts["stdin_is_devnull"] and facts["sighup_ignored"]
        assert facts["cwd"] == str(tmp_path)
        assert facts["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
        assert token not in result.command
        cmdline = Path(f"/proc/{result.pid}/cmdline").read_bytes()
        assert token.encode() not in cmdline
        for path in tmp_path.rglob("*"):
            if path.is_file():
                assert token.encode() not in path.read_bytes(), path
        # A second launch into the run is refused, while it starts and while it runs.
        with pytest.raises(RunIsLive, match="starting|live run"):
            launch_run(transport, LaunchSpec("trainer", str(tmp_path), "run", {}))
        wait_for(tmp_path / "run" / runfiles.STATUS_FILE)
        with pytest.raises(RunIsLive, match="live run"):
            launch_run(transport, LaunchSpec("trainer", str(tmp_path), "run", {"exist_ok": "1"}))
    finally:
        os.killpg(result.pid, signal.SIGKILL)
    wait_gone(result.pid)
    with pytest.raises(ValueError, match="token|secret"):
        launch_run(transport, spec, stdin=b"two\nlines")


def test_earlier_runs_need_resume_or_exist_ok(tmp_path: Path) -> None:
    transport = sim_transport()
    runfiles.RunWriter(tmp_path / "done").write_status({"state": "completed"})
    with pytest.raises(ValueError, match="earlier run"):
        launch_run(transport, LaunchSpec("trainer", str(tmp_path), "done", {}))
    # A run without a pid (LibreYOLO) that was updated just now counts as live.
    runfiles.RunWriter(tmp_path / "libre").write_status({"state": "running"})
    with pytest.raises(RunIsLive, match="looks live"):
        launch_run(transport, LaunchSpec("libreyolo", str(tmp_path), "libre", {"resume": "True"}))
    # A dead run (pid gone) may be resumed.
    gone = subprocess.Popen(["true"])
    gone.wait()
    runfiles.RunWriter(tmp_path / "dead").write_status({"state": "running", "pid": gone.pid})
    result = launch_run(transport, LaunchSpec("trainer", str(tmp_path), "dead",
                                          {"resume": "True", "epochs": "1",
                                           "epoch_seconds": "0.01"}))
    wait_gone(result.pid)
    assert runfiles.read_status(tmp_path / "dead").get("state") == "completed"


def test_stop_run_graceful_then_forced(tmp_path: Path) -> None:
    transport = sim_transport()
    graceful = launch_run(transport, LaunchSpec("trainer", str(tmp_path), "polite",
                                            {"epochs": "1", "epoch_seconds": "0.05",
                                             "hold": "1"}))
    stubborn = launch_run(transport, LaunchSpec("trainer", str(tmp_path), "stubborn",
                                            {"epochs": "1", "epoch_seconds": "0.05",
                                             "hold": "1", "ignore_term": "1"}))
    for name in ("polite", "stubborn"):
        wait_for(tmp_path / name / "launch.json")
        while runfiles.read_status(tmp_path / name).get("completed_epochs") != 1:
            time.sleep(0.05)
    result = stop_run(transport, str(tmp_path / "polite"), timeout=20)
    assert result.outcome == "stopped", result.detail
    assert "state stopped" in result.detail
    assert not local_pid_alive(graceful.pid)
    result = stop_run(transport, str(tmp_path / "stubborn"), timeout=0.5)
    assert result.outcome == "killed", result.detail
    assert not local_pid_alive(stubborn.pid)
    assert runfiles.read_status(tmp_path / "stubborn").get("state") == "running"
    again = stop_run(transport, str(tmp_path / "stubborn"))
    assert again.outcome == "not-running" and "gone" in again.detail
    assert stop_run(transport, str(tmp_path / "polite")).outcome == "not-running"
    with pytest.raises(ValueError, match="no status.json"):
        stop_run(transport, str(tmp_path / "nothing"))

    # The runs listing sees both, with their health, newest first: the killed one is
    # shown as stopped (its stop mark names its pid), not as dead.
    (tmp_path / "not-a-run").mkdir()
    runs = list_runs(transport, str(tmp_path))
    assert [(r.name, r.state, r.health) for r in runs] == [
        ("polite", "stopped", "stopped"), ("stubborn", "running", "stopped")]
    assert runs[0].epoch == 1 and runs[0].best_metric_name == "mAP50"
    assert list_runs(transport, str(tmp_path / "missing")) == []


def test_real_trainer_launched_watched_and_stopped(shapes_data: Path, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from remote.watch.events import LogEvent, MetricsEvent, StatusEvent
    from remote.watch.watcher import Watcher

    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # a shared machine: one thread
    transport = LocalTransport()
    spec = LaunchSpec("trainer", str(tmp_path), "real", {
        "model": "n", "imgsz": "64", "workers": "0", "seed": "0", "batch": "8",
        "epochs": "40", "data": str(shapes_data)})
    result = launch_run(transport, spec)
    events: list = []
    watcher = Watcher(LocalTransport, result.run_dir, events.append, poll_interval=0.05)
    watcher.start()
    try:
        deadline = time.monotonic() + 120
        while sum(len(e.rows) for e in events if isinstance(e, MetricsEvent)) < 2:
            assert time.monotonic() < deadline, (tmp_path / "real/console.log").read_text()
            time.sleep(0.1)
        stopped = stop_run(transport, result.run_dir, timeout=60)
        assert stopped.outcome == "stopped", stopped.detail
        while not any(isinstance(e, StatusEvent) and e.health.verdict == "stopped"
                      for e in events):
            assert time.monotonic() < deadline, "the watcher never saw the stop"
            time.sleep(0.1)
        log = tmp_path / "real" / runfiles.LOG_FILE
        while sum(len(e.data) for e in events if isinstance(e, LogEvent)) < log.stat().st_size:
            assert time.monotonic() < deadline, "the last log lines never came"
            time.sleep(0.05)
    finally:
        watcher.stop()
        if local_pid_alive(result.pid):
            os.killpg(result.pid, signal.SIGKILL)
    status = runfiles.read_status(tmp_path / "real")
    assert status.get("state") == "stopped" and status.get("pid") == result.pid
    received = b"".join(e.data for e in events if isinstance(e, LogEvent))
    assert received == (tmp_path / "real" / runfiles.LOG_FILE).read_bytes()
    epochs = [r["epoch"] for e in events if isinstance(e, MetricsEvent) for r in e.rows]
    assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) < 40
