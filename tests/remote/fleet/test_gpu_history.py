"""GPU use over the last minutes, from the box's GPU ring, through the real listing: a
provider stand-in, a real sshd box whose ``nvidia-smi`` is a script the test answers
for (``tests.fixtures.gpubox``). Each listing adds the sample it takes; the listing
and ``gpurent instances`` say the GPUs now and over the last minutes; a box whose ring
shows 20 quiet minutes under a live run is idle from the ring's quiet start (the dollars
the stand-in's price gives), a hole in the ring is not bridged, and the watchdog acts
on its first pass; a ring of garbage is ignored and never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from remote.billing.accounts import Account
from remote.commands.instances import row_line
from remote.fleet.fleet import FleetOptions, FleetRow, list_fleet
from remote.fleet.watchdog import Rules, watch_once
from tests.fixtures.fleet_kit import held_run
from tests.fixtures.gpubox import GpuBox, quiet_lines
from tests.fixtures.paths import ROOT
from trainer.guard import ring

GPURENT = Path(sys.executable).with_name("gpurent")
#: The stand-in's Vast price for ``dph_base=1.0, storage_total_cost=0.2``.
PRICE = {"dph_base": 1.0, "storage_total_cost": 0.2}
PER_HOUR = 1.2


def account(standin) -> Account:
    return Account(standin.provider, "default", standin.key, standin.base_url)


def reach(tmp_path: Path, box: GpuBox, *targets: str) -> FleetOptions:
    known = tmp_path / "known_hosts"
    known.write_text("".join(f"{t} {box.server.host_key_line}\n" for t in targets))
    return FleetOptions(timeout=10, weights=False, ssh_options={
        "known_hosts": str(known), "identity_files": (box.server.key_path,),
        "allow_agent": False, "ssh_config": box.server.ssh_config})


def one_row(standin, options: FleetOptions) -> tuple[FleetRow, float]:
    fleet = list_fleet([account(standin)], options)
    [row] = fleet.rows
    assert row.box is not None, row.unreachable
    return row, fleet.now


@pytest.fixture
def live_run(gpu_box: GpuBox) -> Iterator[Path]:
    """A run on the box whose process holds (live, started two hours ago: before any
    quiet stretch these tests plant), registered as launched runs are."""
    with held_run(gpu_box.server, started_ago=2 * 3600) as run_dir:
        yield run_dir

def test_each_listing_adds_its_sample_and_says_the_gpus_now_and_over_the_last_minutes(
        provider_standin, gpu_box, tmp_path):
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, gpu_box.server.host, gpu_box.server.port)
    options = reach(tmp_path, gpu_box, f"vast:{iid}")
    # No ring yet: the first listing starts it with the sample it takes.
    gpu_box.smi.answer(3)
    row, _now = one_row(vast, options)
    assert len(gpu_box.lines()) == 1
    assert row.box.gpu_words() == ["GPU 3% now, 1.2/80 GiB", "no GPU history yet"]
    # 25 minutes the guard saw (a 7% moment among them, more memory than now).
    gpu_box.plant(quiet_lines(25 * 60, 8 * 60, 60) + quiet_lines(7 * 60, 7 * 60, 60, util=7)
                  + quiet_lines(6 * 60, 60, 60))
    planted = len(gpu_box.lines())
    row, now = one_row(vast, options)
    assert len(gpu_box.lines()) == planted + 1
    assert row.box.gpu_words() == ["GPU 3% now, 1.2/80 GiB",
                                   "25 min: avg 2%, max 7%, 1.3/80 GiB at most"]
    line = row_line(row, now)
    assert "GPU 3% now, 1.2/80 GiB; 25 min: avg 2%, max 7%" in line
    history = row.to_dict(now)["box"]["gpu_history"]
    assert history["samples"] == planted + 1 and history["util_max"] == 7
    assert history["quiet_since"] == history["first"]  # all under 10% (7% too)
    # The command, as a user runs it (its known hosts and key from ~/.ssh/config).
    home = tmp_path / "laptop"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host *\n  IdentityFile {gpu_box.server.key_path}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {tmp_path / 'known_hosts'}\n")
    env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
           "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "VAST_API_KEY": vast.key,
           "GPURENT_VAST_URL": vast.base_url}
    command = [str(GPURENT), "instances", "--no-weights", "--idle-gpu", "5"]
    said = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert said.returncode == 0, said.stderr
    assert "GPU 3% now, 1.2/80 GiB; 25 min: avg 2%, max 7%" in said.stdout
    body = json.loads(subprocess.run([*command, "--json"], env=env, capture_output=True,
                                     text=True, timeout=120).stdout)
    history = body["rows"][0]["box"]["gpu_history"]
    assert history["samples"] == planted + 3 and history["threshold"] == 5
    assert history["quiet_since"] > history["last"] - 7 * 60  # under 5%: after the 7%
    assert len(gpu_box.lines()) == planted + 3
    # nvidia-smi fails: its words said, no sample added, the history still told.
    gpu_box.smi.answer(text="Unable to determine the device handle for GPU0: Unknown Error\n",
                       rc=9)
    row, now = one_row(vast, options)
    assert len(gpu_box.lines()) == planted + 3 and row.box.gpus is None
    assert "nvidia-smi: Unable to determine the device handle" in row_line(row, now)
    assert row.box.gpu_words()[0].startswith("25 min: avg 2%")
    # The probe's shell cuts a full ring back as the guard's writer does.
    gpu_box.smi.answer(4)
    gpu_box.plant(quiet_lines(2 * ring.KEEP * 5, 5, 5))
    assert len(gpu_box.lines()) == 2 * ring.KEEP
    one_row(vast, options)
    kept = ring.parse(gpu_box.ring.read_bytes())
    assert len(kept) == ring.KEEP and [g.util for g in kept[-1].gpus] == [4]


def test_a_run_alive_on_quiet_gpus_is_idle_since_the_ring_saw_them_go_quiet(
        provider_standin, gpu_box, live_run, tmp_path):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance(**PRICE)
    vast.set_address(iid, gpu_box.server.host, gpu_box.server.port)
    vast.started(iid, 47 * 60 + 5)
    options = reach(tmp_path, gpu_box, f"vast:{iid}")
    gpu_box.smi.answer(2)
    # Quiet for 40 minutes, but nobody looked for 15 of them: only the last 10 count.
    gpu_box.plant(quiet_lines(40 * 60, 25 * 60, 60) + quiet_lines(10 * 60, 60, 60))
    row, now = one_row(vast, options)
    assert [r.live for r in row.box.runs] == [True]
    assert row.idle is not None and row.idle.why == "GPUs under 10% with a run alive"
    assert row.idle.seconds == pytest.approx(10 * 60, abs=15)
    assert row.idle.words() == "idle 10 min, $0.20"
    # Quiet for 20 minutes after a busy moment, every 30 s (the guard's poll).
    gpu_box.plant(quiet_lines(21 * 60, 21 * 60, 60, util=85)
                  + quiet_lines(20 * 60, 30, 30))
    row, now = one_row(vast, options)
    idle = row.idle
    assert idle is not None and idle.since == pytest.approx(now - 20 * 60, abs=15)
    assert idle.dollars == pytest.approx(idle.seconds * PER_HOUR / 3600)
    assert idle.words() == "idle 20 min, $0.40"  # 20 min at $1.20/h
    assert row.to_dict(now)["idle"]["words"] == "idle 20 min, $0.40"
    # The watchdog's first pass sees the same 20 minutes and stops it (rule: 15).
    [decision] = watch_once([account(vast)], Rules(idle_minutes=15), options,
                            confirm_timeout=20.0, interval=0.05)
    assert (decision.trigger, decision.action, decision.acted) == ("idle", "stop", True)
    assert "idle 20 min" in decision.reason and "with a run alive" in decision.reason
    assert vast.instances[iid]["actual_status"] == "stopped"


def test_a_ring_of_garbage_is_ignored_and_never_shown(provider_standin, gpu_box, tmp_path):
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, gpu_box.server.host, gpu_box.server.port)
    now = int(time.time())
    gpu_box.plant(
        b"\x1b]0;pwned\x07\x1b[2J[/][bold red]\n"
        + f"{now - 600} \x1b[31m0, 1, 2, 3\n".encode()
        + f"{now - 300} [/], 1, 2, 3\n".encode()
        + f"{now + 3600} 0, 99, 80000, 81559\n".encode()  # after the box's now
        + b"99999999999999 0, 1, 2, 3\n\xff\xfe\x00\x9b2J\n"
        + b"y" * (ring.MAX_READ_BYTES // 2) + b"\n")
    gpu_box.smi.answer(50, 0)
    row, now_laptop = one_row(vast, options := reach(tmp_path, gpu_box, f"vast:{iid}"))
    past = row.box.gpu_history()
    assert (past.samples, past.util_max) == (1, 50)  # the future one is left out
    assert row.box.gpu_words() == ["GPU 50/0% now, 1.2/80 GiB", "no GPU history yet"]
    text = row_line(row, now_laptop) + json.dumps(row.to_dict(now_laptop))
    assert "pwned" not in text and "\x1b" not in text and "[/]" not in text
    assert row.idle is None  # a GPU is busy now
    again, _now = one_row(vast, options)
    assert again.box.gpu_history().samples == 2
