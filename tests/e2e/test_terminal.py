"""The real TUI in a real terminal (tmux) on a run whose files hold hostile text, followed
through the real watcher and follower: the pane title stays ours, no clipboard write
(OSC 52) reaches the terminal, and the raw bytes the app wrote hold none of the box's
sequences. A plain ``printf`` of the same sequences in the same harness shows that it
would notice."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT
from tests.fixtures.tui_hostile_fields_kit import HOSTILE, hostile_run
from tests.fixtures.tui_terminal_kit import Tmux

TUI = ROOT / ".venv" / "bin" / "gpurent-tui"

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


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
