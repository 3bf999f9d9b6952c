"""Issue 37, resume from the Hub: ``gpurent resume ORG/REPO:NAME --on B`` restores run
NAME's own ``last.pt`` and status from a repository other runs push to as well, and
refuses, saying whose, when the repository's newest ``last.pt`` is another run's; a
``last.pt`` that arrives damaged is refused and taken out of B's Hugging Face cache, so
the next resume downloads it again. LibreYOLO runs (the stand-in engine, fast; our
trainer writes the same ``save_dir`` in its status and pushes the same way), a real sshd
box; stand-ins for the Hub and the provider. A ``last.pt`` pushed without its status
(``gpurent push --files last.pt``) names no run: ``trainer restore`` refuses it too.

The laptop applies the same rule (``remote.weights.lastsafe.hub_copy``, in process,
asking the Hub stand-in): the fleet's "last safe checkpoint" of a run taken away is the
epoch of the run's own ``last.pt``, or says whose ``last.pt`` the repository holds, and
a resume elsewhere then takes the laptop's pulled copy rather than another run's
milestone."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub.constants
import pytest

from remote.billing import Account, RunIntent, want_running
from remote.config import remember_hub_repo
from remote.fleet import FleetOptions, list_fleet
from remote.resume.fromlaptop import choose
from remote.weights.lastsafe import LaptopRun, hub_copy
from tests.fixtures.fake_libreyolo import libreyolo_shim
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env
from tests.fixtures.instance_targets_kit import instance_on
from tests.fixtures.libreyolo_kit import data_yaml, kill
from tests.fixtures.paths import ROOT
from tests.fixtures.resume_kit import rows
from tests.fixtures.resume_units_kit import _pulled
from tests.fixtures.sshd import SSHServer, make_server
from tests.fixtures.tui_move_kit import FAKE, milestone_on_the_hub
from tests.fixtures.watch_log import wait_until
from trainer import engines, runfiles
from trainer.hub.autopush import live_watchers

pytestmark = pytest.mark.timeout(240)

GPURENT = Path(sys.executable).with_name("gpurent")
FINAL_PUSH = ("import json, sys; from pathlib import Path; "
              "from trainer.hub.autopush import FINAL_FILES, push_files; "
              "print(json.dumps(push_files(Path(sys.argv[1]), 'org/ly', sys.stdin.read(), "
              "FINAL_FILES, None)))")


@dataclass
class BoxB:
    """The new box, its Hugging Face home, the dataset's data.yaml there, and
    ``resume(NAME)``: ``gpurent resume org/ly:NAME --on`` it, detached."""

    server: SSHServer
    hf_home: Path
    data: str
    resume: Callable[[str], subprocess.CompletedProcess[str]]

    @property
    def runs(self) -> Path:
        """The project the runs are resumed into."""
        return Path(self.server.home) / "runs"


@pytest.fixture
def box_b(provider_standin, hub_standin: HubStandin, tmp_path: Path,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[BoxB]:
    """Box B, a RunPod instance whose sessions reach the Hub stand-in and run the
    LibreYOLO stand-in; the laptop's environment to resume onto it."""
    for key, value in {"HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
                       "GPURENT_CACHE_DIR": str(tmp_path / "cache")}.items():
        monkeypatch.setenv(key, value)  # for the pushes made here
    bin_dir = tmp_path / "bin"
    libreyolo_shim(bin_dir, {"FAKE_LIBREYOLO_EPOCH_SECONDS": "0.2",
                             "FAKE_LIBREYOLO_SAVE_SECONDS": "0.01"})
    b = make_server(tmp_path / "b", box_path=[
        str(bin_dir), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"],
        env={"HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
             "HF_HOME": str(tmp_path / "b" / "hf")})
    try:
        runpod = provider_standin("runpod")
        ib = instance_on(runpod, b)
        known = tmp_path / "known_hosts"
        known.write_text(f"runpod:{ib} {b.host_key_line}\n")
        home = tmp_path / "laptop"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "config").write_text(
            f"Host *\n  IdentityFile {b.key_path}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {known}\n")
        env = {**os.environ, "HOME": str(home), "SSH_AUTH_SOCK": "", "PYTHONPATH": str(ROOT),
               "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "RUNPOD_API_KEY": runpod.key,
               "GPURENT_RUNPOD_URL": runpod.base_url, "HF_TOKEN": VALID_TOKEN}
        data = data_yaml(tmp_path)

        def resume(name: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [str(GPURENT), "resume", f"org/ly:{name}", "--on", f"runpod:{ib}", "--project",
                 str(Path(b.home) / "runs"), "--data", data, "--detach"],
                capture_output=True, text=True, timeout=120, env=env)

        yield BoxB(b, tmp_path / "b" / "hf", data, resume)
    finally:
        b.sshd.stop()
        monkeypatch.setenv(engines.CACHE_ENV, f"{b.home}/.cache/gpurent")  # B's
        for run in (Path(b.home) / "runs").glob("*"):
            for watcher in live_watchers(run):
                kill(watcher)


def refusal(done: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused ``gpurent resume`` says (it exits 1)."""
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    [line] = [x for x in done.stderr.splitlines() if x.startswith("gpurent resume: ")]
    return line


def resumed_to_the_end(box: BoxB, done: subprocess.CompletedProcess[str], epoch: int,
                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``done`` resumed run ``ly`` on ``box`` from ``epoch``'s last.pt, and it trains
    epochs ``epoch + 1``.. to its end, the history continuing with no gap."""
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"last.pt of epoch {epoch}" in done.stdout
    assert f"training again from epoch {epoch + 1} of 6" in done.stdout
    run = box.runs / "ly"
    monkeypatch.setenv(engines.CACHE_ENV, f"{box.server.home}/.cache/gpurent")  # B's
    assert wait_until(lambda: runfiles.read_status(run).get("state") == "completed"
                      and not live_watchers(run), 60), (run / "train.log").read_text()[-2000:]
    assert [r["epoch"] for r in rows(run)] == list(range(1, 7))


def failed_before_a_checkpoint(project: Path, data: str, hub: HubStandin) -> None:
    """Run ``ly2`` in ``project``, pushing to ``org/ly`` as well: interrupted (SIGINT) in
    its first epoch, its final push sends its status and no ``last.pt``."""
    proc = subprocess.Popen([sys.executable, str(FAKE), "train", "model=yolox-n",
                             "pretrained=False", f"data={data}", "epochs=6", "project=.",
                             "name=ly2"], cwd=project,
                            env={**os.environ, "FAKE_LIBREYOLO_EPOCH_SECONDS": "60"},
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_until(lambda: runfiles.read_status(project / "ly2").ok, 30)
        proc.send_signal(signal.SIGINT)
        proc.wait(30)
    finally:
        proc.kill()
    assert runfiles.read_status(project / "ly2").get("state") == "failed"
    pushed = subprocess.run([sys.executable, "-c", FINAL_PUSH, str(project / "ly2")],
                            input=VALID_TOKEN, capture_output=True, text=True, timeout=60,
                            env=hub_env(hub, project / "hf"))
    assert pushed.returncode == 0, pushed.stderr
    files = {f["file"] for f in json.loads(pushed.stdout)["files"]}
    assert "status.json" in files and "last.pt" not in files


@pytest.mark.slow
def test_a_resume_takes_only_the_named_runs_last_pt(
        box_b: BoxB, hub_standin: HubStandin, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    safe = milestone_on_the_hub(tmp_path, box_b.data, hub_standin)  # run ly's milestone
    failed_before_a_checkpoint(tmp_path / "old", box_b.data, hub_standin)
    # The repository's newest status is ly2's; its last.pt is still ly's.
    assert json.loads(hub_standin.read("org/ly", "status.json"))["save_dir"] == "ly2"

    said = refusal(box_b.resume("ly2"))
    assert re.search(rf"org/ly holds run ly's last\.pt \(epoch {safe}, pushed "
                     r"\d{4}-\d\d-\d\d \d\d:\d\d UTC\), not run ly2's, so nothing is "
                     r"restored.*resume org/ly:ly to go on with that run", said), said
    assert not runfiles.read_status(box_b.runs / "ly2").ok
    assert not (box_b.runs / "ly2" / "weights").exists()

    # Run ly's own last.pt and status (not the newer status ly2 pushed) resume it.
    resumed_to_the_end(box_b, box_b.resume("ly"), safe, monkeypatch)


@pytest.mark.slow
def test_a_damaged_download_is_taken_out_of_the_boxs_cache(
        box_b: BoxB, hub_standin: HubStandin, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    safe = milestone_on_the_hub(tmp_path, box_b.data, hub_standin)
    hub_standin.corrupt_next_download()  # last.pt's bytes arrive with a byte flipped

    said = refusal(box_b.resume("ly"))
    assert "last.pt from org/ly does not match the Hub's sha256, so nothing is restored; " \
           "the copy in this box's Hugging Face cache was bad and was removed" in said, said
    cached = box_b.hf_home / "hub" / "models--org--ly"
    oid = hub_standin.repo("org/ly").files["last.pt"].oid
    assert not (cached / "blobs" / oid).exists()
    assert not list(cached.glob("snapshots/*/last.pt"))
    assert not (box_b.runs / "ly" / "weights").exists()

    # The Hub's copy is intact: the next resume on the same box downloads it again.
    resumed_to_the_end(box_b, box_b.resume("ly"), safe, monkeypatch)


def test_a_last_pt_pushed_without_its_status_is_not_restored(hub_standin: HubStandin,
                                                             tmp_path: Path) -> None:
    status = {"schema_version": 1, "state": "stopped", "save_dir": "/root/runs/x",
              "completed_epochs": 2}
    hub_standin.add_files("org/x", {"last.pt": b"\x01" * 64,
                                    "status.json": json.dumps(status).encode()})
    hub_standin.add_files("org/x", {"last.pt": b"\x02" * 64})  # pushed alone, later
    run = tmp_path / "new" / "x"
    done = subprocess.run([sys.executable, "-m", "trainer", "restore", "org/x", "--run-dir",
                           str(run), "--token-stdin", "--json"], input=VALID_TOKEN,
                          capture_output=True, text=True, timeout=60,
                          env=hub_env(hub_standin, tmp_path / "hf"))
    assert done.returncode == 1, done.stdout + done.stderr
    error = json.loads(done.stdout)["error"]
    assert re.fullmatch(r"org/x's last\.pt \(pushed \d{4}-\d\d-\d\d \d\d:\d\d UTC\) came "
                        r"without a status\.json: cannot tell which run's it is, so nothing "
                        r"is restored \(push a run's last\.pt with its status\.json: .*\)",
                        error), error
    assert not run.exists()


# ------------------------------------------------------------- the laptop's side


def box_status(name: str, state: str, epochs: int) -> bytes:
    """A ``status.json`` as run ``name`` writes it on its box, after ``epochs``."""
    return json.dumps({"schema_version": 1, "state": state, "save_dir": f"/root/runs/{name}",
                       "completed_epochs": epochs, "total_epochs": 6}).encode()


@pytest.fixture
def laptop_hub(hub_standin: HubStandin, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> HubStandin:
    """The Hub stand-in as this process (the laptop) asks it: the user's token, org/ly and
    org/x the user's repositories, downloads cached under ``tmp_path``. In org/ly, run
    ly pushed its milestone (last.pt and status, epoch 3), then run ly2, failed before
    its first checkpoint, pushed its status alone: the newest status is ly2's."""
    for key, value in {"HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
                       "HF_TOKEN": VALID_TOKEN}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    remember_hub_repo("org/ly")
    remember_hub_repo("org/x")
    hub_standin.add_files("org/ly", {"last.pt": b"\x03" * 64,
                                     "status.json": box_status("ly", "running", 3)})
    hub_standin.add_files("org/ly", {"status.json": box_status("ly2", "failed", 0)})
    return hub_standin


def test_the_fleet_tells_each_run_of_a_shared_repository_its_own_last_pt(
        laptop_hub: HubStandin, provider_standin) -> None:
    milestone = laptop_hub.repo("org/ly").commits[0].oid
    runpod = provider_standin("runpod")
    ia = runpod.add_instance()
    for name in ("ly", "ly2"):  # `gpurent launch ... hub=org/ly` of each, on runpod:A
        want_running(f"runpod:{ia}", RunIntent(name, "runs", "org/ly"))
    runpod.take_away(ia)

    [row] = list_fleet([Account("runpod", "work", runpod.key, runpod.base_url)],
                       FleetOptions(timeout=10, weights=False)).rows
    assert row.interrupted is not None, row.words()
    said = row.interrupted.words()
    # ly's epoch is its last.pt's (the status pushed with it), not the newest status's.
    assert f"; ly: last safe checkpoint: epoch 3 on the Hub org/ly@{milestone[:7]};" in said
    assert "; ly2: last safe checkpoint: none known (org/ly's last.pt is run ly's, not " \
           "this run's);" in said, said
    hubs = {r["run"]["name"]: r["hub"] for r in row.interrupted.to_dict()["runs"]}
    assert hubs["ly"]["epoch"] == 3 and hubs["ly"]["commit"] == milestone
    assert hubs["ly2"]["epoch"] is None


def test_a_resume_elsewhere_takes_the_laptops_copy_over_another_runs_last_pt(
        laptop_hub: HubStandin, tmp_path: Path) -> None:
    # ly pushed its next milestone (epoch 4): the newest last.pt and status are ly's. ly2
    # ran on elsewhere, pulled to this laptop at epoch 2.
    laptop_hub.add_files("org/ly", {"last.pt": b"\x04" * 64,
                                    "status.json": box_status("ly", "running", 4)})
    pulled = _pulled(tmp_path / "pulled", "/root/runs/ly2", 2)

    source = choose(hub_copy("org/ly", "ly2"), "ly2", "/root/runs")
    assert source.copy == LaptopRun(str(pulled / "weights" / "last.pt"), 2, "/root/runs/ly2", {
        runfiles.METRICS_FILE: str(pulled / runfiles.METRICS_FILE),
        runfiles.RESULTS_FILE: str(pulled / runfiles.RESULTS_FILE)}), source.why
    assert source.why == "the laptop's copy of epoch 2 has no Hub epoch of the run to " \
                         "compare with (org/ly's last.pt is run ly's, not this run's)"
    # Run ly's own milestone is newer than a copy of ly of epoch 2: the Hub is taken.
    _pulled(tmp_path / "ly", "/root/runs/ly", 2)
    source = choose(hub_copy("org/ly", "ly"), "ly", "/root/runs")
    assert source.copy is None and source.why == \
        "the Hub's epoch 4 is as new as the laptop's copy of epoch 2 or newer"


def test_the_laptop_tells_no_epoch_of_a_last_pt_pushed_without_its_status(
        laptop_hub: HubStandin) -> None:
    laptop_hub.add_files("org/x", {"last.pt": b"\x01" * 64,
                                   "status.json": box_status("x", "stopped", 2)})
    laptop_hub.add_files("org/x", {"last.pt": b"\x02" * 64})  # pushed alone, later

    hub = hub_copy("org/x", "x")
    assert hub.epoch is None and hub.commit == laptop_hub.repo("org/x").commits[-1].oid
    assert re.fullmatch(r"org/x's last\.pt \(pushed \d{4}-\d\d-\d\d \d\d:\d\d UTC\) came "
                        r"without a status\.json: cannot tell which run's it is", hub.error), \
        hub.error
