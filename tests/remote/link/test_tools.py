"""The one door to the box tools (``remote.link.tools``): ``python -m trainer VERB`` run on
this machine (``LocalTransport``) and over a real sshd, through the gate when a connector
says so and plainly otherwise; secrets on stdin, never in the command; a timeout; the
report read after progress lines, pretty-printed or followed by more lines; and one line
with the tool's last stderr line when it printed no report."""

from __future__ import annotations

import shlex
import shutil
import sys
import time
from pathlib import Path

import pytest

from remote import config
from remote.link import BoxToolFailed, ask_tool, parse_report, tool_report, trainer_command
from remote.link.bootstrap import box_id, install_name
from remote.transport import LocalTransport
from remote.transport.base import TransportError
from tests.fixtures.gate_kit import Counting, connector_for
from tests.fixtures.sshd import SSHServer

#: A stand-in for ``python -m trainer``: it answers the way real tools print.
STAND_IN = '''
import json, sys, time
verb, rest = sys.argv[3], sys.argv[4:]
if verb == "progress":
    print("loading 1 of 2")
    print('{"step": 1}')
    print(json.dumps({"ok": True, "argv": rest, "stdin": sys.stdin.read()}, indent=2))
elif verb == "trailing":
    print(json.dumps({"ok": True, "files": [{"name": "best.pt"}]}))
    print("pushed best.pt")
elif verb == "silent":
    print("no report here")
    print("a first complaint", file=sys.stderr)
    print("the last word\\n", file=sys.stderr)
    sys.exit(3)
elif verb == "mute":
    sys.exit(4)
elif verb == "sleep":
    time.sleep(60)
'''


@pytest.fixture
def stand_in(tmp_path: Path) -> Counting:
    """This machine, its trainer replaced by :data:`STAND_IN`, every exec recorded."""
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    transport = Counting(LocalTransport())
    transport.trainer_prefix = f"{shlex.quote(sys.executable)} {shlex.quote(str(script))}"
    return transport


def test_the_plain_path_runs_the_real_trainer_with_the_transports_prefix() -> None:
    box = Counting(LocalTransport())
    answer = ask_tool(box, ["ready", "--json"])
    assert box.execs == [f"{box.trainer_prefix} -m trainer ready --json"]
    assert box.execs[0] == trainer_command(box, ["ready", "--json"])
    assert answer.ok and answer.report is not None
    assert answer.report["python"] == ".".join(map(str, sys.version_info[:3]))
    assert tool_report(box, ["ready", "--json"]) == answer.report


def test_words_are_quoted_and_stdin_carries_the_secret(stand_in: Counting) -> None:
    secret = "hf_" + "s3cret" * 4
    hostile = ["a b", "$(touch pwned)", "x;y", "'"]
    answer = ask_tool(stand_in, ["progress", *hostile], stdin=secret.encode() + b"\n")
    assert answer.report == {"ok": True, "argv": hostile, "stdin": secret + "\n"}
    assert secret not in stand_in.execs[0]
    assert stand_in.stdin_bytes == len(secret) + 1


def test_a_real_tool_reads_its_token_from_stdin(tmp_path: Path) -> None:
    words = ["push", str(tmp_path / "nope"), "--repo", "org/m", "--token-stdin", "--json"]
    without = ask_tool(LocalTransport(), words)
    assert without.report is not None and "no Hub token" in without.report["error"]
    box = Counting(LocalTransport())
    given = ask_tool(box, words, stdin=b"hf_not_a_real_token\n")
    assert given.rc == 2 and given.report is not None
    assert given.report["error"] == f"{tmp_path / 'nope'} is not a directory"
    assert "hf_not_a_real_token" not in box.execs[0]


def test_a_report_after_progress_lines_or_before_more_lines(stand_in: Counting) -> None:
    # Pretty-printed after progress lines (one of which looks like an object).
    assert tool_report(stand_in, ["progress"])["ok"] is True
    # On one line, with a line after it.
    assert tool_report(stand_in, ["trailing"]) == {"ok": True, "files": [{"name": "best.pt"}]}
    # The shapes the box's tools and a chatty login shell produce.
    assert parse_report(b'{"a": 1}') == {"a": 1}
    assert parse_report(b'motd\n{"schema": "x",\n  "runs": []}\n\n') == \
        {"schema": "x", "runs": []}
    assert parse_report(b'banner{"schema": "x"}') == {"schema": "x"}
    assert parse_report(b'{"step": 1}\n{"step": 2}\n{"ok": true}\nbye\n') == {"ok": True}
    assert parse_report(b'{"a": [{"b": {}}]}\nbye') == {"a": [{"b": {}}]}
    for junk in (b"", b"no json", b"[1, 2]", b"{not json", b'"text"', b'{"a": 1'):
        assert parse_report(junk) is None, junk


def test_no_report_is_one_line_with_the_tools_last_stderr_line(stand_in: Counting,
                                                              tmp_path: Path) -> None:
    with pytest.raises(BoxToolFailed) as failed:
        tool_report(stand_in, ["silent"])
    assert str(failed.value) == "trainer silent failed (exit 3): the last word"
    assert (failed.value.rc, failed.value.why) == (3, "the last word")
    with pytest.raises(BoxToolFailed, match=r"^trainer mute failed \(exit 4\): no JSON "
                                            r"report$"):
        tool_report(stand_in, ["mute"])
    # The real doctor, on a file that is not there.
    missing = tmp_path / "nope.yaml"
    with pytest.raises(BoxToolFailed) as failed:
        tool_report(LocalTransport(), ["doctor", str(missing), "--json"])
    assert str(failed.value) == f"trainer doctor failed (exit 2): doctor: {missing}: no such file"


def test_a_tool_past_its_timeout_is_stopped(stand_in: Counting) -> None:
    started = time.monotonic()
    with pytest.raises(TransportError, match="timed out after 1s"):
        ask_tool(stand_in, ["sleep"], timeout=1.0)
    assert time.monotonic() - started < 15


@pytest.mark.timeout(300)
def test_through_the_gate_on_a_box_without_the_trainer(sshd: SSHServer, tmp_path: Path,
                                                        monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-laptop"))
    for old in Path(sshd.home, ".cache", "gpurent").glob("trainer-*"):
        shutil.rmtree(old)
    gate = connector_for(sshd)
    push = ["push", f"{sshd.home}/nope", "--repo", "org/m", "--token-stdin", "--json"]
    with sshd.connect() as link:
        box = Counting(link)
        assert gate.gated()
        # The package must ride on the exec's stdin: a tool with its own stdin waits.
        with pytest.raises(ValueError, match="cannot ship the package"):
            ask_tool(box, push, connector=gate, stdin=b"hf_x\n")
        assert box.execs == []
        # One exec ships the package, chooses the python and runs the tool; no SFTP.
        ready = tool_report(box, ["ready", "--json"], connector=gate)
        installed = f"{sshd.home}/.cache/gpurent/{install_name()}"
        assert ready["trainer"] == f"{installed}/trainer"
        assert len(box.execs) == 1 and box.stdin_bytes > 10_000 and box.sftp == 0
        assert "GPURENT-BOOT" in box.execs[0]  # the gate's script, not a plain command
        assert config.remembered(box_id(link))["trainer"] == install_name()
        # Now the box holds it: the tool's own stdin passes through the gate.
        sent = box.stdin_bytes
        answer = ask_tool(box, push, connector=gate, stdin=b"hf_not_a_real_token\n")
        assert answer.report is not None
        assert answer.report["error"] == f"{sshd.home}/nope is not a directory"
        assert box.stdin_bytes - sent == len(b"hf_not_a_real_token\n")
        assert "hf_not_a_real_token" not in box.execs[-1] and "GPURENT-BOOT" in box.execs[-1]
        # Without a connector the door takes the transport's plain prefix.
        ask_tool(box, ["ready", "--json"])
        assert box.execs[-1] == f"{link.trainer_prefix} -m trainer ready --json"
