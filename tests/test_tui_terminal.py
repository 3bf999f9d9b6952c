"""The real TUI in a real terminal (tmux) on a run whose files hold hostile text, followed
through the real watcher and follower: the pane title stays ours, no clipboard write
(OSC 52) reaches the terminal, and the raw bytes the app wrote hold none of the box's
sequences. A plain ``printf`` of the same sequences in the same harness shows that it
would notice."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from pathlib import Path

import pytest

from tests.test_tui_hostile_fields import HOSTILE, hostile_run

ROOT = Path(__file__).resolve().parents[1]
TUI = ROOT / ".venv" / "bin" / "gpurent-tui"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """A private tmux server (its own socket) with one pane of a fixed size."""

    def __init__(self, tmp: Path) -> None:
        self.socket = f"gpurent-test-{uuid.uuid4().hex[:8]}"
        self.out = tmp / "pane.raw"

    def __call__(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "-f", "/dev/null", *args],
                              capture_output=True, text=True, check=True, timeout=20).stdout

    def start(self, command: str) -> None:
        """Run ``command`` in a pane after recording its output raw and titling it."""
        self("new-session", "-d", "-x", "160", "-y", "50", "-s", "t",
             f"sh -c 'read go; exec {command}'")
        self("set", "-g", "set-clipboard", "on")  # an OSC 52 would become a buffer
        self("select-pane", "-t", "t", "-T", "our-title")
        self("pipe-pane", "-t", "t", "-o", f"cat >> {self.out}")
        self("send-keys", "-t", "t", "Enter")

    def wait_for(self, *needles: str, timeout: float = 60.0) -> str:
        end = time.monotonic() + timeout
        while True:
            screen = self("capture-pane", "-p", "-t", "t")
            if all(n in screen for n in needles):
                return screen
            if time.monotonic() > end:
                raise AssertionError(f"{needles} not on screen:\n{screen}")
            time.sleep(0.2)

    def wait_gone(self, timeout: float = 20.0) -> bool:
        """Whether the pane's program ended (and the session with it) within ``timeout``."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            done = subprocess.run(["tmux", "-L", self.socket, "has-session", "-t", "t"],
                                  capture_output=True, timeout=20).returncode != 0
            if done:
                return True
            time.sleep(0.2)
        return False

    def title(self) -> str:
        return self("display", "-p", "-t", "t", "#{pane_title}").strip()

    def buffers(self) -> str:
        return self("list-buffers")

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.socket, "kill-server"], capture_output=True,
                       timeout=20)


@pytest.fixture
def tmux(tmp_path: Path):
    term = Tmux(tmp_path)
    yield term
    term.close()


def test_the_harness_sees_a_title_and_a_clipboard_write(tmux: Tmux, tmp_path: Path) -> None:
    script = tmp_path / "hostile.sh"
    script.write_text(f"printf '%s\\n' '{HOSTILE}'; echo done; sleep 30\n")
    tmux.start(f"sh {script}")
    tmux.wait_for("done")
    assert tmux.title() == "PWNED"
    assert "pwned" in tmux.buffers()
    assert b"\x1b]52;" in tmux.out.read_bytes()


@pytest.mark.skipif(not TUI.exists(), reason=f"{TUI} is missing (scripts/setup.sh)")
def test_hostile_run_files_leave_the_real_terminal_alone(tmux: Tmux, tmp_path: Path) -> None:
    run = hostile_run(tmp_path / "project")
    env = f"env HOME={tmp_path} TERM=xterm-256color COLUMNS=160 LINES=50"
    tmux.start(f"{env} {TUI} --local {run}")
    tmux.wait_for("train.log", "[@click=app.quit]q[/] [b]B", "epoch [@click=app.quit]q[/]")
    time.sleep(1.0)  # a few more repaints and follower messages
    assert tmux.title() == "our-title"
    assert tmux.buffers() == ""
    raw = tmux.out.read_bytes()
    assert b"PWNED" not in raw and b"cHduZWQ=" not in raw
    assert b"\x1b]52;" not in raw and b"\x1b]0;" not in raw and b"\x1b[6n" not in raw
    assert b"\x1bc" not in raw
    assert "\u202e".encode() not in raw and "\u200b".encode() not in raw
    assert b"\xc2\x9b" not in raw  # U+009B, the 8-bit CSI
    tmux("send-keys", "-t", "t", "q")
    tmux.wait_for("on this machine.")  # the quit dialog, in the words of a dead local run
    tmux("send-keys", "-t", "t", "Enter")  # the dialog opens on "Quit"
    assert tmux.wait_gone(), "the app did not quit"
