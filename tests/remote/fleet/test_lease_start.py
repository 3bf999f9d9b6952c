"""A lease given at launch and at arm time (``gpurent launch ... --lease``, ``gpurent
guard ... arm --lease``): the same lease as ``gpurent lease``, on this laptop for the
watchdog and on the box for its guard; only for an instance the user named; an armed
guard acts on it once it runs out."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from remote.cli import main as gpurent
from remote.fleet.leases import lease_for
from tests.fixtures.guard_kit import stop_guard, wait_until
from tests.fixtures.guard_runs import make_run
from tests.fixtures.sshd import SSHServer, make_server


@pytest.fixture
def box(tmp_path, monkeypatch) -> SSHServer:
    """A box of its own, reached as ``ssh`` would (this laptop's HOME: its key and
    known_hosts in ``~/.ssh/config``)."""
    server = make_server(tmp_path / "box")
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {server.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SSH_AUTH_SOCK", "")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    yield server
    server.sshd.stop()


def test_a_launch_gives_its_instance_a_lease_even_when_the_launch_fails(
        provider_standin, box, tmp_path, monkeypatch, capsys):
    runpod = provider_standin("runpod")
    pod = runpod.add_instance()
    runpod.set_address(pod, box.host, box.port, box.user)
    (tmp_path / "known_hosts").write_text(f"runpod:{pod} {box.host_key_line}\n")
    monkeypatch.setenv("RUNPOD_API_KEY", runpod.key)
    monkeypatch.setenv("GPURENT_RUNPOD_URL", runpod.base_url)
    # No instance named: refused before anything is reached or recorded.
    assert gpurent(["launch", f"{box.user}@{box.host}:proj", "name=r", "--lease", "6h",
                    "-p", str(box.port)]) == 2
    assert "--lease needs the instance named" in capsys.readouterr().err
    with pytest.raises(SystemExit) as bad:
        gpurent(["launch", f"runpod:{pod}:proj", "name=r", "--lease", "soon"])
    assert bad.value.code == 2 and "not a duration" in capsys.readouterr().err
    # LibreYOLO is not on this box: the launch fails, the lease holds on both sides.
    code = gpurent(["launch", f"runpod:{pod}:proj", "name=r", "--engine", "libreyolo",
                    "--lease", "1h30m", "--lease-then", "destroy", "--wait", "0"])
    err = capsys.readouterr().err
    assert code == 1, err
    assert f"runpod:{pod}: lease until" in err and "written on the box" in err
    lease = lease_for(f"runpod:{pod}")
    assert lease is not None and lease.then == "destroy"
    assert abs(lease.left() - 5400) < 60
    on_box = json.loads((Path(box.home) / ".cache" / "gpurent" / "lease.json").read_text())
    assert (on_box["target"], on_box["until"]) == (f"runpod:{pod}", lease.until)


def test_arming_with_a_lease_sets_it_and_the_guard_acts_when_it_runs_out(
        tmp_path, vast_standin, monkeypatch, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    config = tmp_path / "cfg" / "gpurent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text("[vast]\nsend_account_key = true\n")
    os.chmod(config, 0o600)
    iid = vast_standin.add_instance()
    trainer = subprocess.Popen(["sleep", "600"])
    run_dir = tmp_path / "run"
    try:
        make_run(run_dir, trainer.pid, best=False)  # no weights: no final push to wait for
        base = ["guard", str(run_dir)]
        assert gpurent([*base, "show", "--lease", "6h"]) == 2
        assert "--lease goes with arm" in capsys.readouterr().err
        assert gpurent([*base, "arm", "--lease", "6h"]) == 2  # the box would name it
        assert "--lease needs the instance named" in capsys.readouterr().err
        started = time.time()
        assert gpurent([*base, "arm", "--provider", "vast", "--instance", iid,
                        "--base-url", vast_standin.base_url, "--poll", "0.2",
                        "--lease", "2s", "--json"]) == 0
        said = capsys.readouterr()
        assert json.loads(said.out)["lease"]["target"] == f"vast:{iid}"
        assert f"vast:{iid}: lease until" in said.err and "written on the box" in said.err
        lease = lease_for(f"vast:{iid}")
        assert lease is not None and abs(lease.until - started - 2) < 5
        wait_until("the guard's stop", lambda: vast_standin.calls("PUT"), timeout=30)
        assert time.time() >= lease.until
        assert "lease" in (run_dir / "guard.log").read_text()
    finally:
        trainer.kill()
        trainer.wait()
        stop_guard(run_dir)
    assert not vast_standin.calls("DELETE")
