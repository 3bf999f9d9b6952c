"""``remote.transport.local.LocalTransport``: every Transport method on this machine, for real."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.commands.target import parse_target
from remote.transport.base import TransportError
from remote.transport.local import LocalTransport
from tests.fixtures.paths import ROOT
from trainer.health import local_pid_alive


def test_spawn_detached_is_its_own_session_with_stdin_once(tmp_path: Path) -> None:
    t = LocalTransport()
    log = tmp_path / "out.log"
    pid = t.spawn_detached('read -r x; echo "got $x in $(pwd)"; exec sleep 60', cwd=str(tmp_path),
                           log_path=str(log), stdin=b"secret-value\n")
    try:
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid
        deadline = time.monotonic() + 20
        while b"got" not in (log.read_bytes() if log.exists() else b""):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert log.read_bytes() == f"got secret-value in {tmp_path}\n".encode()
        assert t.pid_alive(pid)
        assert t.signal_group(pid, signal.SIGTERM) is True
        while t.pid_alive(pid):
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        t.signal_group(pid, signal.SIGKILL)
    # Gone once reaped (a loaded machine reaps it a moment later): no group to signal.
    end = time.monotonic() + 20
    while t.signal_group(pid, 0) and time.monotonic() < end:
        time.sleep(0.05)
    assert t.signal_group(pid, signal.SIGTERM) is False


def test_run_stream_and_timeouts(tmp_path: Path) -> None:
    t = LocalTransport()
    result = t.run("cat; echo err >&2; exit 3", stdin=b"in")
    assert (result.rc, result.stdout, result.stderr, result.ok) == (3, b"in", b"err\n", False)
    with pytest.raises(TransportError, match="timed out"):
        t.run("sleep 30", timeout=0.3)
    stream = t.stream("echo one; printf 'two\\nthr'; sleep 30")
    lines = stream.lines(timeout=1.0)
    assert [next(lines), next(lines)] == [b"one", b"two"]
    with pytest.raises(TimeoutError):
        next(lines)
    stream.close()
    stream.close()
    ended = t.stream("printf 'a\\nlast'")
    assert list(ended.lines(timeout=10)) == [b"a", b"last"]
    ended.close()
    prefix = t.run(f"{t.trainer_prefix} -m trainer --version")
    assert prefix.ok and prefix.stdout.strip()


def test_files(tmp_path: Path) -> None:
    t = LocalTransport()
    src = tmp_path / "src.bin"
    data = os.urandom(3 * 1024 * 1024 + 5)
    src.write_bytes(data)
    seen: list[tuple[int, int]] = []
    t.upload(str(src), str(tmp_path / "box" / "up.bin"), lambda d, n: seen.append((d, n)))
    assert (tmp_path / "box" / "up.bin").read_bytes() == data
    assert seen[-1] == (len(data), len(data))
    partial = tmp_path / "down.bin"
    partial.write_bytes(data[:1000])
    seen.clear()
    t.download(str(src), str(partial), lambda d, n: seen.append((d, n)))
    assert partial.read_bytes() == data and seen[0][0] > 1000  # resumed, not restarted
    st = t.stat(str(src))
    assert st is not None and st.size == len(data)
    assert t.stat(str(tmp_path / "nope")) is None
    assert t.read(str(src), 10, 5) == data[10:15] and t.read(str(src), len(data)) == b""
    assert t.listdir(str(tmp_path)) == ["box", "down.bin", "src.bin"]
    assert t.listdir(str(tmp_path / "nope")) == []
    with pytest.raises(TransportError, match="cannot read"):
        t.read(str(tmp_path / "nope"))
    assert t.pid_alive(os.getpid()) and not t.pid_alive(0)
    assert local_pid_alive(os.getpid())


@pytest.mark.parametrize(("text", "host", "path"), [
    ("local", None, "."), ("local:runs/a", None, "runs/a"), ("/abs/run", None, "/abs/run"),
    ("./rel", None, "./rel"), ("box:runs/r1", "box", "runs/r1"),
    ("root@1.2.3.4", "root@1.2.3.4", "."),
    ("u@h:/abs", "u@h", "/abs"), ("box:", "box", "."), ("box:~/runs", "box", "runs"),
    ("plain", None, "plain"),
])
def test_targets(text: str, host: str | None, path: str) -> None:
    target = parse_target(text)
    assert (target.host, target.path) == (host, path)


def test_the_trainer_runs_from_a_copy_of_the_packages_outside_the_checkout(
        tmp_path: Path) -> None:
    """``python -m trainer`` through the local transport finds the ``trainer`` beside
    ``remote``, wherever both are: here a copy in a folder that is not the checkout, run
    by a python that has neither installed (a bare venv), from a third directory."""
    lib = tmp_path / "lib"
    for package in ("remote", "trainer"):
        shutil.copytree(ROOT / package, lib / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")],
                   check=True, timeout=120)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("from remote.transport.local import LocalTransport\n"
            "t = LocalTransport()\n"
            "r = t.run(t.trainer_prefix + ' -m trainer --version', timeout=60)\n"
            "print(r.rc, r.stdout.decode().strip(), r.stderr.decode().strip()[-200:])\n")
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(lib)}
    out = subprocess.run([str(tmp_path / "venv" / "bin" / "python"), "-c", code],
                         cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    from trainer.version import __version__

    assert out.stdout.split() == ["0", __version__], out.stdout
