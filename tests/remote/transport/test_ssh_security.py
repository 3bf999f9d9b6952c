"""Host keys, injection and secrets, against a real sshd on 127.0.0.1."""

from __future__ import annotations

import base64
import os
import shlex
import signal
import time
from pathlib import Path

import paramiko
import pytest

from remote.runs.launch import LaunchSpec, build_command, launch_run
from remote.transport.hostkeys import fingerprint, host_matches
from remote.transport.ssh import HostKeyChanged, HostKeyRevoked, HostKeyUnknown
from tests.fixtures.sshd import SSHServer, keygen
from tests.fixtures.watch_log import wait_until


def host_fingerprint(sshd: SSHServer) -> str:
    kind, b64 = sshd.host_key_line.split()
    return fingerprint(paramiko.PKey.from_type_string(kind, base64.b64decode(b64)))


def test_changed_host_key_is_refused_with_both_fingerprints(sshd, tmp_path: Path) -> None:
    keygen(tmp_path / "impostor", "impostor")
    fake = paramiko.PKey.from_path(tmp_path / "impostor")
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} {fake.get_name()} {fake.get_base64()}\n")
    asked: list[str] = []
    with pytest.raises(HostKeyChanged) as info:
        sshd.connect(known_hosts=str(known), accept_new=True,
                     ask_unknown=lambda *a: asked.append(a) or True)
    message = str(info.value)
    assert fingerprint(fake) in message and host_fingerprint(sshd) in message
    assert "\n" not in message and not asked
    assert known.read_text().count("\n") == 1  # nothing was added


def test_hashed_known_hosts_entry_is_honoured(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    hashed = paramiko.HostKeys.hash_host(f"[127.0.0.1]:{sshd.port}")
    known.write_text(f"# comment kept\n{hashed} {sshd.host_key_line}\n")
    with sshd.connect(known_hosts=str(known)) as box:
        assert box.run("true").ok
    assert known.read_text().startswith("# comment kept\n")


def test_unknown_host_key_is_never_accepted_silently(sshd, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    with pytest.raises(HostKeyUnknown, match="unknown host key"):
        sshd.connect(known_hosts=str(known))
    asked: list[tuple[str, str, str]] = []

    def say_no(host: str, kind: str, fp: str) -> bool:
        asked.append((host, kind, fp))
        return False

    with pytest.raises(HostKeyUnknown):
        sshd.connect(known_hosts=str(known), ask_unknown=say_no)
    assert asked == [(f"[127.0.0.1]:{sshd.port}", "ssh-ed25519", host_fingerprint(sshd))]
    assert not known.exists()


def test_accepted_key_is_saved_and_then_known(sshd, tmp_path: Path) -> None:
    known = tmp_path / "ssh" / "known_hosts"
    with sshd.connect(known_hosts=str(known), ask_unknown=lambda *a: True) as box:
        assert box.run("true").ok
    assert known.read_text() == f"[127.0.0.1]:{sshd.port} {sshd.host_key_line}\n"
    assert (known.stat().st_mode & 0o777) == 0o600
    other = tmp_path / "known2"
    with sshd.connect(known_hosts=str(other), accept_new=True):
        pass
    with sshd.connect(known_hosts=str(other), ask_unknown=lambda *a: pytest.fail("asked")):
        pass
    assert other.read_text().count("\n") == 1


@pytest.mark.parametrize("pattern", ["*", "[127.0.0.1]:*", "!otherhost,127.0.0.*,[127.0.0.1]:?*"])
def test_a_revoked_key_is_refused_and_never_appended(sshd, tmp_path: Path,
                                                     pattern: str) -> None:
    known = tmp_path / "known_hosts"
    name = f"[127.0.0.1]:{sshd.port}"
    known.write_text(f"@revoked {pattern} {sshd.host_key_line}\n"
                     f"{name} {sshd.host_key_line}\n")
    with pytest.raises(HostKeyRevoked, match="@revoked") as info:
        sshd.connect(known_hosts=str(known))
    assert host_fingerprint(sshd) in str(info.value) and "\n" not in str(info.value)
    # Without the trusted line, accept-new and a "yes" still cannot bring it in.
    known.write_text(f"@revoked {pattern} {sshd.host_key_line}\n")
    before = known.read_bytes()
    with pytest.raises(HostKeyRevoked):
        sshd.connect(known_hosts=str(known), accept_new=True,
                     ask_unknown=lambda *a: pytest.fail("asked about a revoked key"))
    assert known.read_bytes() == before


def test_a_key_revoked_for_another_host_is_not_ours(sshd, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    name = f"[127.0.0.1]:{sshd.port}"
    known.write_text(f"@revoked otherhost,!{name} {sshd.host_key_line}\n"
                     f"@cert-authority * {sshd.host_key_line}\n{name} {sshd.host_key_line}\n")
    with sshd.connect(known_hosts=str(known)) as box:
        assert box.run("true").ok


def test_known_hosts_patterns() -> None:
    hashed = paramiko.HostKeys.hash_host("[box]:2222")
    assert host_matches(hashed, "[box]:2222") and not host_matches(hashed, "[box]:22")
    assert host_matches("*.example.com,!bad.example.com", "a.example.com")
    assert not host_matches("*.example.com,!bad.example.com", "bad.example.com")
    assert host_matches("[10.0.0.?]:22?2", "[10.0.0.5]:2202")
    assert not host_matches("[10.0.0.1]:2222", "[10x0.0.1]:2222")


@pytest.fixture
def project(sshd: SSHServer, request: pytest.FixtureRequest) -> Path:
    path = Path(sshd.home) / "proj" / request.node.name
    path.mkdir(parents=True, exist_ok=True)
    return path


def test_injection_through_names_is_rejected(sshd, project: Path) -> None:
    with sshd.connect() as box:
        for name in ("a;touch pwned", "$(touch pwned)", "../escape", "-rf", "a b", "`id`",
                     "x\ny", ".hidden"):
            with pytest.raises(ValueError):
                launch_run(box, LaunchSpec("trainer", str(project), name, {}))
        for key in ("epochs;id", "A", "x y", "$(id)"):
            with pytest.raises(ValueError):
                build_command(LaunchSpec("trainer", str(project), "ok", {key: "1"}), box)
    assert not list(project.rglob("pwned")) and not (Path(sshd.home) / "pwned").exists()


def test_injection_through_values_and_paths_is_inert(sshd, project: Path) -> None:
    """Hostile values reach the program as literal arguments; no shell runs them."""
    marker = project / "pwned"
    hostile = [f"$(touch {marker})", f"`touch {marker}`", f"x; touch {marker}",
               f"x' ; touch '{marker}", f"x && touch {marker}", "*", "${HOME}"]
    weird_project = project / "dir with 'quotes' and $(dollar)"
    weird_project.mkdir()
    args = {f"k{i}": v for i, v in enumerate(hostile)}
    with sshd.connect() as box:
        # Any program shows the argv it got: use the box's sh to echo its arguments.
        box.trainer_prefix = "printf '%s\\n'"
        launch_run(box, LaunchSpec("trainer", str(weird_project), "run1", args))
        log = weird_project / "run1" / "console.log"
        assert wait_until(lambda: log.exists() and b"name=run1" in log.read_bytes())
        got = log.read_text().splitlines()
        for i, value in enumerate(hostile):
            assert f"k{i}={value}" in got
        # And the same values over a plain run() with shlex quoting stay inert.
        assert box.run("echo " + " ".join(shlex.quote(v) for v in hostile)).ok
    time.sleep(0.3)
    assert not marker.exists()


def test_token_never_in_cmdline_or_files_during_a_launch(sshd, project: Path) -> None:
    token = "hf_" + os.urandom(12).hex()
    waiter = project / "waiter.py"
    # A stand-in for the training program: it proves it got the token (writes only its
    # length), then stays alive while we look for the token on the box.
    waiter.write_text(
        "import os, sys, time\n"
        "tok = os.environ.get('HF_TOKEN', '')\n"
        "print('token length', len(tok), flush=True)\n"
        "time.sleep(20)\n")
    with sshd.connect() as box:
        box.trainer_prefix = f"python3 {shlex.quote(str(waiter))}"
        result = launch_run(box, LaunchSpec("trainer", str(project), "tokrun", {"epochs": "1"}),
                        stdin=token.encode())
        try:
            console = project / "tokrun" / "console.log"
            assert wait_until(lambda: console.exists() and b"token length" in console.read_bytes())
            assert console.read_text().split()[2] == str(len(token))
            assert token not in result.command
            for proc in Path("/proc").glob("[0-9]*"):
                try:
                    assert token.encode() not in (proc / "cmdline").read_bytes(), proc
                except OSError:
                    continue
            for root in (Path(sshd.home), project):
                for path in root.rglob("*"):
                    if path.is_file():
                        assert token.encode() not in path.read_bytes(), path
        finally:
            box.signal_group(result.pid, signal.SIGKILL)
