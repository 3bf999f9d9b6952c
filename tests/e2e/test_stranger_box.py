"""A rented box is a stranger's machine (issue 29): what a box reports about itself (its
instance id) is a claim. A hostile box is the real sshd fixture whose sessions' environment
names the user's *other* instance; the provider stand-ins hold several instances of one
account, one of them stopped.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from remote.cli import main as gpurent
from remote.config import hub_repos
from remote.runs import launch
from remote.runs.guard import GuardError, arm_guard, disarm_guard, guard_command
from remote.runs.launch import launch_run, make_spec
from remote.transport.base import ReplyTooLarge, TransportError
from remote.transport.local import LocalTransport
from remote.weights.pull import box_run_dir
from remote.weights.push import push_from_box
from remote.weights.safety import weights_safety
from tests.fixtures.hub_standin import VALID_TOKEN, record_push
from tests.fixtures.paths import ROOT
from tests.fixtures.providers_standin import ProviderStandin
from tests.fixtures.sshd import SSHServer, make_server
from tests.fixtures.watch_log import wait_until
from trainer import procid, runfiles
from trainer.engine.command import TOKEN_STDIN_ENV
from trainer.health import local_pid_alive
from trainer.hub.ledger import read_ledger
from trainer.hub.safe import verified_safety

# ---------------------------------------------------------------------- instance identity


@pytest.fixture
def box_claiming(tmp_path: Path) -> Iterator[Callable[..., SSHServer]]:
    """``box_claiming(RUNPOD_POD_ID="...")``: a real sshd whose sessions get that
    environment (as the box's root can set it), and a laptop HOME that reaches it."""
    made: list[SSHServer] = []

    def make(**env: str) -> SSHServer:
        server = make_server(tmp_path / f"box{len(made)}", env=env)
        made.append(server)
        return server

    yield make
    for server in made:
        server.sshd.stop()


@pytest.fixture
def laptop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[[SSHServer], list[str]]:
    """``laptop(server)``: this process as a laptop whose ssh config reaches ``server``
    (its key, its known_hosts); returns the ``HOST -p PORT`` arguments."""
    for var in ("VAST_API_KEY", "RUNPOD_API_KEY", "LAMBDA_API_KEY", "CONTAINER_ID",
                "VAST_CONTAINERLABEL", "RUNPOD_POD_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("SSH_AUTH_SOCK", "")

    def reach(server: SSHServer) -> list[str]:
        home = tmp_path / "laptop"
        (home / ".ssh").mkdir(parents=True, exist_ok=True)
        (home / ".ssh" / "config").write_text(
            f"Host *\n  IdentityFile {server.key_path}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {server.known_hosts}\n")
        monkeypatch.setenv("HOME", str(home))
        return [f"{server.user}@{server.host}", "-p", str(server.port)]

    return reach


#: Instance ids of one account on each stand-in: the box's own, a stopped one, one
#: running elsewhere.
IDS = {"runpod": ("podown29", "podstopped29", "podelsewhere29"),
       "vast": ("5290001", "5290002", "5290003")}


def account(standin: ProviderStandin, box: SSHServer,
            monkeypatch: pytest.MonkeyPatch) -> tuple[str, str, str]:
    """Three instances of one account (``IDS``): the box's own (running, at the box's
    address), another one stopped (no address), and a third running elsewhere."""
    monkeypatch.setenv(f"{standin.provider.upper()}_API_KEY", standin.key)
    own, stopped, elsewhere = IDS[standin.provider]
    standin.add_instance(own)
    standin.set_address(own, box.host, box.port, box.user)
    if standin.provider == "runpod":
        standin.add_instance(stopped, status="EXITED", cost=0, ssh={})
    else:
        standin.add_instance(stopped, actual_status="stopped", intended_status="stopped",
                             ports={}, ssh_host=None, ssh_port=None)
    standin.add_instance(elsewhere)
    return own, stopped, elsewhere


def instance(where: list[str], action: str, standin: ProviderStandin, *extra: str) -> int:
    return gpurent(["instance", where[0], action, *where[1:], "--provider", standin.provider,
                    "--base-url", standin.base_url, "--interval", "0", "--timeout", "10",
                    "--yes", *extra])


def acted(standin: ProviderStandin) -> list[str]:
    """The paths of every request that changed an instance."""
    return [r.path for r in standin.requests if r.method in ("PUT", "POST", "DELETE")]


def test_a_box_claiming_the_users_stopped_pod_cannot_get_it_destroyed_or_stopped(
        box_claiming, laptop, runpod_standin, monkeypatch, capsys):
    """The box says RUNPOD_POD_ID=<the user's other, stopped pod>; RunPod gives that pod
    no address: nothing ties it to the box, so destroy and stop are refused, with both
    sides shown, before the box's weights are even looked at."""
    _, stopped, elsewhere = IDS["runpod"]
    box = box_claiming(RUNPOD_POD_ID=stopped)
    account(runpod_standin, box, monkeypatch)
    where = laptop(box)
    run = Path(box.home) / "runs" / "exp"
    (run / "weights").mkdir(parents=True)
    for action in ("destroy", "stop"):
        assert instance(where, action, runpod_standin, "--run", str(run)) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1, err
        assert f"refusing to {action} RunPod instance {stopped}" in err
        assert f"{box.host}:{box.port}" in err and "gives no address" in err
        assert f"--instance {stopped}" in err
    assert acted(runpod_standin) == []
    assert runpod_standin.instances[stopped]["status"] == "EXITED"


def test_a_box_claiming_a_pod_elsewhere_is_shown_both_addresses(
        box_claiming, laptop, runpod_standin, monkeypatch, capsys):
    _, _, elsewhere = IDS["runpod"]
    box = box_claiming(RUNPOD_POD_ID=elsewhere)
    account(runpod_standin, box, monkeypatch)
    assert instance(laptop(box), "destroy", runpod_standin) == 1
    err = capsys.readouterr().err
    assert f"the box says it is instance {elsewhere}" in err and err.count("\n") == 1
    assert "203.0.113.7:41022" in err and f"{box.host}:{box.port}" in err
    assert acted(runpod_standin) == []


def test_a_box_claiming_the_users_stopped_vast_instance_cannot_get_it_started(
        box_claiming, laptop, vast_standin, monkeypatch, capsys):
    """On Vast a box claiming CONTAINER_ID=<other> made `start --yes` start the user's
    other stopped instance; now an id from the box is never started unless the provider
    ties it to the box, and a stopped instance has no address to be tied by."""
    _, stopped, _ = IDS["vast"]
    box = box_claiming(CONTAINER_ID=stopped)
    account(vast_standin, box, monkeypatch)
    where = laptop(box)
    assert instance(where, "start", vast_standin) == 1
    err = capsys.readouterr().err
    assert f"refusing to start Vast.ai instance {stopped}" in err and err.count("\n") == 1
    assert acted(vast_standin) == []
    # The user names the instance: it is shown, then started.
    assert instance(where, "start", vast_standin, "--instance", stopped) == 0
    out = capsys.readouterr().out
    assert f"Vast.ai instance {stopped} (given by --instance) is stopped" in out
    assert acted(vast_standin) == [f"/api/v0/instances/{stopped}/"]


def test_an_honest_box_is_still_stopped_by_its_own_claim(box_claiming, laptop, runpod_standin,
                                                         monkeypatch, capsys):
    """The box's claim names the pod the provider puts at the box's address: acted on."""
    own, _, _ = IDS["runpod"]
    box = box_claiming(RUNPOD_POD_ID=own)
    account(runpod_standin, box, monkeypatch)
    assert instance(laptop(box), "stop", runpod_standin, "--json") == 0
    out = json.loads(capsys.readouterr().out)
    assert out["source"] == "box" and out["instance"] == own
    assert out["outcome"]["confirmed"]
    assert acted(runpod_standin) == [f"/v2/pods/{own}/action"]


# ---------------------------------------------------------------------- the account key


@pytest.fixture
def trainer() -> Iterator[subprocess.Popen[bytes]]:
    """A live process standing for the run's trainer: the guard keeps watching."""
    proc = subprocess.Popen(["sleep", "600"])
    yield proc
    proc.kill()
    proc.wait()


def live_run(run: Path, pid: int) -> Path:
    runfiles.RunWriter(run).write_status({"state": "running", "pid": pid, "total_epochs": 3,
                                          **procid.identity(pid)})
    return run


def guard_process(run: Path) -> tuple[int, bytes, bytes, str]:
    """The armed guard's pid, its environment, its argv and what its stdin is."""
    pid = json.loads((run / "guard.json").read_text())["pid"]
    environ = Path(f"/proc/{pid}/environ").read_bytes()
    argv = Path(f"/proc/{pid}/cmdline").read_bytes()
    return pid, environ, argv, os.readlink(f"/proc/{pid}/fd/0")


def test_the_guard_acts_with_the_instances_own_key_and_the_account_key_stays_here(
        box_claiming, laptop, runpod_standin, trainer, monkeypatch, capsys):
    """Armed as the TUI and `gpurent guard arm --provider` arm it, the guard gets no
    account key (not in its environment, argv or stdin) and acts with the pod's own
    RUNPOD_API_KEY; `--send-account-key` hands it the account key, with a warning."""
    own = IDS["runpod"][0]
    runpod_standin.add_instance(own)
    pod_key = runpod_standin.instance_key(own)
    box = box_claiming(RUNPOD_POD_ID=own, RUNPOD_API_KEY=pod_key)
    runpod_standin.set_address(own, box.host, box.port, box.user)
    where = laptop(box)
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_standin.key)  # the laptop's account key
    account_key = runpod_standin.key.encode()
    run = live_run(Path(box.home) / "runs" / "exp", trainer.pid)
    arm = ["guard", f"{where[0]}:{run}", "arm", *where[1:], "--provider", "runpod",
           "--instance", own, "--base-url", runpod_standin.base_url, "--poll", "0.1",
           "--python", "/usr/bin/python3", "--json"]
    assert gpurent(arm) == 0, capsys.readouterr().err
    assert "WARNING" not in capsys.readouterr().err
    pid, environ, argv, stdin = guard_process(run)
    assert account_key not in environ and account_key not in argv
    assert b"--key-stdin" not in argv and stdin == "/dev/null"  # handed nothing
    log = (run / "guard.log").read_text()
    assert "acting with this instance's own key (RUNPOD_API_KEY)" in log
    assert runpod_standin.requests and {r.scope for r in runpod_standin.requests} == {
        "instance"}
    with box.connect() as transport:
        disarm_guard(transport, str(run))
        # The TUI's call: the key it resolves is passed, and stays on the laptop.
        arm_guard(transport, str(run), "done", "stop", None, "runpod", own,
                  runpod_standin.key, base_url=runpod_standin.base_url, poll=0.1)
        _, environ, argv, stdin = guard_process(run)
        assert b"--key-stdin" not in argv and stdin == "/dev/null"
        disarm_guard(transport, str(run))
    assert {r.scope for r in runpod_standin.requests} == {"instance"}

    # Asked by name: sent on stdin, after a one-line warning.
    del runpod_standin.requests[:]
    assert gpurent([*arm, "--send-account-key"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("WARNING: sending the runpod account key to the box")
    assert err.count("\n") == 1 and "host" in err
    _, environ, argv, stdin = guard_process(run)
    assert b"--key-stdin" in argv and account_key not in argv + environ
    assert {r.scope for r in runpod_standin.requests} == {"account"}
    assert "acting with the account key sent from the laptop" in (
        run / "guard.log").read_text()
    with box.connect() as transport:
        disarm_guard(transport, str(run))
    for name in ("guard.log", "guard.json", "guard.out"):
        assert account_key not in (run / name).read_bytes()
    # An account key is never sent for an instance only the box names.
    assert gpurent([a for a in arm if a not in ("--instance", own)] +
                   ["--send-account-key"]) == 2
    assert "needs --provider and --instance" in capsys.readouterr().err


def test_a_lambda_guard_gets_no_key_and_says_the_laptop_must_end_the_billing(
        tmp_path, lambda_standin, trainer):
    iid = lambda_standin.add_instance()
    run = live_run(tmp_path / "exp", trainer.pid)
    with pytest.raises(GuardError) as err:
        arm_guard(LocalTransport(), str(run), "done", "destroy", None, "lambda", iid,
                  lambda_standin.key, base_url=lambda_standin.base_url)
    assert "end it from the laptop" in str(err.value) and "\n" not in str(err.value)
    assert lambda_standin.requests == []


# ---------------------------------------------------------------------- safe on the Hub


def finished_run(run: Path) -> Path:
    """A completed run whose best.pt is the file at stake."""
    runfiles.RunWriter(run).write_status({"state": "completed", "total_epochs": 3,
                                          "completed_epochs": 3, "best_epoch": 2})
    runfiles.atomic_write_bytes(run / "weights" / "best.pt", os.urandom(4096))
    return run


@pytest.fixture
def hub_laptop(tmp_path, hub_standin, vast_standin, monkeypatch):
    """A laptop whose Hub is the stand-in (with the user's token) and a Vast key."""
    for var in ("CONTAINER_ID", "VAST_CONTAINERLABEL", "RUNPOD_POD_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")  # the stand-in speaks LFS
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    return tmp_path


#: What pushing a finished run sends of what it holds: its weights and its end.
END = ("best.pt", "status.json")


def destroy_local(standin: ProviderStandin, iid: str, run: Path, *extra: str) -> int:
    return gpurent(["instance", "local", "destroy", "--provider", "vast", "--instance", iid,
                    "--base-url", standin.base_url, "--interval", "0", "--timeout", "10",
                    "--run", str(run), "--yes", *extra])


def test_a_copy_in_a_repo_the_box_names_does_not_make_the_weights_safe(
        hub_laptop, hub_standin, vast_standin, capsys):
    """The box uploaded best.pt to evil/copy (the Hub holds those very bytes there) and
    named it in hub.json: not the user's repository, so not safe; a repository the
    user configured (the config file, a name on the command line, or a push from this
    laptop) is."""
    iid = vast_standin.add_instance()
    run = finished_run(hub_laptop / "proj" / "exp")
    record_push(hub_standin, run, END, repo="evil/copy")
    assert destroy_local(vast_standin, iid, run) == 1
    err = capsys.readouterr().err
    assert "pushed only to evil/copy, which is not one of your Hub repositories" in err
    assert len(err.splitlines()) == 3 and not vast_standin.calls("DELETE")  # why, file, fix
    assert not hub_standin.routes("paths_info")  # not even asked about
    # A repository the user names counts (asked of the Hub with the user's token).
    safety = weights_safety(LocalTransport(), str(run), repos=["evil/copy"])
    assert safety.safe and "evil/copy" in safety.reason
    # The box also pushed to a repository the user has: once the user says so, safe.
    record_push(hub_standin, run, END, repo="me/detector")
    assert destroy_local(vast_standin, iid, run) == 1
    assert "pushed only to me/detector, evil/copy" in capsys.readouterr().err
    config = hub_laptop / "xdg" / "gpurent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[hub]\nrepos = ["me/detector"]\n')
    config.chmod(0o600)
    assert destroy_local(vast_standin, iid, run, "--json") == 0
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["safe"] and "me/detector" in gate["reason"]
    assert len(vast_standin.calls("DELETE")) == 1


def test_a_push_from_this_laptop_makes_its_repo_the_users(hub_laptop, hub_standin):
    run = finished_run(hub_laptop / "proj" / "exp")
    box = LocalTransport()
    push_from_box(box, str(run), "me/pushed", VALID_TOKEN)
    assert weights_safety(box, str(run)).safe
    # The box's guard gets the user's repositories, and nothing else counts there.
    assert verified_safety(run, repos=["me/pushed"])["safe"]
    record_push(hub_standin, run, repo="evil/copy")  # a newer claim, in another repo
    assert verified_safety(run, repos=["me/pushed"])["safe"]
    assert not verified_safety(run, repos=[])["safe"]
    assert "--hub-repo me/pushed" in guard_command(box, str(run), "done", "stop",
                                                   hub_repos=hub_repos())


# ---------------------------------------------------------------------- endless replies


def test_an_endless_reply_is_cut_at_its_cap_and_the_writer_ends(sshd):
    """A box answering without end (`yes`) gets a one-line ReplyTooLarge once the cap is
    passed: the answer comes although the writer never stops (so it was not read to its
    end), and the writer then dies of the closed channel. Each flood has a connection of
    its own: closing a channel in the middle of one now and then takes the connection
    down with it (paramiko; see the session note), which is not what is tested here."""
    pidfile = Path(sshd.home) / "endless.pid"
    pidfile.unlink(missing_ok=True)
    for command, what in ((f"echo $$ > {pidfile}; exec yes gpurent", "output"),
                          (f"echo $$ > {pidfile}; exec yes gpurent >&2", "error output")):
        with sshd.connect() as box, pytest.raises(ReplyTooLarge) as err:
            box.run(command, max_bytes=1 << 20, timeout=600)
        message = str(err.value)
        assert f"more than 1,048,576 bytes of {what}" in message and "\n" not in message
        assert isinstance(err.value, TransportError) and not isinstance(err.value,
                                                                         TimeoutError)
        pid = int(pidfile.read_text())
        assert wait_until(lambda pid=pid: not local_pid_alive(pid), 30), "the writer lives"
    # A `pwd -P` answered by 1.5 GB: refused after its small cap, nothing held.
    with sshd.connect() as box, pytest.raises(ReplyTooLarge, match="more than 65,536 bytes"):
        box_run_dir(_Endless(box), ".")


class _Endless:
    """``box`` whose ``cd DIR && pwd -P`` answers without end (as a hostile box's does)."""

    def __init__(self, box: Any) -> None:
        self.box, self.label = box, box.label

    def run(self, command: str, **options: Any) -> Any:
        return self.box.run("exec yes /", **options)


# ---------------------------------------------------------------------- known_hosts

GPURENT = Path(sys.executable).with_name("gpurent")


def status_with(known: Path, sshd: SSHServer, run: Path,
                tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``gpurent status`` of ``run`` on the test box, its host keys read from ``known``."""
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {sshd.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {known}\n")
    env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg")}
    # The timeout only ends a hang (the old /dev/zero read); nothing asserts on time.
    return subprocess.run([str(GPURENT), "status", f"{sshd.user}@{sshd.host}:{run}", "-p",
                           str(sshd.port), "--json"], capture_output=True, text=True,
                          env=env, timeout=120)


def test_a_truncated_known_hosts_line_is_skipped_with_one_warning(sshd, tmp_path):
    run = Path(sshd.home) / "kh" / "exp"
    runfiles.RunWriter(run).write_status({"state": "running", "pid": 1, "total_epochs": 3})
    known = tmp_path / "known_hosts"
    name = f"[{sshd.host}]:{sshd.port}"
    known.write_text(f"other.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI\n"  # cut short
                     f"# a comment\n"
                     f"[other.example]:2222 ssh-rsa\n"  # a field missing
                     f"{name} {sshd.host_key_line}\n")
    done = status_with(known, sshd, run, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["run_dir"].endswith(str(run))
    lines = done.stderr.splitlines()
    assert "Traceback" not in done.stderr and len(lines) == 2, done.stderr
    assert lines[0].startswith(f"gpurent: warning: {known} line 1 cannot be read")
    assert lines[1].startswith(f"gpurent: warning: {known} line 3 cannot be read")


@pytest.mark.parametrize("odd", ["directory", "/dev/zero", "huge"])
def test_a_known_hosts_that_is_no_file_is_refused_in_one_line(sshd, tmp_path, odd):
    known = tmp_path / "known_hosts"
    if odd == "directory":
        known.mkdir()
    elif odd == "huge":
        with open(known, "wb") as fh:  # sparse: past the cap without writing it
            fh.truncate(64 << 20)
    else:
        known.symlink_to(odd)
    done = status_with(known, sshd, Path(sshd.home) / "kh" / "none", tmp_path)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert done.stderr.count("\n") == 1, done.stderr
    assert str(known) in done.stderr and "move it aside" in done.stderr


# ---------------------------------------------------------------------- the Hub token


def tree(pid: int) -> list[int]:
    """``pid`` and every live process below it."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[1])
    found, todo = [], [pid]
    while todo:
        here = todo.pop()
        found.append(here)
        todo += [child for child, parent in parents.items() if parent == here]
    return found


def test_the_hub_token_of_hub_is_in_no_process_environment(hub_standin, shapes_data,
                                                            tmp_path, monkeypatch):
    """`gpurent launch ... hub=ORG/NAME` gives the token to our trainer on its stdin: its
    uploader pushes with it, and neither the trainer nor its loader worker has it in its
    environment (it used to be exported to the trainer for the whole run)."""
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # no token store either
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    spec = make_spec("trainer", str(tmp_path / "runs"), "exp", {
        "model": "n", "imgsz": "64", "workers": "1", "seed": "0", "batch": "8",
        "epochs": "3", "data": str(shapes_data), "hub": "org/tok"})
    launched = launch_run(LocalTransport(), spec, stdin=VALID_TOKEN.encode())
    run = tmp_path / "runs" / "exp"
    assert wait_until(lambda: runfiles.read_status(run).get("completed_epochs"), 300), \
        (run / "console.log").read_text()[-2000:]
    processes = tree(launched.pid)
    assert len(processes) >= 2  # the trainer and its loader worker
    for pid in processes:
        with contextlib.suppress(OSError):
            assert VALID_TOKEN.encode() not in Path(f"/proc/{pid}/environ").read_bytes()
    assert wait_until(lambda: runfiles.read_status(run).get("state") == "completed", 300)
    assert hub_standin.repo("org/tok").commits  # pushed with the token from stdin
    # The ledger is written once the push's commit came back (after the status's end).
    assert wait_until(lambda: read_ledger(run), 120)
    assert {e["repo"] for e in read_ledger(run)} == {"org/tok"}
    assert TOKEN_STDIN_ENV == launch.TOKEN_STDIN_ENV
