"""The user's path once in a real terminal (issue 28, item 3): the app installed from its
wheel into a fresh venv (not editable, run by its path from a directory outside the
checkout), in tmux, on the same box as ``tests/e2e/test_userpath.py`` (a real sshd logged
into as a non-root user whose login directory is its home), with the defaults:
``gpurent-tui USER@HOST -p PORT --provider vast --instance ID``. Keys only: the host key
trusted through the question; the launch form filled field by field in a way that cannot
lose keys (the field's focus seen before typing, the field seen empty, then its text
seen whole in its row; typed again if the Input's select-on-focus ate a key; every row
checked again before launching); watch, push, pull, the guard armed, the run stopped,
the guard ending the billing, quit, and the farewell the terminal keeps."""

from __future__ import annotations

import re
import shlex
import shutil
import time
from pathlib import Path

import pytest

from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.providers_standin import ProviderStandin
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_terminal_kit import Tmux
from tests.fixtures.userpath_kit import VAST_ID, box_dataset, box_env
from tests.fixtures.watch_log import wait_until
from tests.fixtures.wheel import install_wheel
from trainer import runfiles

pytestmark = [pytest.mark.slow, pytest.mark.first, pytest.mark.timeout(900),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")]

#: What box-drawing and padding a pane adds between the words of a widget.
_FRAME = re.compile(r"[\s│┃║▌▐█▔▁╭╮╰╯─━┏┓┗┛]+")


class Screen:
    """The tmux pane as text, waited on."""

    def __init__(self, tmux: Tmux) -> None:
        self.tmux = tmux

    def text(self) -> str:
        """The pane's rows now."""
        return self.tmux("capture-pane", "-p", "-t", "t")

    def wait(self, *needles: str, timeout: float = 120.0, squeeze: bool = False) -> str:
        """Wait until every needle is on screen (``squeeze``: in the text with spaces
        and frames removed, for words a widget wraps); the screen when they are."""
        end = time.monotonic() + timeout
        while True:
            screen = self.text()
            seen = _FRAME.sub("", screen) if squeeze else screen
            if all((_FRAME.sub("", n) if squeeze else n) in seen for n in needles):
                return screen
            if time.monotonic() > end:
                raise AssertionError(f"{needles} not on screen:\n{screen}")
            time.sleep(0.2)

    def row(self, label: str, value: str, timeout: float = 60.0) -> None:
        """Wait until the form's row ``label`` holds exactly ``value``."""
        pattern = re.compile(rf"(?m)\s{re.escape(label)}\s+{re.escape(value)}\s*(?:█|$)")
        end = time.monotonic() + timeout
        while not pattern.search(screen := self.text()):
            if time.monotonic() > end:
                raise AssertionError(f"{label!r} does not hold {value!r}:\n{screen}")
            time.sleep(0.2)

    def fill(self, label: str, value: str, tries: int = 5) -> None:
        """Type ``value`` into the focused field (the form's row ``label``): emptied
        first and seen empty, then typed and seen whole, so that neither a stale screen
        nor a lost key passes for done. An Input selects its text a moment after it gets
        the focus, and a key typed before that can be replaced: the field is then
        emptied and typed again, until its row holds exactly ``value``."""
        for _ in range(tries):
            self.keys("End", "C-u")
            self.row_without(label, value)  # emptied (it may have held the same text)
            self.type(value)
            try:
                self.row(label, value, timeout=5.0)
                return
            except AssertionError:
                continue
        self.row(label, value, timeout=1.0)  # fails, showing the screen

    def row_without(self, label: str, value: str, timeout: float = 30.0) -> None:
        """Wait until the form's row ``label`` no longer holds ``value``."""
        pattern = re.compile(rf"(?m)\s{re.escape(label)}\s+{re.escape(value)}\s*(?:█|$)")
        end = time.monotonic() + timeout
        while pattern.search(screen := self.text()):
            if time.monotonic() > end:
                raise AssertionError(f"{label!r} still holds {value!r}:\n{screen}")
            time.sleep(0.1)

    def raw_row(self, label: str) -> str:
        """The form's row ``label`` with its colours (SGR sequences)."""
        for row in self.tmux("capture-pane", "-e", "-p", "-t", "t").splitlines():
            if re.search(rf"█(?:\x1b\[[0-9;]*m|\s)*{re.escape(label)}", row):
                return row
        return ""

    def field_cells(self, label: str, width: int = 30) -> str:
        """The first ``width`` cells of the field in the row ``label``, with their colours:
        the left part of the field, which no notification covers (toasts stack up from
        the bottom right, and a toast's colours over a row are not the field's)."""
        row = self.raw_row(label)
        at = row.find(label)
        if at < 0:
            return ""
        out, cells = [], 0
        for piece in re.findall(r"\x1b\[[0-9;]*m|.", row[at + len(label):]):
            out.append(piece)
            cells += not piece.startswith("\x1b")
            if cells >= width:
                break
        return "".join(out)

    def learn_focus(self, focused: str, other: str) -> None:
        """Learn how a focused field looks (the colours its row has that a field without
        the focus lacks) from two rows of the form: ``focused`` has the focus."""
        def codes(row: str) -> set[str]:
            return set(re.findall(r"\x1b\[[0-9;]*m", row))

        self.focus_codes = codes(self.field_cells(focused)) - codes(self.field_cells(other))
        assert self.focus_codes, "a focused field looks like any other"

    def wait_focus(self, label: str, timeout: float = 30.0) -> None:
        """Wait until the form's field ``label`` has the focus (a key's move of the focus
        can come after the keys sent behind it: they would reach the field before)."""
        end = time.monotonic() + timeout
        while not any(code in self.field_cells(label) for code in self.focus_codes):
            if time.monotonic() > end:
                raise AssertionError(f"the focus never reached {label!r}:\n{self.text()}")
            time.sleep(0.1)

    def dialog(self) -> str:
        """The text inside the modal dialog's frame, its rows joined by spaces."""
        rows = [row[row.index("█") + 1:row.rindex("█")] for row in self.text().splitlines()
                if row.count("█") >= 2]
        return " ".join(" ".join(rows).split())

    def wait_dialog(self, needle: str, timeout: float = 60.0) -> str:
        """Wait until the dialog's text holds ``needle``; that text."""
        end = time.monotonic() + timeout
        while needle not in (text := self.dialog()):
            if time.monotonic() > end:
                raise AssertionError(f"{needle!r} not in the dialog:\n{self.text()}")
            time.sleep(0.2)
        return text

    def joined(self) -> str:
        """The pane with the lines the terminal wrapped joined again."""
        return self.tmux("capture-pane", "-p", "-J", "-t", "t")

    def keys(self, *keys: str) -> None:
        """Send tmux key names (``Tab``, ``Enter``, ``C-u``, a letter)."""
        self.tmux("send-keys", "-t", "t", *keys)

    def type(self, text: str) -> None:
        """Type ``text`` literally."""
        self.tmux("send-keys", "-t", "t", "-l", text)


@pytest.fixture
def tmux(tmp_path: Path):
    term = Tmux(tmp_path)
    yield term
    term.close()


@pytest.mark.box_env.with_args(box_env)  # a function: with_args, not a decorator
def test_the_user_path_in_a_real_terminal_from_the_wheel(
        user_box: SSHServer, tmp_path: Path, tmux: Tmux, vast_standin: ProviderStandin,
        hub_standin: HubStandin) -> None:
    box, home = user_box, Path(user_box.home)
    venv = install_wheel(tmp_path / "install")
    iid = vast_standin.add_instance(VAST_ID)
    vast_standin.instance_key(iid, f"vast-key-{VAST_ID}")
    vast_standin.set_address(iid, box.host, box.port, box.user)
    box_dataset(box)
    laptop = tmp_path / "laptop"
    (laptop / ".ssh").mkdir(parents=True)
    (laptop / ".ssh" / "known_hosts").touch()  # the box's key is unknown
    (laptop / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {box.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {laptop / '.ssh' / 'known_hosts'}\n")
    work = tmp_path / "work"  # where the user is: the pull lands in ./weights
    work.mkdir()
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(laptop), "LANG": "C.UTF-8",
           "TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50", "SSH_AUTH_SOCK": "",
           "XDG_CONFIG_HOME": str(laptop / ".config"),
           "XDG_STATE_HOME": str(laptop / ".local" / "state"),
           "GPURENT_DATA_DIR": str(laptop / "gpurent-data"),
           "VAST_API_KEY": vast_standin.key, "GPURENT_VAST_URL": vast_standin.base_url,
           "HF_ENDPOINT": hub_standin.url, "HF_TOKEN": VALID_TOKEN,
           "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}
    app = shlex.join([str(venv / "bin" / "gpurent-tui"), f"{box.user}@{box.host}", "-p",
                      str(box.port), "--provider", "vast", "--instance", iid])
    script = tmp_path / "user.sh"
    script.write_text(f"cd {shlex.quote(str(work))}\n"
                      f"env -i {' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())} "
                      f"{app}\necho \"EXITED $?\"\nsleep 120\n")
    tmux.start(f"sh {script}")
    screen = Screen(tmux)

    # First contact: the question, Cancel focused; Tab to "Trust and connect".
    screen.wait("SHA256:", "Trust and connect")
    screen.keys("Tab", "Enter")
    # Ready for box keys once the footer offers them (the control connection is up).
    screen.wait("connected", "l launch", timeout=180)
    # The form: the focus starts in data; Enter moves to the next field. Each field is
    # emptied (C-u with the cursor at its end), typed, and seen in the command.
    screen.keys("l")
    # The form is ready for keys once it has drawn its command (keys sent sooner may
    # reach the screen beneath: a Textual race).
    screen.wait("Launch a training run", "ctrl+s launch", "mkdir -p")
    fields = [("data *", "data/data.yaml"), ("name *", "first"), ("model", None),
              ("epochs", "500"), ("batch", "8"), ("imgsz", "32"), ("device", "cpu"),
              ("save_period", None), ("Hub repo", None),
              ("more args", "workers=0 seed=0 patience=0")]
    screen.learn_focus("data *", "name *")  # the form opens with the focus in data
    for label, value in fields:
        screen.wait_focus(label)  # no key typed before the focus is there
        if value is not None:
            screen.fill(label, value)  # in that field, whole: no key lost
        screen.keys("Tab")
    for label, value in fields:  # nothing typed later reached an earlier field
        if value is not None:
            screen.row(label, value)
    screen.wait("dataset doctor found no errors", timeout=300)
    screen.wait(f"cd {home}/runs/train", f"data={home}/data/data.yaml", "epochs=500",
                "imgsz=32", squeeze=True)
    screen.keys("C-s")
    screen.wait("launched", timeout=120)
    # Watch: the header counts the 500 epochs.
    best = home / "runs" / "train" / "first" / "weights" / "best.pt"
    assert wait_until(best.is_file, 300), screen.text()
    screen.wait("/500", "live", timeout=120)
    # Push from the box, to the Hub stand-in.
    screen.keys("u")
    screen.wait("Push run first")
    screen.type("me/detector")
    screen.wait("me/detector")
    screen.keys("Enter")
    screen.wait("pushed", timeout=180)
    assert hub_standin.repo("me/detector").commits
    # Pull into ./weights.
    screen.keys("w")
    screen.wait_dialog("Pull run first")
    screen.wait_dialog("lands in")  # mounted, its folder box focused
    screen.keys("Enter")  # the folder offered: ./weights
    screen.wait("pulled", timeout=180)
    assert any((work / "weights").rglob("best.pt"))
    # The guard: when the run ends, stop the instance (when, then, hours, lease, Cancel,
    # Arm: the lease field is there for an instance the user named).
    screen.keys("a")
    screen.wait("Arm guard")
    screen.wait_dialog("lease")
    screen.keys("Tab", "Tab", "Tab", "Tab", "Tab", "Enter")
    screen.wait("guard armed", timeout=60)
    # Stop the run; the guard stops the instance.
    screen.keys("x")
    screen.wait("Stop training")
    screen.keys("Tab", "Enter")
    screen.wait("instance stopped", timeout=240)
    assert vast_standin.instances[iid]["intended_status"] == "stopped"
    assert {r.scope for r in vast_standin.calls("PUT", iid)} == {"instance"}
    # Quit: the words say what still bills; Enter on "Detach and quit", where it opens.
    screen.keys("q")
    words = screen.wait_dialog(f"instance {iid} is stopped: its disk bills $0.0694/h.")
    assert "idle" not in words and "Stop the instance" not in words, words
    screen.keys("Enter")
    screen.wait("EXITED 0", timeout=60)
    farewell = screen.joined()
    assert f"run first was stopped; instance {iid} is stopped: its disk bills $0.0694/h" \
        in farewell, farewell
    assert runfiles.read_status(home / "runs" / "train" / "first").get("state") == "stopped"
