"""The headless ``gpurent launch / follow / runs / stop / status`` commands, run as the
installed console script: on this machine, and against the real sshd fixture through
an ``~/.ssh/config`` alias (``HOST:RUN`` targets)."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from remote.cli import main as cli_main
from tests.fixtures.cli import gpurent, ssh_home
from tests.fixtures.fake_libreyolo import libreyolo_shim
from tests.fixtures.sshd import SSHServer
from trainer import runfiles
from trainer.health import local_pid_alive


def json_lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def log_of(events: list[dict[str, Any]]) -> bytes:
    """The log bytes carried by ``follow --json`` events."""
    data = bytearray()
    for e in events:
        if e["event"] == "log":
            if e["reset"]:
                data.clear()
            assert e["offset"] == len(data)
            data += e["text"].encode() if "text" in e else base64.b64decode(e["b64"])
    return bytes(data)


def libreyolo_on_path(tmp_path: Path, epoch_seconds: float = 0.2) -> dict[str, str]:
    """An environment whose ``libreyolo`` is the stand-in for the real one
    (``tests.fixtures.fake_libreyolo``: ~6 GB of torch is not installed here)."""
    libreyolo_shim(tmp_path / "bin")
    return {"PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}",
            "FAKE_LIBREYOLO_EPOCH_SECONDS": str(epoch_seconds)}


def kill_group(pid: int) -> None:
    """Kill a launched run's process group (it is its own session) if it still runs."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def test_launch_follow_runs_stop_on_this_machine(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str],
                                                request: pytest.FixtureRequest) -> None:
    env = libreyolo_on_path(tmp_path)
    project = tmp_path / "proj"
    data = tmp_path / "data.yaml"
    data.write_text("nc: 1\n")
    libre = ["model=yolox-n", "pretrained=False", f"data={data}", "eval_interval=2"]
    out = gpurent("launch", f"local:{project}", "name=r1", "epochs=3", *libre,
                  "--engine", "libreyolo", env=env)
    assert out.returncode == 0, out.stderr
    command, started = out.stdout.splitlines()
    assert command.startswith(f"$ mkdir -p {project}/.gpurent && cd {project} && {{ setsid "
                              "nohup ")
    assert " libreyolo train epochs=3 model=yolox-n pretrained=False " in command
    assert started.startswith("pid ") and started.endswith(f"run {project}/r1")

    followed = gpurent("follow", str(project / "r1"), "--json")
    assert followed.returncode == 0, followed.stderr
    events = json_lines(followed.stdout)
    assert log_of(events) == (project / "r1" / runfiles.LOG_FILE).read_bytes()
    statuses = [e for e in events if e["event"] == "status"]
    assert statuses[-1]["health"] == "completed" and statuses[-1]["pid_alive"] is False
    assert [r["epoch"] for e in events if e["event"] == "metrics" for r in e["rows"]] == \
        [1, 2, 3]

    out = gpurent("launch", "--engine", "libreyolo", str(project), "name=r2", "epochs=1000",
                  *libre, "--json", env=env)
    assert out.returncode == 0, out.stderr
    pid = json.loads(out.stdout)["pid"]
    request.addfinalizer(lambda: kill_group(pid))
    assert cli_main(["launch", str(project), "name=r2", "exist_ok=1", "--engine",
                     "libreyolo"]) == 1
    again = capsys.readouterr()
    # Refused either way: the run is live, or still starting (no status.json yet).
    assert again.out == ""
    assert "r2 holds a live run" in again.err or "is still starting" in again.err
    deadline = time.monotonic() + 60
    while (runfiles.read_status(project / "r2").get("completed_epochs") or 0) < 2:
        assert time.monotonic() < deadline, "r2 never finished two epochs"
        time.sleep(0.05)
    stopped = gpurent("stop", str(project / "r2"), "--timeout", "20", "--json")
    assert stopped.returncode == 0, stopped.stderr
    answer = json.loads(stopped.stdout)
    assert answer["outcome"] == "stopped" and "after SIGINT" in answer["detail"]
    assert not local_pid_alive(pid)
    # LibreYOLO writes failed/KeyboardInterrupt without its epoch count; we show stopped
    # with the epochs its metrics.jsonl holds.
    assert runfiles.read_status(project / "r2").get("state") == "failed"
    epochs = len((project / "r2" / runfiles.METRICS_FILE).read_text().splitlines())

    listed = gpurent("runs", str(project), "--json")
    assert listed.returncode == 0, listed.stderr
    runs = json.loads(listed.stdout)
    assert [(r["name"], r["health"]) for r in runs] == [("r2", "stopped"), ("r1", "completed")]
    assert runs[1]["best_metric_name"] == "metrics/mAP50-95"  # dropped from its status
    assert cli_main(["runs", str(project)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["NAME", "STATE", "HEALTH", "EPOCH", "BEST", "UPDATED"]
    assert table[1].split()[:4] == ["r2", "failed", "stopped", f"{epochs}/1000"]


@pytest.mark.parametrize("args", [
    ("launch", "{tmp}", "name=x; rm -rf /"),
    ("launch", "{tmp}", "epochs=3"),
    ("launch", "{tmp}", "name=ok", "novalue"),
    ("launch", "{tmp}", "name=ok", "data=a\nb"),
    ("launch", "{tmp}", "name=ok", "project=/etc"),
    ("follow", "{tmp}/missing"),
    ("follow", "{tmp}", "--silence", "0"),
    ("stop", "{tmp}"),
    ("stop", "{tmp}", "--timeout", "-1"),
    ("runs", ":x"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path: Path, args: tuple[str, ...],
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main([a.replace("{tmp}", str(tmp_path)) for a in args])
    out = capsys.readouterr()
    assert code == 2, out.err
    assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err
    assert out.err.startswith(f"gpurent {args[0]}: ") and out.out == ""
    assert not list(tmp_path.iterdir()), "a rejected command left files behind"


def test_status_runs_follow_over_ssh(tmp_path: Path, sshd: SSHServer) -> None:
    # Absolute paths: the fixture's sessions start in the real home, not in sshd.home.
    project = Path(sshd.home) / "cli-runs"
    run = project / "r1"
    from tests.fixtures.run_sim import main as simulate

    assert simulate([str(run), "--epochs", "2", "--epoch-seconds", "0.02", "--seed", "4"]) == 0
    env = ssh_home(tmp_path, sshd)

    status = gpurent("status", f"box:{run}", "--json", env=env)
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["health"] == "completed" and summary["run_dir"] == f"box:{run}"

    followed = gpurent("follow", f"box:{run}", "--json", env=env)
    assert followed.returncode == 0, followed.stderr
    events = json_lines(followed.stdout)
    assert log_of(events) == (run / runfiles.LOG_FILE).read_bytes()
    assert any(e["event"] == "connection" and e["state"] == "live" for e in events)

    unknown = gpurent("status", "nobody@127.0.0.1:x", "-p", "1", env=env)
    assert unknown.returncode == 1 and len(unknown.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("command", [["runs"], ["stop"], ["pull", "dest"]])
def test_every_command_turns_errors_into_one_line_and_an_exit_code(
        command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A port nothing listens on: the box cannot be reached (exit 1).
    where = [command[0], "root@127.0.0.1:/runs/x", *command[1:]]
    assert cli_main([*where, "-p", "1", "--json"]) == 1
    out, err = capsys.readouterr()
    assert err.startswith(f"gpurent {command[0]}: ") and err.count("\n") == 1
    assert json.loads(out)["ok"] is False
    # A target that names no host: bad input (exit 2), before any connection.
    assert cli_main([command[0], ":/runs/x", *command[1:]]) == 2
    assert capsys.readouterr().err == f"gpurent {command[0]}: ':/runs/x' names no host\n"
