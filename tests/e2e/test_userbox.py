"""A box that logs in as a user without root (as Lambda's ``ubuntu``), its home in an
unusual place, no write access outside it: bootstrap finds the venv with torch in
``~/venv`` (PATH's python3 has none), and the whole cycle works: launch -> watch ->
stop -> pull, with nothing written outside the home."""

from __future__ import annotations

import json
import pwd
import subprocess
from pathlib import Path

import pytest

from remote.link.bootstrap import bootstrap_box
from remote.runs.checks import doctor
from remote.runs.guard import arm_guard, read_guard
from remote.runs.launch import LaunchSpec
from remote.runs.start import start_run
from remote.runs.stop import stop_run
from remote.watch.events import MetricsEvent, StatusEvent
from remote.watch.watcher import Watcher
from remote.weights.pull import local_sha256, pull_weights
from tests.fixtures.providers_standin import ProviderStandin
from tests.fixtures.sshd import SSHServer
from tests.fixtures.watch_log import Collector, wait_until
from trainer import runfiles

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]


#: The instance the box is, on the Vast stand-in; its own key is in the box's environment.
VAST_ID = "4100777"


@pytest.mark.box_env({"CONTAINER_ID": VAST_ID, "CONTAINER_API_KEY": f"vast-key-{VAST_ID}"})
def test_a_non_root_box_runs_launch_watch_stop_pull(user_box: SSHServer, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     vast_standin: ProviderStandin) -> None:
    """The defaults as a user has them: the project and the data path relative to the
    login directory (the user's home), the dataset doctor's verdict holding for the
    launch, and the guard armed on the run by its relative path, ending the billing when
    the run ends."""
    monkeypatch.setenv("GPURENT_DATA_DIR", str(tmp_path / "laptop-data"))
    home = Path(user_box.home)
    before = tmp_path / "before"  # what the user writes after this counts
    before.touch()
    with user_box.connect() as box:
        who = box.run("id -u; printf '%s\\n' \"$HOME\"; touch /opt/gpurent-probe", timeout=30)
        uid, login_home = who.stdout.decode().split()[:2]
        assert int(uid) == pwd.getpwnam(user_box.user).pw_uid != 0
        assert login_home == str(home) and not who.ok  # /opt is not writable for it
        result = bootstrap_box(box, preflight=False)
        assert result.python == f"{home}/venv/bin/python" and result.torch
        assert result.trainer_dir.startswith(f"{home}/.cache/gpurent/")
        made = box.run(f"{box.trainer_prefix} -m trainer shapes data --train 8 --val 4 "
                       "--imgsz 32", timeout=180)
        assert made.ok, made.stderr
        # Relative paths, as the form and `gpurent launch` take them by default: from
        # the login directory, the user's home. What the doctor passes, the run finds.
        assert doctor(box, "data/data.yaml")["ok"] is True
        spec = LaunchSpec("trainer", "runs/train", "r1", {
            "data": "data/data.yaml", "epochs": "500", "batch": "8", "imgsz": "32",
            "workers": "0", "device": "cpu"})
        started = start_run(box, spec, wait=60)
        assert not started.failed, started.error
        assert f"data={home}/data/data.yaml " in started.result.command
        prefix = box.trainer_prefix
        iid = vast_standin.add_instance(VAST_ID)
        vast_standin.instance_key(iid, f"vast-key-{VAST_ID}")
        # As a user arms it: the account key stays on the laptop, the guard on the box
        # acts with the instance's own key.
        guard = arm_guard(box, "runs/train/r1", "done", "stop", None, "vast", iid,
                          vast_standin.key, base_url=vast_standin.base_url, poll=0.2)
        assert guard.watching, guard
    run_dir = home / "runs" / "train" / "r1"

    def connect():
        transport = user_box.connect()
        transport.trainer_prefix = prefix
        return transport

    events = Collector()
    watcher = Watcher(connect, started.result.run_dir, events)
    watcher.start()
    try:
        assert wait_until(lambda: any(isinstance(e, MetricsEvent) and e.rows
                                      for _, e in events.snapshot()), 240), \
            (run_dir / runfiles.CONSOLE_FILE).read_text()[-2000:]
        with user_box.connect() as box:
            stopped = stop_run(box, started.result.run_dir, timeout=120)
        assert stopped.outcome == "stopped", stopped.detail
        assert wait_until(lambda: any(isinstance(e, StatusEvent)
                                      and e.health.verdict == "stopped"
                                      for _, e in events.snapshot()), 60)
    finally:
        watcher.stop()
    with user_box.connect() as box:
        pulled = pull_weights(box, started.result.run_dir, tmp_path / "pulled",
                              files=("best.pt", "last.pt"))
    for item in pulled:
        assert local_sha256(item.local_path) == item.sha256 == \
            local_sha256(run_dir / "weights" / item.name)
    status = json.loads((run_dir / runfiles.STATUS_FILE).read_text())
    assert status["state"] == "stopped"
    # The run ended: the guard stops the instance.
    with user_box.connect() as box:
        assert wait_until(lambda: (read_guard(box, "runs/train/r1") or guard).state == "done",
                          120), read_guard(box, "runs/train/r1")
    [stop] = vast_standin.calls("PUT", iid)
    assert stop.scope == "instance"  # the instance's own key, never the account's
    assert vast_standin.instances[iid]["intended_status"] == "stopped"
    owner = pwd.getpwnam(user_box.user).pw_uid
    assert run_dir.stat().st_uid == owner
    # torch keeps its own compile cache in /tmp/torchinductor_USER; nothing else of
    # ours may land outside the home.
    stray = subprocess.run(["find", "/tmp", "/var/tmp", "/dev/shm", "-xdev", "-user",
                            user_box.user, "-newer", str(before), "-not", "-path", f"{home}*",
                            "-not", "-path", f"/tmp/torchinductor_{user_box.user}*"],
                           capture_output=True, text=True, timeout=120)
    assert stray.stdout.split() == [], "the box user wrote outside its home"
