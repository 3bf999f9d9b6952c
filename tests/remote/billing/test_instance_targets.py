"""Boxes named by their instance (``vast:ID``, ``runpod:ID``, ``lambda:ID``): the SSH
address comes from the provider's API (the real clients against the stand-ins, in each
provider's documented shape), the real sshd fixture is reached at that address, and a
new address after a stop and a start is followed, by the CLI and by the TUI."""

from __future__ import annotations

import getpass
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.billing.address import Locator
from remote.billing.providers import (
    ConfigError,
    InstanceTarget,
    provider_for,
    resolve_base_url,
    resolve_instance,
    split_instance_target,
)
from remote.commands.target import host_target, parse_target
from remote.link.connector import Connector
from remote.resume.resume import wait_for_ssh
from remote.transport.base import TransportError, Unreachable
from tests.fixtures.instance_targets_kit import instance_on, laptop
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_main_kit import specs
from trainer.providers import ProviderError, get_provider
from trainer.providers.confirm import stop_and_confirm

GPURENT = Path(sys.executable).with_name("gpurent")
#: Vast's boxes log in as root: reaching the fixture's sshd as Vast needs the tests' user
#: to be root (RunPod's stand-in names the user, so it runs everywhere).
AS_ROOT = getpass.getuser() == "root"


# ------------------------------------------------------------------ parsing the names


def test_instance_targets_parse_wherever_a_host_is_accepted():
    assert split_instance_target("vast:4242") == (InstanceTarget("vast", "4242"), None)
    assert split_instance_target("vast:C.4242:runs/x") == (InstanceTarget("vast", "4242"),
                                                          "runs/x")
    assert split_instance_target("runpod:k3x9z2abc8d7") == (
        InstanceTarget("runpod", "k3x9z2abc8d7"), None)
    assert split_instance_target("box:runs") is None
    assert split_instance_target("vast:runs/train") is None  # an alias `vast` and a path
    with pytest.raises(ValueError, match="not an instance id"):
        split_instance_target("vast:abc")
    target = parse_target("vast:4242:runs/train/exp")
    assert (target.host, target.path, target.instance) == (
        "vast:4242", "runs/train/exp", InstanceTarget("vast", "4242"))
    assert parse_target("lambda:0920582c7ff041399e34823a0be62549").path == "."
    assert host_target("runpod:abc123", "~/runs/x").path == "runs/x"
    with pytest.raises(ValueError, match="give the path separately"):
        host_target("vast:1:runs", "x")
    ref = resolve_instance("runpod:abc123")
    assert (ref.provider, ref.instance, ref.source) == ("runpod", "abc123", "target")
    with pytest.raises(ProviderError, match="names its instance"):
        resolve_instance("runpod:abc123", provider="vast", instance="1")


def test_tui_opens_instances_with_their_provider(capsys):
    got = specs("vast:4242", "runpod:abc123")
    assert [(s.target, s.provider, s.instance, s.title) for s in got] == [
        ("vast:4242", "vast", "4242", "vast:4242"),
        ("runpod:abc123", "runpod", "abc123", "runpod:abc123")]
    for argv, message in [(["vast:abc"], "not an instance id"),
                          (["vast:4242", "-p", "22"], "-p does not go with"),
                          (["vast:4242:runs"], "has no path"),
                          (["vast:4242", "--provider", "runpod", "--instance", "1"],
                           "names its instance")]:
        with pytest.raises(SystemExit):
            specs(*argv)
        assert message in capsys.readouterr().err


# ------------------------------------------------------------------ addresses


def test_each_provider_gives_its_ssh_address_from_its_own_shape(provider_standin):
    vast = provider_standin("vast")
    iid = vast.add_instance()
    client = get_provider("vast", vast.key, vast.base_url)
    inst = client.get_instance(iid)
    assert client.ssh_address(inst).label == "root@203.0.113.9:41022"  # direct first
    # Without a mapped 22/tcp (e.g. a proxy-only machine), Vast's SSH proxy.
    vast.instances[iid]["ports"] = {}
    assert client.ssh_address(client.get_instance(iid)).label == "root@ssh5.vast.ai:31022"
    # API text goes into argv: anything but a host name or address is no address.
    vast.instances[iid].update(ssh_host="-oProxyCommand=touch /tmp/x", ports={})
    assert client.ssh_address(client.get_instance(iid)) is None

    runpod = provider_standin("runpod")
    pid = runpod.add_instance()
    rp = get_provider("runpod", runpod.key, runpod.base_url)
    assert rp.ssh_address(rp.get_instance(pid)).label == "root@203.0.113.7:41022"
    # The v1 shape: publicIp and the port mapped to private port 22.
    runpod.instances[pid].update(ssh={}, publicIp="198.51.100.4", portMappings={"22": 10341})
    assert rp.ssh_address(rp.get_instance(pid)).label == "root@198.51.100.4:10341"
    # The basic proxy is never an address.
    runpod.instances[pid].update(ssh={"direct": {"host": "ssh.runpod.io", "port": 22,
                                                 "username": "root"}}, publicIp="")
    assert rp.ssh_address(rp.get_instance(pid)) is None

    lam = provider_standin("lambda")
    lid = lam.add_instance()
    lc = get_provider("lambda", lam.key, lam.base_url)
    assert lc.ssh_address(lc.get_instance(lid)).label == "ubuntu@198.51.100.2:22"


def test_base_urls_from_the_environment_and_the_config(tmp_path):
    config = tmp_path / "config.toml"
    config.write_text('[runpod]\nbase_url = "http://127.0.0.1:9/v2"\n')
    config.chmod(0o600)
    assert resolve_base_url("runpod", env={}, path=config) == "http://127.0.0.1:9/v2"
    env = {"GPURENT_RUNPOD_URL": "http://127.0.0.1:8/v2"}
    assert resolve_base_url("runpod", env=env, path=config) == "http://127.0.0.1:8/v2"
    assert resolve_base_url("vast", env={}, path=config) is None  # the documented one
    provider = provider_for("runpod", env={**env, "RUNPOD_API_KEY": "k"}, path=config)
    assert provider.base_url == "http://127.0.0.1:8/v2"
    with pytest.raises(ConfigError, match="http"):
        resolve_base_url("vast", env={"GPURENT_VAST_URL": "file:///etc/passwd"}, path=config)


# ------------------------------------------------------------------ reaching the box


@pytest.fixture
def provider_env(monkeypatch, tmp_path) -> Iterator[None]:
    """No laptop config; the stand-ins' URL and key come from the environment."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    yield


def point_at(standin, monkeypatch) -> None:
    name = standin.provider.upper()
    monkeypatch.setenv(f"GPURENT_{name}_URL", standin.base_url)
    monkeypatch.setenv(f"{name}_API_KEY", standin.key)


def box_connector(name: str, server: SSHServer, known: Path, **locator) -> Connector:
    """What ``gpurent ... NAME`` builds: located through the provider on each open."""
    target = split_instance_target(name)[0]
    options = {"known_hosts": str(known), "identity_files": (server.key_path,),
               "allow_agent": False, "ssh_config": server.ssh_config}
    return Connector(name, bootstrap=False, ssh_options=options,
                     locate=Locator(target, **locator))


def server_port(transport) -> int:
    """The port the box's sshd took this session on (from ``$SSH_CONNECTION``)."""
    return int(transport.run("echo $SSH_CONNECTION").stdout.split()[3])


@pytest.mark.parametrize("provider", [
    pytest.param("vast", marks=pytest.mark.skipif(not AS_ROOT, reason="Vast logs in as "
                                                  "root; these tests do not run as root")),
    "runpod"])
def test_an_instance_is_reached_and_its_new_address_followed(
        provider, provider_standin, provider_env, monkeypatch, sshd, moved_sshd, tmp_path):
    standin = provider_standin(provider, settle_polls=2)
    point_at(standin, monkeypatch)
    iid = instance_on(standin, sshd)
    name = f"{provider}:{iid}"
    # The host key is on file under the instance's name only (HostKeyAlias).
    known = tmp_path / "known_hosts"
    known.write_text(f"{name} {sshd.host_key_line}\n")
    connector = box_connector(name, sshd, known)
    steps: list[str] = []
    with connector.open(steps.append) as box:
        assert server_port(box) == sshd.port
    assert f"{name} is at {sshd.user}@{sshd.host}:{sshd.port}" in steps

    client = provider_for(provider)
    assert stop_and_confirm(client, iid, interval=0.01).confirmed
    with pytest.raises(TransportError, match=f"{name} is stopped.*gpurent resume") as info:
        connector.open()
    assert not isinstance(info.value, Unreachable)  # no point in waiting

    standin.move_on_start(iid, sshd.host, moved_sshd.port, sshd.user)
    client.start(iid)
    with pytest.raises(Unreachable, match="starting"):
        connector.open()
    # Waiting for SSH polls the provider until the instance runs at its new address.
    with wait_for_ssh(connector, timeout=60, interval=0.05) as box:
        assert server_port(box) == moved_sshd.port
    assert known.read_text() == f"{name} {sshd.host_key_line}\n"  # nothing new to trust


def test_a_lost_api_keeps_the_last_address(provider_standin, sshd, tmp_path):
    standin = provider_standin("runpod")
    iid = instance_on(standin, sshd)
    known = tmp_path / "known_hosts"
    known.write_text(f"runpod:{iid} {sshd.host_key_line}\n")
    client = get_provider("runpod", standin.key, standin.base_url, retries=0)
    connector = box_connector(f"runpod:{iid}", sshd, known, provider=client)
    connector.open().close()
    standin.fail(503, times=1)
    with connector.open() as box:  # the box is fine; only its provider's API is not
        assert server_port(box) == sshd.port
    standin.fail(401, times=1)
    with pytest.raises(TransportError, match="check the API key"):
        connector.open()


def test_cli_commands_take_instance_targets(provider_standin, sshd, tmp_path):
    standin = provider_standin("runpod")
    iid = instance_on(standin, sshd)
    known = tmp_path / "known_hosts"
    known.write_text(f"runpod:{iid} {sshd.host_key_line}\n")
    env = {**laptop(tmp_path, sshd, known), "RUNPOD_API_KEY": standin.key,
           "GPURENT_RUNPOD_URL": standin.base_url}
    run = Path(sshd.home) / "instance-runs" / "r1"
    from tests.fixtures.run_sim import main as simulate

    assert simulate([str(run), "--epochs", "1", "--epoch-seconds", "0.01"]) == 0

    def gpurent(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(GPURENT), *args], capture_output=True, text=True,
                              timeout=120, env={**os.environ, **env})

    status = gpurent("status", f"runpod:{iid}:{run}", "--json")
    assert status.returncode == 0, status.stderr
    summary = json.loads(status.stdout)
    assert summary["health"] == "completed" and summary["run_dir"] == f"runpod:{iid}:{run}"
    # Provider and instance are known from the name: no --provider/--instance.
    info = gpurent("instance", f"runpod:{iid}", "info", "--json")
    assert info.returncode == 0, info.stderr
    body = json.loads(info.stdout)
    assert (body["provider"], body["instance"], body["source"]) == ("runpod", iid, "target")
    assert body["instance_state"]["ssh_host"] == sshd.host
    bad = gpurent("status", f"runpod:{iid}:{run}", "-p", "22")
    assert bad.returncode == 2 and "-p does not go with" in bad.stderr


def test_the_targets_know_every_provider_that_names_instances() -> None:
    """``remote.commands.target`` tells instance targets by their prefix without loading the
    provider clients: the same names as the billing side's."""
    from remote.billing.providers import INSTANCE_PROVIDERS
    from remote.commands import target

    assert target.INSTANCE_PREFIXES == INSTANCE_PROVIDERS
