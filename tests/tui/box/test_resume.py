"""The TUI with a box named by its instance (``runpod:ID``, the real sshd at the address
the provider stand-in gives): a reconnect asks the provider again and follows a new
address, and the resume key (R) starts a stopped instance and watches its run again."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.instance_targets_kit import instance_on
from tests.fixtures.paths import ROOT
from tests.fixtures.pilot import messages, press_button, shown, until
from tests.fixtures.screen import history
from trainer.providers import get_provider
from trainer.providers.confirm import start_and_confirm, stop_and_confirm
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.dialogs.confirm import ConfirmDialog
from tui.spec import BoxSpec

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def instance_spec(name: str, sshd, standin, known: Path, project: Path,
                  run: str | None = None) -> BoxSpec:
    """What ``gpurent-tui runpod:ID`` opens (the stand-in's URL instead of RunPod's)."""
    kind, _, iid = name.partition(":")
    options = (("known_hosts", str(known)), ("identity_files", (sshd.key_path,)),
               ("allow_agent", False), ("ssh_config", sshd.ssh_config))
    return BoxSpec("ssh", name, project=str(project), run=run, provider=kind, instance=iid,
                   provider_url=standin.base_url, ssh_options=options)


def label_port(box: BoxView) -> int | None:
    return None if box.state.transport is None else int(box.state.transport.label.rsplit(":", 1)[1])


@pytest.fixture
def live_run(sshd) -> Iterator[Path]:
    """A run that is still going on the box (a simulated writer that holds on)."""
    run = Path(sshd.home) / "tui-instance-runs" / "live1"
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "fixtures" / "run_sim.py"),
                             str(run), "--epochs", "1", "--epoch-seconds", "0.01", "--hold"],
                            env={"PYTHONPATH": str(ROOT)}, start_new_session=True)
    yield run
    proc.kill()
    proc.wait(10)


async def test_reconnect_asks_the_provider_and_follows_a_new_address(
        provider_standin, sshd, moved_sshd, monkeypatch, tmp_path):
    standin = provider_standin("runpod")
    monkeypatch.setenv("RUNPOD_API_KEY", standin.key)
    iid = instance_on(standin, sshd)
    known = tmp_path / "known_hosts"
    known.write_text(f"runpod:{iid} {sshd.host_key_line}\n")
    app = GpurentApp([instance_spec(f"runpod:{iid}", sshd, standin, known, tmp_path / "p")])
    async with app.run_test(size=(150, 46)) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: label_port(box) == sshd.port, timeout=120)
        client = get_provider("runpod", standin.key, standin.base_url)
        assert stop_and_confirm(client, iid, interval=0.01).confirmed
        standin.move_on_start(iid, sshd.host, moved_sshd.port, sshd.user)
        assert start_and_confirm(client, iid, interval=0.01).confirmed
        await pilot.press("r")
        await until(pilot, lambda: label_port(box) == moved_sshd.port, timeout=60)


async def test_resume_key_starts_a_stopped_instance_and_watches_its_run(
        provider_standin, sshd, moved_sshd, live_run, monkeypatch, tmp_path):
    standin = provider_standin("runpod")
    monkeypatch.setenv("RUNPOD_API_KEY", standin.key)
    iid = instance_on(standin, sshd)
    client = get_provider("runpod", standin.key, standin.base_url)
    assert stop_and_confirm(client, iid, interval=0.01).confirmed
    standin.move_on_start(iid, sshd.host, moved_sshd.port, sshd.user)
    known = tmp_path / "known_hosts"
    known.write_text(f"runpod:{iid} {sshd.host_key_line}\n")
    spec = instance_spec(f"runpod:{iid}", sshd, standin, known, live_run.parent,
                         run=live_run.name)
    app = GpurentApp([spec])
    async with app.run_test(size=(150, 46)) as pilot:
        box = app.query_one(BoxView)
        box.resume.interval = 0.05
        # Stopped: connecting says so, and what to press.
        await until(pilot, lambda: any("is stopped" in m and "R in gpurent-tui" in m
                                       for m in messages(app)), timeout=60)
        await pilot.press("R")
        await until(pilot, lambda: shown(app, ConfirmDialog), timeout=30)
        body = app.screen.body.plain
        assert "is stopped and bills $0.0694/h" in body and "live1" in body
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: label_port(box) == moved_sshd.port
                    and box.state.run_dir == str(live_run) and box.state.status is not None,
                    timeout=120)
        # The events history keeps every step (a toast of the first ones may have
        # expired while RunPod's pace spaced the start's polls a second apart).
        shown_steps = [m for m in history(app) if m.startswith("[")]
        assert any("is running: billing $0.6900/h again" in m for m in shown_steps)
        assert any(f"SSH answers at {sshd.user}@{sshd.host}:{moved_sshd.port}" in m
                   for m in shown_steps)
        assert any("is still going (live): watching it" in m for m in shown_steps), shown_steps
