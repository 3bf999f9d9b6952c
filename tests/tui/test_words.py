"""The pure parts of the TUI's truthfulness: the words for quitting per state, the one
line (with the next step) for each kind of failure, ages that do not freeze, the reattach
command, and the headless pieces under them (runs that failed to start, the box's CPU
and RAM in the follower's stream, the link checks)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.billing.teardown import DestroyDecision, DestroyRefused
from remote.link.connector import link_broken, retry_delay, worth_retrying
from remote.runs.guard import GuardError
from remote.runs.read import list_runs
from remote.transport.base import NeedsSetup, TransportError
from remote.transport.local import LocalTransport
from tests.fixtures.tui_runs import write_run
from trainer.smi import HostLoad
from tui.box.failures import ActionRefused, describe
from tui.fmt import advance_ages
from tui.spec import BoxSpec
from tui.words import Standing, farewell, quit_offers, quit_text, quit_title


def standing(**kw) -> Standing:
    base = dict(title="box1", local=False, demo=False, run="exp3", verdict="live",
                price=3.0, reattach="gpurent-tui box1 --run exp3")
    base.update(kw)
    return Standing(**base)


def test_quit_words_for_a_live_run_on_a_billing_box():
    s = standing(weights_safe=False)
    text = quit_text([s]).plain
    assert "run exp3 keeps training" in text and "keeps billing $3.00/h" in text
    assert "weights NOT safe" in text and "arm the guard?" in text
    assert quit_offers([s]) == [("arm", "Arm the guard")]
    assert quit_title([s]) == "Detach and quit"
    line = farewell(s)
    assert "keeps training; the box bills $3.00/h" in line and "guard off" in line
    assert line.endswith("reattach: gpurent-tui box1 --run exp3")


def test_quit_words_with_the_guard_armed_offer_nothing_to_arm():
    s = standing(guard_watching=True, guard_summary="guard armed: when done then stop",
                 weights_safe=True, weights_where="hub")
    text = quit_text([s]).plain
    assert "guard armed: when done then stop" in text and "arm the guard" not in text
    assert "weights safe (hub)" in text
    assert quit_offers([s]) == []


@pytest.mark.parametrize("verdict, words", [("completed", "run exp3 completed"),
                                            ("failed", "run exp3 failed"),
                                            ("dead", "run exp3 died"),
                                            ("stopped", "run exp3 was stopped")])
def test_quit_words_for_an_ended_run_on_a_billing_box(verdict, words):
    s = standing(verdict=verdict, can_stop_instance=True)
    text = quit_text([s]).plain
    assert words in text and "idle at $3.00/h — stop it?" in text
    assert "keeps training" not in text and "keeps going" not in text
    assert quit_offers([s]) == [("stop-instance", "Stop the instance")]
    assert "the box is idle and bills $3.00/h until you stop it" in farewell(s)
    no_provider = standing(verdict=verdict)
    assert "until you stop it at your provider" in quit_text([no_provider]).plain
    assert quit_offers([no_provider]) == []


def test_quit_words_on_this_machine_never_speak_of_money():
    done = standing(local=True, verdict="completed", price=2.0)
    demo = standing(local=True, demo=True, verdict="live")
    for s in (done, demo):
        text = quit_text([s]).plain + farewell(s)
        assert "$" not in text and "bill" not in text and "keeps going" not in text
    assert quit_title([done]) == "Quit"
    assert "the demo trainer" in quit_text([demo]).plain
    assert quit_offers([demo]) == [("stop-demo", "Stop the demo and quit")]


def test_reattach_commands():
    ssh = BoxSpec("ssh", "root@203.0.113.7", port=41022, project="/workspace/runs",
                  provider="vast", instance="41", price=3.0)
    assert ssh.reattach("exp3") == ("gpurent-tui root@203.0.113.7 -p 41022 --project "
                                    "/workspace/runs --provider vast --instance 41 "
                                    "--price 3 --run exp3")
    local = BoxSpec("local", "local", project="/home/me/my runs")
    assert local.reattach() == "gpurent-tui --local '/home/me/my runs'"
    # The key it logged in with and the python it trained with come back too.
    keyed = BoxSpec("ssh", "box1", project="runs/train", python="/opt/py/bin/python3",
                    ssh_options=(("identity_files", ("/home/me/.ssh/vast key",)),))
    assert keyed.reattach("exp3") == ("gpurent-tui box1 -i '/home/me/.ssh/vast key' "
                                      "--project runs/train --python /opt/py/bin/python3 "
                                      "--run exp3")


def test_ages_move_on_instead_of_freezing():
    assert advance_ages("best.pt was never pushed (written 2m07s ago)", 65) == \
        "best.pt was never pushed (written 3m12s ago)"
    assert advance_ages("updated 0s ago, an epoch takes ~42s", 3) == \
        "updated 3s ago, an epoch takes ~42s"
    assert advance_ages("updated 59m50s ago", 20) == "updated 1h00m ago"
    assert advance_ages("no age here, ~42s", 100) == "no age here, ~42s"


@pytest.mark.parametrize("name, error, expected, severity", [
    ("pull", TransportError("/r/weights/best.pt does not exist on box: the trainer writes "
                            "it after the first validated epoch; pull again then"),
     "pull failed: /r/weights/best.pt does not exist on box: the trainer writes it after "
     "the first validated epoch; pull again then", "error"),
    ("pull", OSError(28, "No space left on device"),
     "pull failed: [Errno 28] No space left on device — w tries again", "error"),
    ("set_guard", GuardError("a guard is already armed on this run (pid 7): disarm it "
                             "first"),
     "guard failed: a guard is already armed on this run (pid 7): disarm it first",
     "error"),
    ("start_launch", ValueError("no Hugging Face token here: set HF_TOKEN or log in with "
                                "`hf auth login`"),
     "launch failed: no Hugging Face token here: set HF_TOKEN or log in with "
     "`hf auth login`", "error"),
    ("pull", ActionRefused("no run selected (l: launch, or pick one in the runs list)"),
     "no run selected (l: launch, or pick one in the runs list)", "warning"),
    ("push", KeyError("boom"), "push failed: KeyError: 'boom' (unexpected: please report "
                               "it) — u tries again", "error"),
])
def test_every_failure_is_one_line_with_the_next_step(name, error, expected, severity):
    failure = describe(name, error)
    assert failure.line == expected and failure.severity == severity
    assert "\n" not in failure.line


def test_a_broken_link_says_reconnecting_and_a_refused_gate_rings():
    lost = describe("stop_run", TransportError("the connection to box1 was lost"))
    assert lost.link and lost.line.endswith("the link to the box is down; reconnecting "
                                            "on its own (r: now)")
    timeout = describe("pull", TimeoutError("no answer within 15s"))
    assert timeout.link
    gate = describe("instance_call", DestroyRefused(
        DestroyDecision(False, "best.pt is not safe: push or pull first")))
    assert gate.bell and gate.line.startswith("instance refused: best.pt is not safe")
    not_link = describe("pull", TransportError("cannot hash x on box: no output"))
    assert not not_link.link


def test_link_and_retry_decisions():
    class Dead:
        is_active = False

    assert link_broken(ValueError("anything"), Dead())
    assert link_broken(TransportError("the connection to box is closed"))
    assert not link_broken(TransportError("launch failed: exit 1"))
    assert worth_retrying(TransportError("cannot connect to box: Connection refused"))
    assert not worth_retrying(TransportError("ssh config /x does not exist"))
    assert not worth_retrying(NeedsSetup("vast:1: no API key for Vast.ai: set VAST_API_KEY"))
    assert [retry_delay(n) for n in range(8)] == [1, 2, 4, 8, 15, 30, 30, 30]


def test_runs_that_never_wrote_a_status_are_listed(tmp_path: Path):
    write_run(tmp_path / "ok", done=1, total=2, state="completed")
    starting = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for name, pid in (("crashed", 999_999), ("booting", starting.pid)):
            (tmp_path / name).mkdir()
            (tmp_path / name / "launch.pid").write_text(f"{pid}\n")
        (tmp_path / "not-a-run").mkdir()
        runs = {r.name: r for r in list_runs(LocalTransport(), str(tmp_path))}
        assert set(runs) == {"ok", "crashed", "booting"}
        assert runs["crashed"].health == "failed"
        assert runs["crashed"].reason.startswith("failed to start")
        assert runs["booting"].health == "starting"
    finally:
        starting.kill()
        starting.wait()


def test_host_load_reads_cpu_and_ram(tmp_path: Path):
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "meminfo").write_text("MemTotal:  16384000 kB\nMemFree: 1 kB\n"
                                  "MemAvailable:  4096000 kB\n")
    (proc / "stat").write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 1 2 3 4\n")
    load = HostLoad(str(proc))
    first = load.sample()
    assert first is not None and first["cpu"] is None  # a rate needs two samples
    assert first["mem_total_mib"] == 16000.0 and first["mem_used_mib"] == 12000.0
    (proc / "stat").write_text("cpu  150 0 150 900 0 0 0 0 0 0\n")
    assert load.sample()["cpu"] == 50.0  # 100 busy of 200 jiffies
    assert HostLoad(str(tmp_path / "nothing")).sample() is None
    if os.path.exists("/proc/stat"):
        assert HostLoad().sample()["mem_total_mib"] > 0


def test_quit_words_once_the_instance_is_stopped_speak_of_its_disk_only():
    """The guard (or the provider) stopped the instance: no "idle at $3.00/h", no offer
    to stop it; what still bills is its disk."""
    s = standing(verdict="stopped", can_stop_instance=True, stopped=True, instance="41",
                 storage_price=250 * 0.20 / 720)
    text = quit_text([s]).plain
    assert "run exp3 was stopped; instance 41 is stopped: its disk bills $0.0694/h." in text
    assert "idle" not in text and "$3.00" not in text and "stop it" not in text
    assert quit_offers([s]) == []
    line = farewell(s)
    assert "instance 41 is stopped: its disk bills $0.0694/h" in line
    assert "idle" not in line and "until you stop it" not in line
