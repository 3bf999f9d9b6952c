"""The laptop's ``HF_ENDPOINT`` is the Hub the box talks to (issue 37): a push, a dataset
stage and a restore run on a real sshd box whose own environment points at a Hub that
is not there, while this laptop's points at the stand-in, and land in the stand-in; with
none set here the box's own is used. Every Hub error names the host it tried. An
endpoint that holds a credential never leaves the laptop."""

from __future__ import annotations

import io
import json
import shlex
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.link import ask_tool, laptop_endpoint, trainer_command
from remote.runs.guard import guard_command
from remote.runs.launch import build_command, make_spec
from remote.transport.local import LocalTransport
from remote.transport.ssh import SSHTransport
from remote.weights.push import PushFailed, push_from_box
from tests.fixtures.hub_standin import (
    VALID_TOKEN,
    HubStandin,
    hub_env,
    write_checkpoint,
    write_run,
)
from tests.fixtures.paths import ROOT
from tests.fixtures.sshd import SSHServer, free_port, make_server
from trainer.hub.client import verify_pushed

SECRET = (VALID_TOKEN + "\n").encode()


@pytest.fixture
def elsewhere(tmp_path: Path) -> Iterator[tuple[SSHServer, str]]:
    """A box (real sshd) whose sessions have their own ``HF_ENDPOINT``: a port where
    nothing listens; and that port's ``host:port``."""
    dead = f"127.0.0.1:{free_port()}"
    server = make_server(tmp_path / "box", env={
        "HF_ENDPOINT": f"http://{dead}", "HF_HUB_DISABLE_XET": "1",
        "HF_HOME": str(tmp_path / "box" / "hf")})
    try:
        yield server, dead
    finally:
        server.sshd.stop()


def link(server: SSHServer) -> SSHTransport:
    """A connection to ``server`` that runs this checkout's trainer."""
    transport = server.connect()
    transport.trainer_prefix = f"PYTHONPATH={shlex.quote(str(ROOT))} " \
                               f"{shlex.quote(sys.executable)}"
    return transport


def test_the_laptop_s_endpoint_wins_over_the_box_s(
        hub_standin: HubStandin, elsewhere: tuple[SSHServer, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    server, dead = elsewhere
    run = Path(server.home) / "runs" / "exp"
    write_run(run)
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url + "/")
    with link(server) as box:
        result = push_from_box(box, str(run), "org/m", VALID_TOKEN, ["best.pt"])
    assert result["commit"] == hub_standin.repo("org/m").head
    assert hub_standin.routes("commit")[0].has_auth
    # None set here: the box's own is used, and its failure names that host.
    monkeypatch.delenv("HF_ENDPOINT")
    with link(server) as box, pytest.raises(PushFailed) as failed:
        push_from_box(box, str(run), "org/n", VALID_TOKEN, ["best.pt"])
    assert f"push to org/n failed: {dead}: cannot connect: Connection refused" in \
        str(failed.value), failed.value
    assert ("model", "org/n") not in hub_standin.repos


def test_stage_and_restore_on_the_box_use_the_laptop_s_endpoint(
        hub_standin: HubStandin, elsewhere: tuple[SSHServer, str], tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The words ``gpurent resume`` sends (``remote.resume.move``)."""
    server, _dead = elsewhere
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:
        text = b"path: .\ntrain: images\nnames: [box]\n"
        member = tarfile.TarInfo("shapes/data.yaml")
        member.size = len(text)
        tar.addfile(member, io.BytesIO(text))
    hub_standin.add_file("org/data", "shapes.tar", archive.getvalue(), private=True)
    source = tmp_path / "source"
    sha = write_checkpoint(source / "weights" / "last.pt", 4096)
    data, run = Path(server.home) / "data", Path(server.home) / "runs" / "exp"
    status = {"state": "stopped", "completed_epochs": 2, "total_epochs": 4,
              "save_dir": str(run)}  # the run's own status, pushed with its last.pt
    hub_standin.add_files("org/run", {
        "last.pt": (source / "weights" / "last.pt").read_bytes(),
        "status.json": json.dumps(status).encode()})
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    with link(server) as box:
        staged = ask_tool(box, ["stage", "org/data", "shapes.tar", "--dest", str(data),
                                "--token-stdin", "--json"], stdin=SECRET)
        restored = ask_tool(box, ["restore", "org/run", "--run-dir", str(run),
                                  "--token-stdin", "--json"], stdin=SECRET)
    assert staged.ok, staged.result.stderr
    assert staged.report is not None and staged.report["data_yaml"] == \
        str(data / "shapes" / "data.yaml")
    assert restored.ok, restored.result.stderr
    assert restored.report is not None and restored.report["files"][0]["sha256"] == sha
    assert (run / "weights" / "last.pt").is_file()


def test_an_unreachable_endpoint_is_named(hub_standin: HubStandin, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """On the box (a push, a stage) and on the laptop (its own check of a push)."""
    run = tmp_path / "run1"
    write_run(run)
    for key, value in hub_env(hub_standin, tmp_path / "hf").items():
        monkeypatch.setenv(key, value)
    dead = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv("HF_ENDPOINT", f"http://{dead}")
    with pytest.raises(PushFailed) as failed:
        push_from_box(LocalTransport(), str(run), "org/m", VALID_TOKEN)
    assert str(failed.value) == f"push to org/m failed: {dead}: cannot connect: " \
                                "Connection refused"
    staged = ask_tool(LocalTransport(), ["stage", "org/data", "x.tar", "--dest",
                                         str(tmp_path / "data"), "--json"])
    assert staged.report is not None and staged.report["error"] == (
        f"cannot find x.tar in dataset org/data: {dead}: cannot connect: Connection refused")
    entry = {"repo": "org/m", "commit": "a" * 40, "path_in_repo": "best.pt"}
    assert verify_pushed([entry], "0" * 64, repos=["org/m"]).said == (
        f"cannot verify (org/m at {'a' * 12}): {dead}: cannot connect: Connection refused")
    # A Hub that answers with an error: its host, the status, the request.
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    hub_standin.fail("create")
    with pytest.raises(PushFailed) as failed:
        push_from_box(LocalTransport(), str(run), "org/m", VALID_TOKEN)
    assert str(failed.value).startswith(
        f"push to org/m failed: 127.0.0.1:{hub_standin.port}: HTTP 500: Internal Error"), \
        failed.value
    assert str(failed.value).endswith("(POST /api/repos/create)")


def test_every_hub_command_carries_the_laptop_s_endpoint(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch (our trainer with ``hub=``; LibreYOLO's push watcher) and the guard
    start on the box with it; a tool that never talks to the Hub does not."""
    box = LocalTransport()
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.example.org/mirror/")
    carried = "HF_ENDPOINT=https://hub.example.org/mirror "
    ours = make_spec("trainer", "runs", "exp", {"hub": "org/exp"})
    assert f"env GPURENT_HUB_TOKEN_STDIN=1 {carried}{box.trainer_prefix} -m trainer " \
           "train " in build_command(ours, box, read_secret=True)
    libre = make_spec("libreyolo", "runs", "ly", {"hub": "org/ly"})
    assert f"setsid nohup env {carried}{box.trainer_prefix} -m trainer push --watch " in \
        build_command(libre, box, read_secret=True)
    assert guard_command(box, "/runs/exp", "done", "stop").startswith(carried)
    assert trainer_command(box, ["runs", "/runs"]) == \
        f"{box.trainer_prefix} -m trainer runs /runs"
    plain = make_spec("trainer", "runs", "exp", {"epochs": "3"})
    assert "HF_ENDPOINT" not in build_command(plain, box, read_secret=True)
    monkeypatch.delenv("HF_ENDPOINT")
    assert "HF_ENDPOINT" not in build_command(ours, box, read_secret=True)


@pytest.mark.parametrize("endpoint", [
    "https://me:s3cret@hub.example.org", "https://hub.example.org/?token=s3cret",
    "https://hub.example.org/#s3cret", "ftp://hub.example.org/s3cret", "hub.s3cret.org",
    "https://hub.example.org/ s3cret",
])
def test_an_endpoint_that_may_hold_a_credential_never_leaves_the_laptop(
        hub_standin: HubStandin, endpoint: str, tmp_path: Path) -> None:
    """Refused before anything is asked, and never repeated."""
    run = tmp_path / "run1"
    write_run(run)
    env = hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN, HF_ENDPOINT=endpoint)
    done = subprocess.run([sys.executable, "-m", "remote.cli", "push", f"local:{run}",
                           "--repo", "org/m", "--json"], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("gpurent push: HF_ENDPOINT "), line
    assert "s3cret" not in done.stderr + done.stdout
    assert json.loads(done.stdout)["ok"] is False
    assert not (run / "hub.json").exists() and hub_standin.requests == []


def test_the_endpoint_sent_is_the_plain_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    assert laptop_endpoint() is None
    monkeypatch.setenv("HF_ENDPOINT", " http://[::1]:8080/hf/ ")
    assert laptop_endpoint() == "http://[::1]:8080/hf"

