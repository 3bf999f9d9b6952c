"""``remote.transport.ssh``: connect and every Transport method against a real OpenSSH sshd."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import signal
from pathlib import Path

import pytest

from remote.transport.base import TransportError
from remote.transport.sshconfig import parse_target
from tests.fixtures.sshd import SSHServer
from tests.fixtures.watch_log import wait_until


@pytest.fixture
def box(sshd: SSHServer):
    """A connected transport, closed after the test."""
    transport = sshd.connect()
    yield transport
    transport.close()


@pytest.fixture
def box_dir(sshd: SSHServer, request: pytest.FixtureRequest) -> Path:
    """A fresh directory under the box user's home."""
    path = Path(sshd.home) / "t" / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path




def test_run_returns_rc_stdout_stderr_and_feeds_stdin(box) -> None:
    result = box.run("cat; echo oops >&2; exit 7", stdin=b"abc\x00\xff")
    assert (result.rc, result.stdout, result.stderr) == (7, b"abc\x00\xff", b"oops\n")
    assert not result.ok
    big = box.run("head -c 3000000 /dev/zero")
    assert big.ok and len(big.stdout) == 3_000_000


def test_run_times_out_and_the_connection_stays_usable(box) -> None:
    with pytest.raises(TransportError, match="timed out"):
        box.run("sleep 30", timeout=1)
    assert box.run("echo still").stdout == b"still\n"


def test_box_environment_is_the_fixtures(box, sshd: SSHServer) -> None:
    assert box.home == sshd.home
    assert box.expand("~/x") == f"{sshd.home}/x"
    assert box.label == f"{sshd.user}@127.0.0.1:{sshd.port}"


def test_spawn_detached_survives_the_connection_and_gets_stdin(sshd, box_dir) -> None:
    transport = sshd.connect()
    log = box_dir / "out.log"
    secret = "hf_spawnsecret_1234567890"
    pid = transport.spawn_detached(
        "IFS= read -r TOKEN; echo \"len=${#TOKEN}\"; sleep 30", cwd=str(box_dir),
        log_path=str(log), stdin=f"{secret}\n".encode())
    try:
        def group_and_session() -> tuple[int, int]:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            return int(fields[2]), int(fields[3])

        # $! is printed right after the fork; setsid runs a moment later.
        assert wait_until(lambda: group_and_session() == (pid, pid))
        transport.close()
        assert wait_until(lambda: log.exists() and b"len=25" in log.read_bytes())
        again = sshd.connect()
        assert again.pid_alive(pid)
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                assert secret.encode() not in (proc / "cmdline").read_bytes()
            except OSError:
                continue
        assert again.signal_group(pid, signal.SIGTERM)
        assert wait_until(lambda: not again.pid_alive(pid))
        again.close()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)


def test_spawn_detached_without_stdin_and_a_bad_cwd(box, box_dir) -> None:
    log = box_dir / "o.log"
    pid = box.spawn_detached("echo started; exit 0", cwd=str(box_dir), log_path=str(log))
    assert pid > 1
    assert wait_until(lambda: log.exists() and log.read_bytes() == b"started\n")
    assert wait_until(lambda: not box.pid_alive(pid))
    with pytest.raises(TransportError, match="could not start"):
        box.spawn_detached("true", cwd=str(box_dir / "missing"), log_path=str(log))


def test_pid_alive_and_signal_group_for_missing_pids(box) -> None:
    assert box.pid_alive(os.getpid())
    assert not box.pid_alive(0)
    assert not box.pid_alive(2 ** 22 + 12345)
    assert not box.signal_group(2 ** 22 + 12345, signal.SIGTERM)


def test_stream_yields_lines_and_times_out_on_silence(box) -> None:
    stream = box.stream("printf 'a\\nb\\n'; sleep 0.3; printf 'c\\nno-newline'")
    assert list(stream.lines(timeout=10)) == [b"a", b"b", b"c", b"no-newline"]
    stream.close()
    silent = box.stream("echo first; sleep 30")
    lines = silent.lines(timeout=1.0)
    assert next(lines) == b"first"
    with pytest.raises(TimeoutError):
        next(lines)
    silent.close()
    silent.close()


def test_files_stat_read_listdir(box, box_dir) -> None:
    data = os.urandom(200_000)
    (box_dir / "f.bin").write_bytes(data)
    st = box.stat(str(box_dir / "f.bin"))
    assert st is not None and st.size == len(data)
    assert box.stat(str(box_dir / "nope")) is None
    assert box.read(str(box_dir / "f.bin"), 1000, 70_000) == data[1000:71_000]
    assert box.read(str(box_dir / "f.bin"), len(data)) == b""
    assert box.listdir(str(box_dir)) == ["f.bin"]
    assert box.listdir(str(box_dir / "nope")) == []


def test_upload_is_atomic_and_download_resumes(box, box_dir, tmp_path: Path) -> None:
    data = os.urandom(5_000_000)
    local = tmp_path / "up.bin"
    local.write_bytes(data)
    seen: list[tuple[int, int]] = []
    box.upload(str(local), str(box_dir / "up.bin"), progress=lambda d, t: seen.append((d, t)))
    assert (box_dir / "up.bin").read_bytes() == data
    assert seen[-1] == (len(data), len(data))
    assert sorted(os.listdir(box_dir)) == ["up.bin"]  # no temp file left behind

    partial = tmp_path / "down.bin"
    partial.write_bytes(data[:1_234_567])
    seen.clear()
    box.download(str(box_dir / "up.bin"), str(partial), progress=lambda d, t: seen.append((d, t)))
    assert hashlib.sha256(partial.read_bytes()).digest() == hashlib.sha256(data).digest()
    assert seen[0] == (1_234_567, len(data))  # resumed, not restarted
    with pytest.raises(TransportError, match="does not exist"):
        box.download(str(box_dir / "nope"), str(tmp_path / "x"))


def test_closed_transport_fails_with_one_line(sshd) -> None:
    transport = sshd.connect()
    transport.close()
    transport.close()
    with pytest.raises(TransportError, match="closed"):
        transport.run("true")


def test_ssh_config_alias_and_proxyjump(sshd, tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        f"Host mybox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.key_path}\n  IdentitiesOnly yes\n"
        f"Host viajump\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.key_path}\n  ProxyJump mybox\n")
    common = {"known_hosts": sshd.known_hosts, "allow_agent": False, "ssh_config": str(config)}
    from remote.transport.ssh import connect

    with connect("mybox", **common) as direct:
        assert direct.run("echo ok").stdout == b"ok\n"
        assert direct.label == f"{sshd.user}@127.0.0.1:{sshd.port}"
    steps: list[str] = []
    with connect("viajump", progress=steps.append, **common) as jumped:
        assert jumped.run("echo $SSH_CLIENT").stdout.startswith(b"127.0.0.1 ")
        assert any("through a jump host" in s for s in steps)


def test_bad_targets_and_refused_logins(sshd, tmp_path: Path) -> None:
    assert parse_target("root@10.0.0.1:2222") == ("root", "10.0.0.1", 2222)
    assert parse_target("[::1]:22") == (None, "[::1]", 22)
    for bad in ("", "a b", "user@", "host:99999", "u;rm@h", "h;id"):
        with pytest.raises(ValueError):
            parse_target(bad)
    other_key = tmp_path / "other"
    from tests.fixtures.sshd import keygen

    keygen(other_key, "stranger")
    with pytest.raises(TransportError, match="permission denied") as info:
        sshd.connect(identity_files=(str(other_key),))
    assert "\n" not in str(info.value)
    from tests.fixtures.sshd import free_port

    with pytest.raises(TransportError, match="cannot connect"):
        sshd.connect(port=free_port())


def test_paramiko_logs_never_carry_stdin(box, caplog: pytest.LogCaptureFixture) -> None:
    secret = "hf_logsecret_abcdefghijklmnop"
    level = logging.getLogger("paramiko").level
    with caplog.at_level(logging.DEBUG):
        logging.getLogger("paramiko").setLevel(logging.DEBUG)
        try:
            assert box.run("cat >/dev/null", stdin=secret.encode()).ok
        finally:
            logging.getLogger("paramiko").setLevel(level)
    assert caplog.records, "paramiko debug logging produced nothing: the check is void"
    assert all(secret not in r.getMessage() for r in caplog.records)
