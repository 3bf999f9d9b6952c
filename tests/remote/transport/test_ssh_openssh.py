"""SSH settings as OpenSSH resolves them (``ssh -G``): an alias from an ``Include``d file
and one set by ``Match host`` reach the real sshd fixture, tokens and ProxyCommand work,
``-i KEY`` works on the CLI and the TUI, and RunPod's basic proxy is refused before any
network traffic. Every config here is a test file (``-F``) or lives under a temp
``HOME``; the real ``~/.ssh`` is never read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from remote.transport import openssh
from remote.transport.base import TransportError
from remote.transport.ssh import connect
from tests.fixtures.paths import ROOT
from tests.fixtures.sshd import SSHServer, keygen
from tests.fixtures.tui_main_kit import specs

GPURENT = Path(sys.executable).with_name("gpurent")

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None,
                                reason="these tests are about asking the ssh client")


def entry(name: str, server: SSHServer, *extra: str) -> str:
    """A ``Host``/``Match`` block body reaching the fixture's sshd."""
    lines = [f"HostName {server.host}", f"Port {server.port}", f"User {server.user}",
             f"IdentityFile {server.key_path}", "IdentitiesOnly yes", *extra]
    return name + "\n" + "".join(f"  {line}\n" for line in lines)


def reach(alias: str, config: Path, server: SSHServer, **options: object) -> bytes:
    """Connect by ``alias`` with ``config`` and run a command on the box."""
    options = {"known_hosts": server.known_hosts, **options}
    with connect(alias, ssh_config=str(config), allow_agent=False, **options) as box:
        return box.run("echo reached").stdout


def test_an_alias_from_an_included_file_reaches_the_box(sshd, tmp_path, monkeypatch):
    # As SkyPilot writes it: the main config pulls generated files in with Include.
    generated = tmp_path / "generated"
    generated.mkdir()
    (generated / "cluster.conf").write_text(entry("Host skybox", sshd))
    config = tmp_path / "config"
    config.write_text(f"Include {generated}/*.conf\n\nHost *\n  ServerAliveInterval 7\n")
    assert reach("skybox", config, sshd) == b"reached\n"
    spec = openssh.resolve(openssh.find_client(), "skybox", config=str(config))
    assert (spec.hostname, spec.port, spec.keepalive) == (sshd.host, sshd.port, 7.0)
    # paramiko's parser (no ssh client) does not follow Include: what users ran into.
    monkeypatch.setenv(openssh.CLIENT_ENV, "none")
    with pytest.raises(TransportError, match="cannot resolve skybox"):
        reach("skybox", config, sshd, timeout=5.0)


def test_match_host_and_tokens_reach_the_box(sshd, tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir()
    shutil.copy(sshd.key_path, keys / "gpubox_key")  # found through %n below
    config = tmp_path / "config"
    config.write_text(
        "Match host gpubox,other\n"
        f"  HostName {sshd.host}\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {keys}/%n_key\n  IdentitiesOnly yes\n  ConnectTimeout 9\n")
    assert reach("gpubox", config, sshd) == b"reached\n"
    spec = openssh.resolve(openssh.find_client(), "gpubox", config=str(config))
    assert spec.identity_files == (str(keys / "gpubox_key"),)
    assert spec.connect_timeout == 9.0 and spec.identities_only
    # The user and port typed win over the config, as with ssh.
    typed = openssh.resolve(openssh.find_client(), "alice@gpubox:2200", config=str(config))
    assert (typed.user, typed.port) == ("alice", 2200)


def test_proxycommand_runs_through_a_shell_with_tokens(sshd, tmp_path):
    # The classic bastion setup: ssh -W %h:%p through another (here the same) host.
    config = tmp_path / "config"
    config.write_text(
        entry("Host bastion", sshd, f"UserKnownHostsFile {sshd.known_hosts}",
              "BatchMode yes") +
        entry("Host behind", sshd, f"ProxyCommand ssh -F {config} -W %h:%p bastion"))
    steps: list[str] = []
    assert reach("behind", config, sshd, progress=steps.append) == b"reached\n"
    spec = openssh.resolve(openssh.find_client(), "behind", config=str(config))
    assert spec.proxy_command == f"ssh -F {config} -W {sshd.host}:{sshd.port} bastion"


def test_host_key_alias_and_default_known_hosts(sshd, tmp_path):
    # The key is filed under the alias, whatever address the box has today.
    known = tmp_path / "known_hosts"
    known.write_text(f"mybox-key {sshd.host_key_line}\n")
    config = tmp_path / "config"
    config.write_text(entry("Host aliased", sshd, "HostKeyAlias mybox-key",
                            f"UserKnownHostsFile {known}"))
    assert reach("aliased", config, sshd, known_hosts=None) == b"reached\n"
    # OpenSSH's default known_hosts files (printed under the account's home) mean ours:
    # ~/.ssh/known_hosts under $HOME.
    plain = openssh.resolve(openssh.find_client(), "example.org", config=os.devnull)
    assert plain.known_hosts is None and plain.host_key_alias is None


def test_a_broken_config_is_one_line(tmp_path):
    config = tmp_path / "config"
    config.write_text("Host x\n  NoSuchOption yes\n")
    with pytest.raises(TransportError) as info:
        openssh.resolve(openssh.find_client(), "x", config=str(config))
    assert "nosuchoption" in str(info.value).lower() and "\n" not in str(info.value)
    with pytest.raises(TransportError, match="does not exist"):
        openssh.resolve(openssh.find_client(), "x", config=str(tmp_path / "missing"))


def laptop(tmp_path: Path, config_text: str) -> dict[str, str]:
    """A laptop HOME whose ~/.ssh/config is ``config_text`` (ssh is pointed at it)."""
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(config_text)
    return {"HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
            "XDG_CONFIG_HOME": str(tmp_path / "xdg")}


def gpurent(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_cli_reads_include_from_the_laptop_home_and_takes_dash_i(sshd, tmp_path):
    run = Path(sshd.home) / "openssh-runs" / "r1"
    from tests.fixtures.run_sim import main as simulate

    assert simulate([str(run), "--epochs", "1", "--epoch-seconds", "0.01"]) == 0
    extra = tmp_path / "extra.conf"
    extra.write_text(entry("Host incbox", sshd, f"UserKnownHostsFile {sshd.known_hosts}"))
    env = laptop(tmp_path, f"Include {extra}\n")
    done = gpurent(env, "status", f"incbox:{run}", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["health"] == "completed"

    # No IdentityFile anywhere: only -i KEY lets us in.
    env = laptop(tmp_path / "b", f"Host *\n  UserKnownHostsFile {sshd.known_hosts}\n"
                                 "  IdentitiesOnly yes\n")
    where = f"{sshd.user}@{sshd.host}:{run}"
    refused = gpurent(env, "status", where, "-p", str(sshd.port))
    assert refused.returncode == 1 and "permission denied" in refused.stderr
    done = gpurent(env, "status", where, "-p", str(sshd.port), "-i", sshd.key_path)
    assert done.returncode == 0, done.stderr
    missing = gpurent(env, "status", where, "-i", str(tmp_path / "nokey"))
    assert missing.returncode == 2
    assert missing.stderr == f"gpurent status: -i {tmp_path / 'nokey'}: no such key file\n"


def test_tui_takes_dash_i(tmp_path, capsys):
    key = tmp_path / "k"
    keygen(key, "t")
    got = specs("box", "-i", str(key))
    assert dict(got[0].ssh_options)["identity_files"] == (str(key),)
    with pytest.raises(SystemExit):
        specs("box", "-i", str(tmp_path / "nope"))
    assert "no such key file" in capsys.readouterr().err


# ------------------------------------------------------------------ RunPod's basic proxy

#: Runs a gpurent command with an audit hook that records every attempt at the network.
AUDITED = """
import json, sys
seen = []
def hook(event, args):
    if event.startswith(("socket.connect", "socket.getaddrinfo", "socket.gethostbyname")):
        seen.append(event)
sys.addaudithook(hook)
from remote.cli import main
code = main(sys.argv[1:])
print(json.dumps({"code": code, "network": seen}))
"""


def audited(env: dict[str, str], *args: str) -> tuple[dict[str, object], str]:
    done = subprocess.run([sys.executable, "-c", AUDITED, *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def test_runpod_basic_proxy_is_refused_before_any_traffic(tmp_path, capsys):
    env = laptop(tmp_path, "Host rp\n  HostName ssh.runpod.io\n  User k3x9z2abc8d7-64411f3a\n")
    result, err = audited(env, "status", "k3x9z2abc8d7-64411f3a@ssh.runpod.io:runs/x")
    assert result == {"code": 2, "network": []}
    assert err.count("\n") == 1 and "basic SSH proxy" in err and "runpod:k3x9z2abc8d7" in err
    # Through an alias, it is found once ssh -G has resolved it: still no traffic.
    result, err = audited(env, "status", "rp:runs/x")
    assert result == {"code": 1, "network": []}
    assert "basic SSH proxy" in err and "public IP" in err
    # The TUI refuses it with its arguments.
    with pytest.raises(SystemExit) as info:
        specs("root@ssh.runpod.io")
    assert info.value.code == 2 and "basic SSH proxy" in capsys.readouterr().err
