"""Issue 43: a run's last push to the Hub, and what calls its weights safe before it.

A run that ends (fresh or resumed, LibreYOLO with its push watcher or our trainer with
``hub=``) must leave the Hub holding its end: ``completed``, every epoch's row, the final
``last.pt`` and ``best.pt``. Until that final push is committed the Hub's copy of the run
is an earlier one (``running`` at an older epoch), and nothing may call the weights safe
to destroy: not the guard (``verified_safety``), not the gate, the watchdog or the TUI
(``remote.weights.safety.judge`` of ``trainer safe``'s answer). The watcher's final push
goes at once when the run ends and outlasts a Hub that refuses it for minutes, and a stop
mark left by an earlier process keeps no checkpoint of the resumed one off the Hub.

Real parts: the Hub stand-in (real huggingface_hub talks to it), the LibreYOLO stand-in
(``tests.fixtures.fake_libreyolo``) launched as gpurent launches it, with the watcher
beside it, our trainer training on the CPU."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from remote.runs.launch import make_spec
from remote.runs.start import start_run
from remote.runs.stop import signal_when_quiet, torn_checkpoints
from remote.transport.local import LocalTransport
from remote.weights.safety import judge, laptop_verify
from tests.fixtures.fake_libreyolo import StatusWriter, libreyolo_shim, torch_save
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env
from tests.fixtures.libreyolo_kit import data_yaml, kill
from tests.fixtures.paths import ROOT
from tests.fixtures.resume_elsewhere_kit import frozen_when
from tests.fixtures.resume_kit import gone, rows
from tests.fixtures.watch_log import wait_until
from trainer import engines, runfiles
from trainer.hub.autopush import live_watchers, watch
from trainer.hub.ledger import sha256_file
from trainer.hub.safe import inventory, verified_safety

EPOCHS, PERIOD = 12, 3


@pytest.fixture
def box(tmp_path: Path, hub_standin: HubStandin,
        monkeypatch: pytest.MonkeyPatch) -> LocalTransport:
    """This machine as a box whose ``libreyolo`` is the stand-in, whose sessions reach the
    Hub stand-in with the user's token (the laptop's checks read the same)."""
    libreyolo_shim(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LIBREYOLO_EPOCH_SECONDS", "0.3")
    monkeypatch.setenv("FAKE_LIBREYOLO_SAVE_SECONDS", "0.01")
    for key, value in hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN).items():
        if key.startswith("HF_"):
            monkeypatch.setenv(key, value)
    return LocalTransport()


def on_box(where: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What follows runs on the box ``where``: its own cache (watcher marks, snapshots)
    and run registry, for the processes started from now on and this one's checks."""
    monkeypatch.setenv(engines.CACHE_ENV, str(where / "cache"))
    monkeypatch.setenv(runfiles.RUN_REGISTRY_ENV, str(where / "runs.txt"))


def hub_status(hub: HubStandin, repo: str) -> dict[str, Any]:
    """The Hub's status.json of ``repo`` (``{}`` before any)."""
    try:
        return json.loads(hub.read(repo, runfiles.STATUS_FILE))
    except KeyError:
        return {}


def hub_epochs(hub: HubStandin, repo: str) -> list[int]:
    """The epochs of the Hub's metrics.jsonl rows."""
    return [json.loads(line)["epoch"] for line in
            hub.read(repo, runfiles.METRICS_FILE).decode().splitlines() if line.strip()]


def laptop_words(run: Path, repo: str) -> tuple[bool, str]:
    """The gate's (and the watchdog's, and the TUI's) verdict on ``run``'s weights: the
    box's ``trainer safe`` answer judged with the Hub, asked with the user's token."""
    said = judge(inventory([run]), "box", laptop_verify([repo]))
    return said.safe, said.reason


def the_final_push_is_what_counts(run: Path, repo: str) -> None:
    """The guard and the laptop call ``run``'s weights safe, on the Hub."""
    guard = verified_safety(run, repos=[repo])
    assert guard["safe"], guard["reason"]
    safe, why = laptop_words(run, repo)
    assert safe, why


def not_safe_before_the_final_push(run: Path, repo: str) -> None:
    """Neither the guard nor the laptop calls ``run``'s weights safe, and both say why."""
    guard = verified_safety(run, repos=[repo])
    assert not guard["safe"] and "final push" in guard["reason"], guard["reason"]
    safe, why = laptop_words(run, repo)
    assert not safe and "final push" in why, why


def test_a_resumed_run_is_safe_only_once_its_final_push_is_on_the_hub(
        box: LocalTransport, hub_standin: HubStandin, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Box A pushes milestones and is taken away; the run resumes on box B from the Hub.
    B's watcher pushes the last epoch's milestone (last.pt and a new best.pt: the weights
    are on the Hub) while the engine finishes its end-of-training work; then the engine
    writes ``completed`` and the final push is held at its commit. Until it lands the Hub
    says ``running``, so the weights are not safe; once it lands the Hub holds the end."""
    data = data_yaml(tmp_path)
    spec = make_spec("libreyolo", str(tmp_path / "a" / "runs"), "ly", {
        "model": "yolox-n", "pretrained": "False", "data": data, "epochs": str(EPOCHS),
        "eval_interval": "1", "hub": "org/ly", "hub_period": str(PERIOD)})
    on_box(tmp_path / "a", monkeypatch)
    # A's epochs take 1 s: A must be caught between a milestone on the Hub and the next
    # (the push's commit lands a moment after its epoch; at 0.3 s an epoch, a loaded
    # machine's push came after the next milestone's epochs were written, in a full run).
    monkeypatch.setenv("FAKE_LIBREYOLO_EPOCH_SECONDS", "1.0")
    started = start_run(box, spec, stdin=VALID_TOKEN.encode(), wait=0)
    monkeypatch.setenv("FAKE_LIBREYOLO_EPOCH_SECONDS", "0.3")  # B as the box fixture has it
    run_a, pid_a = Path(started.result.run_dir), started.result.pid
    assert wait_until(lambda: live_watchers(run_a), 30), "no push watcher on A"
    watchers_a = live_watchers(run_a)
    try:
        def past_a_milestone() -> bool:
            done = hub_status(hub_standin, "org/ly").get("completed_epochs") or 0
            return done >= PERIOD and 0 < len(rows(run_a)) - done < PERIOD

        assert wait_until(lambda: frozen_when(pid_a, past_a_milestone), 60)
    finally:  # box A is taken away: its engine and watcher die at once
        for victim in (*watchers_a, pid_a):
            kill(victim)
    assert wait_until(lambda: all(gone(p) for p in (*watchers_a, pid_a)), 30)
    safe_epoch = hub_status(hub_standin, "org/ly")["completed_epochs"]

    on_box(tmp_path / "b", monkeypatch)
    monkeypatch.setenv("FAKE_LIBREYOLO_END_SECONDS", "2")
    run_b = tmp_path / "b" / "runs" / "ly"
    restored = subprocess.run(
        [sys.executable, "-m", "trainer", "restore", "org/ly", "--run-dir", str(run_b),
         "--token-stdin", "--json"], input=VALID_TOKEN, capture_output=True, text=True,
        cwd=ROOT, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert restored.returncode == 0, restored.stderr
    resumed = start_run(box, make_spec("libreyolo", str(run_b.parent), "ly", {
        "resume": "True", "data": data, "hub": "org/ly"}), stdin=VALID_TOKEN.encode(),
        wait=0)
    pid_b = resumed.result.pid
    assert wait_until(lambda: live_watchers(run_b), 30), "no push watcher on B"
    watchers_b = live_watchers(run_b)
    try:
        # The last epoch written (its last.pt, then best.pt, the row, the status), the
        # engine held in its end-of-training work: the watcher pushes that milestone.
        def at_the_last_epoch() -> bool:
            status = runfiles.read_status(run_b)
            return status.get("pid") == pid_b and status.get("completed_epochs") == EPOCHS \
                and status.get("state") == "running"

        assert wait_until(lambda: frozen_when(pid_b, at_the_last_epoch), 60)
        assert wait_until(lambda: hub_status(hub_standin, "org/ly").get("completed_epochs")
                          == EPOCHS, 60)
        assert hub_status(hub_standin, "org/ly")["state"] == "running"
        pushed = hub_standin.repo("org/ly").files
        weights = run_b / runfiles.WEIGHTS_DIR
        assert pushed["best.pt"].oid == sha256_file(weights / "best.pt")
        assert pushed["last.pt"].oid == sha256_file(weights / "last.pt")

        commits = len(hub_standin.routes("commit"))
        hub_standin.hold("commit")
        os.killpg(pid_b, signal.SIGCONT)
        assert wait_until(lambda: gone(pid_b), 30), "the engine did not end"
        assert runfiles.read_status(run_b).get("state") == "completed"
        assert wait_until(lambda: len(hub_standin.routes("commit")) > commits, 30), \
            "no final push"
        # The final push is on its way: the Hub still says running at the last epoch.
        assert hub_status(hub_standin, "org/ly")["state"] == "running"
        not_safe_before_the_final_push(run_b, "org/ly")
        hub_standin.release("commit")
        assert wait_until(lambda: not live_watchers(run_b), 60), "the watcher never ended"
    finally:
        hub_standin.release("commit")
        for victim in (*watchers_b, pid_b):
            kill(victim)
    log = Path(engines.beside_path(run_b, "push.log")).read_text()
    assert "final push done" in log, log
    status = hub_status(hub_standin, "org/ly")
    assert status["state"] == "completed" and status["pid"] == pid_b
    assert hub_epochs(hub_standin, "org/ly") == list(range(1, EPOCHS + 1))
    assert [r["epoch"] for r in rows(run_b)] == list(range(1, EPOCHS + 1))
    assert safe_epoch < EPOCHS
    pushed = hub_standin.repo("org/ly").files
    for name in ("best.pt", "last.pt"):
        assert pushed[name].oid == sha256_file(run_b / runfiles.WEIGHTS_DIR / name)
    the_final_push_is_what_counts(run_b, "org/ly")


# ------------------------------------------------------------------ the watcher's last push


@pytest.fixture
def _no_xet(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process huggingface_hub may already be imported: turn Xet off directly
    (the client would otherwise choose it, and no stand-in can serve it)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)


class Engine:
    """The stand-in LibreYOLO's writes for one run (its ``StatusWriter`` and
    ``torch_save``, in its order: last.pt, best.pt on a new best, the row, the status),
    an epoch at a time, with this process as the run's pid."""

    def __init__(self, run: Path, total: int) -> None:
        self.run, self.total, self.epoch = run, total, 0
        (run / runfiles.WEIGHTS_DIR).mkdir(parents=True)
        (run / engines.TRAIN_CONFIG_FILE).write_text(f"epochs: {total}\n")
        self.writer = StatusWriter(run, {
            "schema_version": 1, "pid": os.getpid(), "model_family": "yolox",
            "model_size": "n", "task": "detect", "save_dir": str(run),
            "total_epochs": total, "start_epoch": 1, "started_at": "2026-07-31T10:00:00"})
        self.writer.start_run(1)

    def next_epoch(self) -> None:
        """Write the next epoch, each one a new best."""
        self.epoch += 1
        metric = self.epoch / 100
        state = {"epoch": self.epoch - 1, "best": metric, "best_epoch": self.epoch}
        torch_save(state, self.run / runfiles.WEIGHTS_DIR / "last.pt", 0)
        torch_save(state, self.run / runfiles.WEIGHTS_DIR / "best.pt", 0)
        name = "metrics/mAP50-95"
        self.writer.epoch_end({
            "epoch": self.epoch, "time": 1.0, "train/loss": 1.0 / self.epoch,
            "validated": True, "is_best": True, "current_metric": metric,
            "current_metric_name": name, "best_metric": metric, "best_metric_name": name,
            "best_epoch": self.epoch}, {"mAP50-95": metric})

    def complete(self) -> None:
        """The final status (``completed``, as the stand-in writes it)."""
        self.writer.write(state="completed", completed_epochs=self.epoch, total_seconds=1.0,
                          best_epoch=self.epoch)
        self.writer.close()


def test_the_final_push_goes_at_once_and_outlasts_a_hub_that_refuses_it(
        hub_standin: HubStandin, tmp_path: Path, _no_xet: None) -> None:
    """While the run trains the Hub refuses every commit (the watcher's tries of its bests
    back off to minutes apart); the run completes; the Hub refuses the final push eight
    more times, a few minutes in all. The watcher tries it at its first look after the end
    and keeps trying until it lands, then exits 0: the Hub holds the end. The watcher's
    clock and sleep are the test's, so minutes take no time."""
    run = tmp_path / "ly"
    engine = Engine(run, total=20)
    engine.next_epoch()
    hub_standin.fail("commit")
    now = [0.0]
    ended_at: list[float] = []
    final_tries: list[float] = []
    seen = [0]

    def look_again(seconds: float) -> None:  # the watcher's sleep: the run moves on
        tried = len(hub_standin.routes("commit"))
        if ended_at and tried > seen[0]:
            final_tries.append(now[0])
            if len(final_tries) == 8:
                hub_standin.clear_failures()
        seen[0] = tried
        now[0] += seconds
        if engine.epoch < engine.total:
            engine.next_epoch()
        elif not ended_at:
            engine.complete()
            ended_at.append(now[0])

    code = watch(run, "org/ly", VALID_TOKEN, period=100, endpoint=hub_standin.url,
                 sleep=look_again, clock=lambda: now[0])
    assert code == 0
    assert final_tries[0] == ended_at[0]  # the first look after the end pushes
    assert len(final_tries) == 8 and final_tries[-1] - ended_at[0] > 120
    status = hub_status(hub_standin, "org/ly")
    assert status["state"] == "completed" and status["pid"] == os.getpid()
    assert hub_epochs(hub_standin, "org/ly") == list(range(1, 21))
    pushed = hub_standin.repo("org/ly").files
    for name in ("best.pt", "last.pt"):
        assert pushed[name].oid == sha256_file(run / runfiles.WEIGHTS_DIR / name)


def test_a_final_snapshot_the_disk_refuses_is_tried_again(
        hub_standin: HubStandin, tmp_path: Path, _no_xet: None) -> None:
    """The box refuses the final push's snapshot once (its folder cannot be made, as on a
    full disk): the watcher says so and tries again at a later look; it does not die with
    the push unmade."""
    run = tmp_path / "ly"
    engine = Engine(run, total=2)
    engine.next_epoch()
    engine.next_epoch()
    engine.complete()
    blocked = engines.run_cache(run, "push")
    blocked.parent.mkdir(parents=True)
    blocked.write_text("")  # a file where the snapshots' folder goes
    now = [0.0]

    def look_again(seconds: float) -> None:
        now[0] += seconds
        blocked.unlink(missing_ok=True)

    assert watch(run, "org/ly", VALID_TOKEN, endpoint=hub_standin.url, sleep=look_again,
                 clock=lambda: now[0]) == 0
    assert now[0] > 0  # it pushed at a later look
    assert hub_status(hub_standin, "org/ly")["state"] == "completed"
    assert hub_epochs(hub_standin, "org/ly") == [1, 2]


def test_an_earlier_stops_mark_keeps_no_checkpoint_of_the_resumed_run_off_the_hub(
        box: LocalTransport, hub_standin: HubStandin, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """A stop cut ``last.pt`` short: the mark beside the run names it. The run resumes
    in the same folder with a watcher and writes ``last.pt`` whole every epoch: its
    milestones and its final push carry them, the mark being the stopped process's."""
    monkeypatch.setenv("FAKE_LIBREYOLO_SAVE_SECONDS", "1.5")
    project, data = tmp_path / "runs", data_yaml(tmp_path)
    started = start_run(box, make_spec("libreyolo", str(project), "cut", {
        "model": "yolox-n", "pretrained": "False", "data": data, "epochs": "9",
        "save_period": "1"}), wait=0)
    run, pid = Path(started.result.run_dir), started.result.pid
    request.addfinalizer(lambda: kill(pid))
    last = run / runfiles.WEIGHTS_DIR / "last.pt"
    assert wait_until(lambda: runfiles.read_status(run).get("completed_epochs"), 60)
    # The engine held while it writes last.pt (a zip without its end record yet), the
    # stop's SIGINT lands in that save when it goes on.
    assert wait_until(lambda: frozen_when(pid, lambda: engines.file_torn(last)), 30)
    signal_when_quiet(box, str(run), pid, signal.SIGINT, seconds=0)
    os.killpg(pid, signal.SIGCONT)
    assert wait_until(lambda: gone(pid), 30)
    assert torn_checkpoints(box, str(run)) == ("last.pt",)

    monkeypatch.setenv("FAKE_LIBREYOLO_SAVE_SECONDS", "0.01")
    resumed = start_run(box, make_spec("libreyolo", str(project), "cut", {
        "resume": "True", "data": data, "hub": "org/cut", "hub_period": "2"}),
        stdin=VALID_TOKEN.encode(), wait=0)
    request.addfinalizer(lambda: kill(resumed.result.pid))
    assert wait_until(lambda: live_watchers(run), 30), "no push watcher"
    request.addfinalizer(lambda: [kill(p) for p in live_watchers(run)])

    def finished() -> bool:
        return runfiles.read_status(run).get("state") == "completed" \
            and not live_watchers(run)
    assert wait_until(finished, 120), (run / "train.log").read_text()[-2000:]
    log = Path(engines.beside_path(run, "push.log")).read_text()
    assert "final push done" in log and "milestone at epoch" in log, log
    pushed = hub_standin.repo("org/cut").files
    assert pushed["last.pt"].oid == sha256_file(last)
    assert hub_status(hub_standin, "org/cut")["state"] == "completed"
    assert hub_epochs(hub_standin, "org/cut") == list(range(1, 10))
    the_final_push_is_what_counts(run, "org/cut")


# ------------------------------------------------------------------ our trainer's


@pytest.fixture
def trainer_env(hub_standin: HubStandin, tmp_path: Path) -> dict[str, str]:
    """The environment of our trainer and of ``trainer push`` on the box."""
    return hub_env(hub_standin, tmp_path / "hf", HF_TOKEN=VALID_TOKEN, OMP_NUM_THREADS="1")


def train(data: Path, run: Path, repo: str, env: dict[str, str]) -> None:
    """Train ``run`` for 2 epochs with ``hub=REPO``, a milestone every epoch."""
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "train", f"data={data}", "epochs=2", "batch=4",
         "imgsz=64", "workers=0", "device=cpu", "model=n", "seed=0",
         f"project={run.parent}", f"name={run.name}", f"hub={repo}", "hub_period=1"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]


def push(run: Path, repo: str, env: dict[str, str], *files: str) -> None:
    """``trainer push`` from the box (``files``: only those; else what the final push
    sends)."""
    words = ["--files", ",".join(files)] if files else []
    done = subprocess.run([sys.executable, "-m", "trainer", "push", str(run), "--repo",
                           repo, "--token-stdin", "--json", *words], input=VALID_TOKEN,
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


@pytest.mark.slow
def test_our_trainers_weights_are_safe_with_its_final_push_only(
        shapes_data: Path, hub_standin: HubStandin, tmp_path: Path,
        trainer_env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Our trainer pushes its own end (then writes the push's outcome into its status once
    more): safe at once. When that final push failed, weights pushed alone do not make
    the run safe while the Hub has no end of the run; pushing the run's end does."""
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    run = tmp_path / "one" / "done"
    train(shapes_data, run, "org/done", trainer_env)
    status = runfiles.read_status(run)
    assert status.get("state") == "completed" and status.get("hub", {}).get("commit")
    assert hub_status(hub_standin, "org/done")["state"] == "completed"
    the_final_push_is_what_counts(run, "org/done")

    hub_standin.fail("commit")  # every push of this run fails, its final one too
    run = tmp_path / "two" / "refused"
    train(shapes_data, run, "org/refused", trainer_env)
    assert "error" in runfiles.read_status(run).get("hub", {})
    hub_standin.clear_failures()
    push(run, "org/refused", trainer_env, "best.pt", "last.pt")
    assert hub_status(hub_standin, "org/refused") == {}
    not_safe_before_the_final_push(run, "org/refused")
    push(run, "org/refused", trainer_env)
    assert hub_status(hub_standin, "org/refused")["state"] == "completed"
    assert hub_epochs(hub_standin, "org/refused") == [1, 2]
    the_final_push_is_what_counts(run, "org/refused")
