"""A watcher whose reconnection needs a person (a refused login, a changed host key) stops
retrying, says so once (``blocked``), and tries again only when kicked (r). Real sshd."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from remote.transport.base import LoginRefused
from remote.transport.hostkeys import HostKeyChanged
from remote.watch.events import ConnectionEvent, WatchEvent
from remote.watch.watcher import Watcher
from tests.fixtures.sshd import SSHServer, keygen, write_known_host


class Seen:
    """The watcher's link events and the connection attempts, waited on together."""

    def __init__(self) -> None:
        self.events: list[ConnectionEvent] = []
        self.errors: list[BaseException] = []
        self.cond = threading.Condition()

    def __call__(self, event: WatchEvent) -> None:
        if isinstance(event, ConnectionEvent):
            with self.cond:
                self.events.append(event)
                self.cond.notify_all()

    def states(self) -> list[str]:
        with self.cond:
            return [e.state for e in self.events]

    def wait_blocked(self, count: int) -> None:
        with self.cond:
            ok = self.cond.wait_for(
                lambda: sum(e.state == "blocked" for e in self.events) >= count, 30)
        assert ok, f"never blocked {count}x: {self.states()}"


def _stranger_key(tmp_path: Path) -> Path:
    key = tmp_path / "stranger"
    keygen(key, "stranger")
    return key


@pytest.mark.parametrize("fault", ["login refused", "host key changed"])
def test_a_fault_that_needs_a_person_waits_for_r(sshd: SSHServer, tmp_path: Path,
                                                  fault: str) -> None:
    key = _stranger_key(tmp_path)
    if fault == "login refused":
        options: dict[str, object] = {"identity_files": (str(key),)}
        kind: type = LoginRefused
    else:  # a known_hosts that files another key for the box
        known = tmp_path / "known_hosts"
        write_known_host(known, sshd.host, sshd.port,
                         " ".join(Path(f"{key}.pub").read_text().split()[:2]))
        options, kind = {"known_hosts": str(known)}, HostKeyChanged
    seen = Seen()
    tries: list[BaseException] = []

    def connect():
        try:
            return sshd.connect(**options)
        except Exception as exc:
            tries.append(exc)
            raise

    watcher = Watcher(connect, str(tmp_path / "run"), seen)
    watcher.start()
    try:
        seen.wait_blocked(1)
        assert len(tries) == 1 and isinstance(tries[0], kind)
        blocked = [e for e in seen.events if e.state == "blocked"]
        assert blocked[0].detail == str(tries[0])  # what to do, in the error's words
        assert "reconnecting" not in seen.states()  # not retried with backoff
        watcher.reconnect_now()  # r
        seen.wait_blocked(2)
        assert len(tries) == 2 and "reconnecting" not in seen.states()
    finally:
        watcher.stop()
    assert seen.states()[-1] == "closed"


def test_gpurent_follow_ends_on_a_refused_login_with_what_to_give(
        sshd: SSHServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``gpurent follow`` has no r: it ends (exit 1) with the refusal's whole line."""
    from remote.commands.follow import follow

    key = _stranger_key(tmp_path)
    done: list[int] = []
    thread = threading.Thread(target=lambda: done.append(follow(
        lambda: sshd.connect(identity_files=(str(key),)), str(tmp_path / "run"))),
        daemon=True)
    thread.start()
    thread.join(30)
    assert done == [1], "follow kept retrying a refused login"
    err = capsys.readouterr().err
    assert "[blocked] permission denied" in err and "-i KEY" in err, err
