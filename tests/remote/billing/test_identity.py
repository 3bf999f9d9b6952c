"""The right process and the right instance (issue 14): a pid from a file on the box is
signalled only while it is the recorded process, and an instance is stopped or
destroyed only when the provider's address for it is the box's. Real processes and
signals on this machine and over the sshd test box; provider stand-ins."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote.billing import teardown
from remote.billing.identity import BoxAddress, WrongInstance, box_address
from remote.cli import main as gpurent
from remote.runs.guard import GuardError, disarm_guard, read_guard
from remote.runs.processes import identity_of
from remote.runs.stop import stop_run
from remote.transport.base import RunResult
from remote.transport.local import LocalTransport
from trainer import procid, runfiles
from trainer.providers import get_provider


@dataclass(frozen=True)
class Answer:
    safe: bool
    reason: str


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A live process in its own group, standing for whatever now holds a pid."""
    proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
    yield proc
    proc.kill()
    proc.wait()


def status(run: Path, pid: int, **extra) -> Path:
    runfiles.RunWriter(run).write_status({"state": "running", "pid": pid,
                                          "total_epochs": 3, **extra})
    return run


def iso_ago(seconds: float) -> str:
    return runfiles.utc_now_iso(time.time() - seconds)


# ---------------------------------------------------------------------- process identity


def test_proc_stat_is_read_after_the_last_parenthesis():
    line = b"42 (a) b) (c) S 1 42 42 0 -1 4194304 0 0 0 0 0 0 0 0 20 0 1 0 987654 100 200"
    assert procid.parse_stat(line) == ("S", 987654, 42)
    identity_out = line + b"\nboot-1\nbtime 1700000000\n100\n"
    got = procid.parse_identity(identity_out)
    assert got == procid.ProcessIdentity("S", 987654, 42, "boot-1", 1700000000, 100)
    assert got.started == 1700000000 + 9876.54
    assert procid.parse_identity(b"gone\n-\n-\n-\n") is None
    record = {"pid_start": 987654, "boot_id": "boot-1"}
    assert procid.mismatch(got, record) is None
    assert "tick" in procid.mismatch(got, {"pid_start": 987655})
    assert "rebooted" in procid.mismatch(got, {**record, "boot_id": "boot-0"})
    assert procid.mismatch(got, {}) == "no start time was recorded for it"
    assert procid.mismatch(got, {}, started_at=1700000000 + 9877.0) is None
    assert "reused" in procid.mismatch(got, {}, started_at=1700000000 + 9000.0)
    assert procid.mismatch(procid.ProcessIdentity("Z", 987654), record) == "no such process"


def test_stop_does_not_signal_a_stale_pid(tmp_path, victim):
    box = LocalTransport()
    start = procid.start_ticks(victim.pid)
    run = status(tmp_path / "exp1", victim.pid, pid_start=start + 1)
    result = stop_run(box, str(run), timeout=1)
    assert result.outcome == "not-signalled" and "stale pid" in result.detail
    time.sleep(0.2)
    assert victim.poll() is None  # untouched
    # LibreYOLO writes no start time: a process younger than the run is not the run's.
    status(run, victim.pid, started_at=iso_ago(3600))
    assert stop_run(box, str(run), timeout=1).outcome == "not-signalled"
    assert victim.poll() is None
    assert gpurent(["stop", str(run), "--timeout", "1"]) == 1
    with pytest.raises(ValueError, match="no pid"):
        stop_run(box, str(status(run, 1, pid_start=1)))
    # The recorded process itself is stopped.
    status(run, victim.pid, **procid.identity(victim.pid))
    assert stop_run(box, str(run), timeout=10).outcome == "stopped"
    assert victim.wait(timeout=10) == -signal.SIGTERM


def test_stop_of_a_libreyolo_run_started_before_its_status(tmp_path, victim):
    run = status(tmp_path / "exp1", victim.pid, started_at=iso_ago(0))
    assert stop_run(LocalTransport(), str(run), timeout=10).outcome == "stopped"
    assert victim.wait(timeout=10) == -signal.SIGTERM


def guard_json(run: Path, **fields) -> None:
    run.mkdir(parents=True, exist_ok=True)
    runfiles.atomic_write_json(run / "guard.json", {
        "schema_version": 1, "state": "armed", "armed": True, "when": "done",
        "then": "destroy", "started_at": iso_ago(0), **fields})


def test_disarm_does_not_signal_a_stale_pid(tmp_path, victim):
    box = LocalTransport()
    run = tmp_path / "exp1"
    identity = procid.identity(victim.pid)
    guard_json(run, pid=victim.pid, pgid=victim.pid, pid_start=identity["pid_start"] + 7)
    state = read_guard(box, str(run))
    assert state is not None and not state.alive and not state.watching
    with pytest.raises(GuardError, match="stale pid"):
        disarm_guard(box, str(run))
    for pgid in (1, os.getpgrp()):  # `kill -- -1`, or a group the process is not in
        guard_json(run, pid=victim.pid, pgid=pgid, **identity)
        with pytest.raises(GuardError, match="not in the recorded process group"):
            disarm_guard(box, str(run))
    time.sleep(0.2)
    assert victim.poll() is None
    guard_json(run, pid=victim.pid, pgid=victim.pid, **identity)
    assert read_guard(box, str(run)).watching
    disarm_guard(box, str(run), wait=10)
    assert victim.wait(timeout=10) == -signal.SIGTERM


def test_a_pid_reused_by_a_later_process_is_not_signalled(tmp_path, victim):
    """The recorded process started one tick before the one holding its pid now: neither
    stop nor disarm signals it."""
    box = LocalTransport()
    earlier = {"pid_start": procid.start_ticks(victim.pid) - 1}
    run = status(tmp_path / "exp1", victim.pid, **earlier)
    result = stop_run(box, str(run), timeout=1)
    assert result.outcome == "not-signalled" and "stale pid" in result.detail
    guard_json(run, pid=victim.pid, pgid=victim.pid, **earlier)
    assert not read_guard(box, str(run)).watching
    with pytest.raises(GuardError, match="stale pid"):
        disarm_guard(box, str(run), wait=1)
    # A fatal signal sent before this one would have decided how the process ended.
    victim.kill()
    assert victim.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.parametrize("looks_before", [1, 2])
def test_a_guard_that_stands_down_between_the_look_and_the_signal_is_disarmed(
        tmp_path, victim, looks_before):
    """A guard told to stand down earlier (its SIGTERM pending while it was stopped)
    writes ``disarmed`` and exits while the disarm looks at it (after its first or
    second look at the process): the disarm answers with what it wrote, not "stale pid"
    nor the ``armed`` it read before."""
    run = tmp_path / "exp1"
    guard_json(run, pid=victim.pid, pgid=victim.pid, **procid.identity(victim.pid))

    class Racing(LocalTransport):
        """The guard stands down right after the disarm's first look at its process."""
        looks = 0

        def run(self, command, **kwargs):  # type: ignore[no-untyped-def]
            result = super().run(command, **kwargs)
            if command == procid.identity_command(victim.pid):
                Racing.looks += 1
                if Racing.looks == looks_before:
                    guard_json(run, pid=victim.pid, pgid=victim.pid, state="disarmed",
                               armed=False, **procid.identity(victim.pid))
                    victim.kill()
                    victim.wait()
            return result

    final = disarm_guard(Racing(), str(run), wait=10)
    assert Racing.looks > looks_before  # it looked again before it answered
    assert final is not None and final.state == "disarmed" and not final.watching


def test_over_ssh_the_start_time_is_read_on_the_box_and_pgid_1_is_refused(sshd, victim,
                                                                        monkeypatch):
    with sshd.connect() as box:
        got = identity_of(box, victim.pid)
        assert got is not None and got.start_ticks == procid.start_ticks(victim.pid)
        assert identity_of(box, 2**22 + 12345) is None
        # Commands are recorded, not run: a regression here must not `kill -- -1` for real.
        sent: list[str] = []
        monkeypatch.setattr(box, "run", lambda command, **_kw: sent.append(command) or
                            RunResult(1, b"", b""))
        assert box.signal_group(1, signal.SIGTERM) is False
        assert box.signal_group(0, signal.SIGTERM) is False
        assert sent == []


# ---------------------------------------------------------------------- instance identity


def test_destroy_refuses_an_instance_that_is_not_the_box(sshd, provider_standin):
    vast = provider_standin("vast")
    provider = get_provider("vast", vast.key, vast.base_url)
    elsewhere = vast.add_instance()  # ssh5.vast.ai:31022, direct 203.0.113.9:41022
    with sshd.connect() as box:
        here = box_address("127.0.0.1", sshd.port, box)
        assert here.port == sshd.port and "127.0.0.1" in here.ips
        with pytest.raises(WrongInstance) as err:
            teardown.run_teardown(provider, elsewhere, "destroy", safety=Answer(True, "ok"),
                              box=here, interval=0, timeout=10)
        message = str(err.value)
        assert "ssh5.vast.ai:31022" in message and f"127.0.0.1:{sshd.port}" in message
        assert "\n" not in message
        with pytest.raises(WrongInstance):
            teardown.run_teardown(provider, elsewhere, "stop", box=here, interval=0, timeout=10)
        assert not vast.calls("DELETE") and not vast.calls("PUT")
        # Reached directly (Vast's public_ipaddr and the host port mapped to 22/tcp).
        direct = vast.add_instance(public_ipaddr="127.0.0.1", ports={
            "22/tcp": [{"HostIp": "0.0.0.0", "HostPort": str(sshd.port)}]})
        outcome = teardown.run_teardown(provider, direct, "destroy", safety=Answer(True, "ok"),
                                    box=here, interval=0, timeout=10)
        assert outcome.confirmed and len(vast.calls("DELETE")) == 1
    runpod = provider_standin("runpod")
    pod = runpod.add_instance(ssh={"direct": {"host": "localhost", "port": sshd.port}})
    teardown.run_teardown(get_provider("runpod", runpod.key, runpod.base_url), pod, "destroy",
                      safety=Answer(True, "ok"), box=here, interval=0, timeout=10)
    assert len(runpod.calls("DELETE")) == 1  # the name resolves to the box's address


def test_a_box_matching_only_in_port_or_only_in_host_is_refused(lambda_standin):
    """Host and port must both match: every Lambda instance is at port 22, so a port
    alone names any of them, and a host alone names another SSH server on it."""
    lam = get_provider("lambda", lambda_standin.key, lambda_standin.base_url)
    other_host = lambda_standin.add_instance(ip="198.51.100.8")  # port 22, like the box
    here = BoxAddress("198.51.100.7", 22, frozenset({"198.51.100.7"}))
    with pytest.raises(WrongInstance, match="198.51.100.8:22"):
        teardown.run_teardown(lam, other_host, "destroy", safety=Answer(True, "ok"), box=here,
                          interval=0, timeout=10)
    same_host = lambda_standin.add_instance(ip="198.51.100.7")  # at 22; the box at 2222
    with pytest.raises(WrongInstance, match="198.51.100.7:22"):
        teardown.run_teardown(lam, same_host, "destroy", safety=Answer(True, "ok"),
                          box=BoxAddress("198.51.100.7", 2222, here.ips),
                          interval=0, timeout=10)
    assert not lambda_standin.calls("POST")
    outcome = teardown.run_teardown(lam, same_host, "destroy", safety=Answer(True, "ok"),
                                box=here, interval=0, timeout=10)
    assert outcome.confirmed and len(lambda_standin.calls("POST", "terminate")) == 1


def test_cli_shows_both_addresses_and_acts_on_nothing(tmp_path, vast_standin, monkeypatch,
                                                      capsys):
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ssh/config: the host is as typed
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance()
    args = ["--provider", "vast", "--instance", iid, "--base-url", vast_standin.base_url,
            "--interval", "0", "--yes"]
    assert gpurent(["instance", "root@203.0.113.7", "stop", *args]) == 1
    err = capsys.readouterr().err
    assert "203.0.113.9:41022, ssh5.vast.ai:31022" in err  # direct and proxy
    assert "203.0.113.7:22" in err and err.count("\n") == 1
    monkeypatch.setenv("CONTAINER_ID", "999")  # on the box itself: another instance
    assert gpurent(["instance", "local", "stop", *args]) == 1
    assert "this machine is instance 999" in capsys.readouterr().err
    assert not vast_standin.calls("PUT") and not vast_standin.calls("DELETE")
    monkeypatch.setenv("CONTAINER_ID", iid)
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert gpurent(["instance", "local", "stop", *args, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["outcome"]["confirmed"]
