"""A box that resets or garbles the connection during the SSH banner: ``gpurent`` says so
in one line, and paramiko's own logging (tracebacks from its transport thread) never
reaches the terminal."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT

BEHAVIOURS = {
    "reset-mid-banner": b"SSH-2.0-Open",
    "reset-at-once": b"",
    "not-ssh": b"HTTP/1.1 400 Bad Request\r\n\r\n" * 3,
}


@pytest.fixture
def bad_box(request: pytest.FixtureRequest) -> Iterator[int]:
    """A TCP server that sends ``BEHAVIOURS[param]`` and then resets the connection."""
    first = BEHAVIOURS[request.param]
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            if first:
                conn.sendall(first)
                time.sleep(0.3)  # read by the client, which then waits for the rest
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # with linger 0: an RST, not a FIN

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.mark.parametrize("bad_box", sorted(BEHAVIOURS), indirect=True)
def test_a_reset_during_the_banner_is_one_line(bad_box: int, tmp_path: Path) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    result = subprocess.run([sys.executable, "-m", "remote.cli", "status",
                             "someone@127.0.0.1:/runs/exp1", "-p", str(bad_box)], cwd=ROOT,
                            env=env, capture_output=True, text=True, timeout=60,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 1
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("gpurent status: SSH handshake with 127.0.0.1:") or \
        lines[0].startswith("gpurent status: cannot connect"), lines[0]
    assert result.stdout == ""
