"""LibreYOLO as an engine: launch lands where we watch, stop is graceful, nothing lost in
the files it writes, pushes from a box-side watcher. ``libreyolo`` here is the stand-in
``tests.fixtures.fake_libreyolo`` (the real one is ~6 GB of torch; it is run over a real
sshd by ``bench/libreyolo_interop.sh``); the first tests hold the stand-in to what the
real LibreYOLO 1.6.0 does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from remote.runs.launch import launch_run, make_spec, resume_checkpoint
from remote.runs.probe import probe_box
from remote.runs.read import list_runs, read_run
from remote.runs.start import start_run
from remote.runs.status import quick_read
from remote.runs.stop import signal_when_quiet, stop_run, torn_checkpoints
from remote.transport.local import LocalTransport
from remote.watch.events import MetricsEvent, StatusEvent
from remote.watch.watcher import Watcher
from tests.fixtures.fake_libreyolo import PLACEHOLDERS, libreyolo_shim
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.libreyolo_kit import LIBREYOLO_FILES, data_yaml, kill, until
from tests.fixtures.paths import ROOT
from trainer import engines, runfiles
from trainer.health import local_pid_alive
from trainer.hub.autopush import live_watchers
from trainer.hub.ledger import read_ledger, sha256_file
from trainer.hub.safe import inventory, push_in_flight
from trainer.watch.runs import RunScanner

FAKE = ROOT / "tests" / "fixtures" / "fake_libreyolo.py"
#: The keys of a completed status.json of the real LibreYOLO 1.6.0 (``libreyolo train
#: model=yolox-n pretrained=False ...`` on this machine): best_metric_name, metrics,
#: mean_epoch_seconds and the other per-epoch keys are gone.
REAL_COMPLETED_KEYS = {
    "best_epoch", "best_metric", "checkpoints", "completed_epochs", "elapsed_seconds",
    "model_family", "model_size", "pid", "progress", "save_dir", "schema_version",
    "start_epoch", "started_at", "state", "task", "total_epochs", "total_seconds",
    "train_loss", "updated_at"}
#: And of a failed one after SIGINT (KeyboardInterrupt): completed_epochs and best_* gone.
REAL_INTERRUPTED_KEYS = {
    "current_epoch", "elapsed_seconds", "error", "model_family", "model_size", "pid",
    "progress", "save_dir", "schema_version", "start_epoch", "started_at", "state", "task",
    "total_epochs", "updated_at"}
#: SigIgn bits of SIGINT and SIGQUIT.
IGNORED_INT_QUIT = (1 << (signal.SIGINT - 1)) | (1 << (signal.SIGQUIT - 1))


def fake_env(epoch: float = 0.05, save: float = 0.01) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "FAKE_LIBREYOLO_EPOCH_SECONDS": str(epoch),
            "FAKE_LIBREYOLO_SAVE_SECONDS": str(save)}


def fake(args: list[str], cwd: Path, **kwargs: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(FAKE), "train", *args], cwd=cwd, text=True,
                          capture_output=True, timeout=120, env=fake_env(), **kwargs)


def sig_ignored(pid: int) -> int:
    """The SigIgn mask of a live process."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigIgn:"):
            return int(line.split()[1], 16)
    raise AssertionError("no SigIgn line")


@pytest.fixture
def box(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> LocalTransport:
    """This machine as a box whose ``libreyolo`` is the stand-in."""
    libreyolo_shim(tmp_path / "bin")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_LIBREYOLO_EPOCH_SECONDS", "0.1")
    monkeypatch.setenv("FAKE_LIBREYOLO_SAVE_SECONDS", "0.01")
    return LocalTransport()


# ------------------------------------------------------------------ the stand-in itself


def test_stand_in_writes_what_libreyolo_writes(tmp_path: Path) -> None:
    data = data_yaml(tmp_path)
    (tmp_path / "ly").mkdir()  # an existing folder: LibreYOLO trains into ly2
    done = fake(["model=yolox-n", "pretrained=False", f"data={data}", "epochs=5",
                 "eval_interval=1", "save_period=3", "project=.", "name=ly"], tmp_path)
    assert done.returncode == 0, done.stderr
    assert "| Saving to: ly2" in done.stderr and not any((tmp_path / "ly").iterdir())
    run = tmp_path / "ly2"
    status = json.loads((run / "status.json").read_text())
    assert set(status) == REAL_COMPLETED_KEYS and status["save_dir"] == "ly2"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [len(r) for r in rows] == [45] * 5  # validated rows: metrics/*, speed/*, lr/*
    assert sum(k.startswith("speed/") for k in rows[0]) == 6
    assert [k for k, v in rows[0].items() if v == -1.0] == [f"metrics/{n}"
                                                             for n in PLACEHOLDERS]
    # best.pt only when a validation improved (epoch 4's 0.08 is below epoch 3's 0.09).
    assert [r["is_best"] for r in rows] == [True, True, True, False, True]
    assert sorted(p.name for p in (run / "weights").iterdir()) == [
        "best.pt", "epoch_3.pt", "last.pt"]
    assert "name: ly\n" in (run / "train_config.yaml").read_text()
    # Validation every 10 epochs by default, never with val=False: no best.pt then.
    done = fake(["model=yolox-n", "pretrained=False", f"data={data}", "epochs=3",
                 "val=False", "project=.", "name=noval"], tmp_path)
    rows = [json.loads(line) for line in (tmp_path / "noval/metrics.jsonl").open()]
    assert [len(r) for r in rows] == [17] * 3 and not any(r["validated"] for r in rows)
    assert not (tmp_path / "noval/weights/best.pt").exists()
    # What kills a run before its folder exists: console only, no status anywhere.
    hub = fake(["model=yolox-n", f"data={data}", "hub=org/x", "name=h"], tmp_path)
    assert hub.returncode == 2 and "No such option: --hub" in hub.stderr
    offline = fake(["model=yolox-n", f"data={data}", "name=o"], tmp_path)
    assert offline.returncode == 1 and "Model weights file not found" in offline.stderr
    assert not (tmp_path / "h").exists() and not (tmp_path / "o").exists()


def test_stand_in_signals_are_libreyolos(tmp_path: Path) -> None:
    data = data_yaml(tmp_path)
    args = ["model=yolox-n", "pretrained=False", f"data={data}", "epochs=1000",
            "project=.", "name={}"]
    # SIGINT (default disposition): failed, KeyboardInterrupt, epochs and best_* dropped.
    proc = subprocess.Popen([sys.executable, str(FAKE), "train", *args[:-1], "name=int"],
                            cwd=tmp_path, env=fake_env(), stderr=subprocess.DEVNULL)
    until(lambda: (runfiles.read_status(tmp_path / "int").get("completed_epochs") or 0) >= 3,
          "no epochs")
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    status = json.loads((tmp_path / "int/status.json").read_text())
    assert set(status) == REAL_INTERRUPTED_KEYS
    assert status["state"] == "failed" and status["error"]["type"] == "KeyboardInterrupt"
    # No SIGTERM handler: killed at once, status left running. Started with `&` by a
    # script, SIGINT is ignored (as the shell hands it down).
    started = subprocess.run(["sh", "-c", f"{sys.executable} {FAKE} train "
                              f"{' '.join(args[:-1])} name=term > /dev/null 2>&1 & echo $!"],
                             cwd=tmp_path, env=fake_env(), capture_output=True, text=True)
    pid = int(started.stdout)
    until(lambda: runfiles.read_status(tmp_path / "term").get("completed_epochs"), "no epoch")
    assert sig_ignored(pid) & IGNORED_INT_QUIT == IGNORED_INT_QUIT
    os.kill(pid, signal.SIGINT)
    time.sleep(0.5)
    assert local_pid_alive(pid)
    os.kill(pid, signal.SIGTERM)
    until(lambda: not local_pid_alive(pid), "SIGTERM did not kill it")
    assert runfiles.read_status(tmp_path / "term").get("state") == "running"


def test_what_a_final_libreyolo_status_drops_comes_from_its_history() -> None:
    row = {"epoch": 12, "is_best": False, "best_metric": 0.41, "best_epoch": 10,
           "best_metric_name": "metrics/mAP50-95", "metrics/mAP50-95": 0.40,
           "metrics/mAP50": 0.6, "train/loss": 1.0}
    # After a resume at epoch 9 its completed status counts this invocation's 4 epochs.
    resumed = {"state": "completed", "start_epoch": 9, "completed_epochs": 4,
               "total_epochs": 12, "best_metric": 0.41, "best_epoch": 10, "progress": 0.33}
    filled = engines.fill_from_history(resumed, row)
    assert filled is not None and filled["completed_epochs"] == 12
    assert filled["best_metric_name"] == "metrics/mAP50-95"
    assert filled["metrics"] == {"mAP50-95": 0.40, "mAP50": 0.6}
    interrupted = {"state": "failed", "total_epochs": 300, "progress": 0.0,
                   "error": {"type": "KeyboardInterrupt", "message": ""}}
    filled = engines.fill_from_history(interrupted, row)
    assert filled is not None
    assert (filled["completed_epochs"], filled["progress"]) == (12, 12 / 300)
    assert filled["best_epoch"] == 10 and filled["best_metric"] == 0.41
    # A live status keeps its count; a wrongly typed row value is ignored.
    live = {"state": "running", "completed_epochs": 5}
    assert (engines.fill_from_history(live, row) or {})["completed_epochs"] == 5
    wrong = engines.fill_from_history(interrupted, {**row, "best_metric_name": 3})
    assert wrong is not None and "best_metric_name" not in wrong
    assert "completed_epochs" not in (engines.fill_from_history(interrupted, {"epoch": "12"})
                                      or {})


def test_a_resumed_run_is_completed_after_all_its_epochs_in_every_word(
        box: LocalTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resumed partway through 30 epochs (as ``gpurent resume`` relaunches it:
    ``resume=True model=NAME/weights/last.pt``), LibreYOLO's completed status counts only
    that invocation's epochs; every reader says the run's 30/30."""
    project = tmp_path / "runs"
    project.mkdir()
    data = data_yaml(tmp_path)
    proc = subprocess.Popen([sys.executable, str(FAKE), "train", "model=yolox-n",
                             "pretrained=False", f"data={data}", "epochs=30", "project=.",
                             "name=ly"], cwd=project, env=fake_env(),
                            stderr=subprocess.DEVNULL)
    until(lambda: (runfiles.read_status(project / "ly").get("completed_epochs") or 0) >= 6,
          "no epochs")
    proc.send_signal(signal.SIGINT)
    proc.wait(30)
    run_dir = project / "ly"
    done = len((run_dir / runfiles.METRICS_FILE).read_text().splitlines())
    resumed = fake(["resume=True", "model=ly/weights/last.pt", f"data={data}"], project)
    assert resumed.returncode == 0, resumed.stderr
    status = runfiles.read_status(run_dir)
    assert (status.get("state"), status.get("completed_epochs")) == ("completed", 30 - done)
    words = "completed after 30/30 epochs"

    cli = subprocess.run([str(Path(sys.executable).with_name("gpurent")), "status",
                          str(run_dir)], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert cli.returncode == 0, cli.stderr
    assert f"why    {words}\n" in cli.stdout and f"{30 - done}/30" not in cli.stdout
    assert read_run(box, str(run_dir)).health.reason == words
    assert quick_read(box, str(run_dir))[0].health.reason == words  # a remote status
    [scanned] = RunScanner(str(project)).scan(time.time())  # the box's `trainer runs`
    assert (scanned["reason"], scanned["epoch"]) == (words, 30)
    registry = tmp_path / "runs.txt"
    registry.write_text(f"{run_dir}\n")
    monkeypatch.setenv(runfiles.RUN_REGISTRY_ENV, str(registry))
    [probed] = probe_box(box).runs  # the fleet's and the watchdog's
    assert (probed.reason, probed.epoch) == (words, 30)
    for polling in (False, True):  # the follower and file polling (the TUI, `follow`)
        events: list = []
        watcher = Watcher(LocalTransport, str(run_dir), events.append, poll_interval=0.05)
        if polling:
            watcher.poll_files("test")
        watcher.start()
        try:
            until(lambda events=events: [e for e in events if isinstance(e, StatusEvent)
                                         and e.read.get("completed_epochs") == 30],
                  f"never filled (polling={polling})")
            last = [e for e in events if isinstance(e, StatusEvent)][-1]
            assert last.health.reason == words, (polling, last.health)
        finally:
            watcher.stop()


# ------------------------------------------------------------------ launch


def test_launch_lands_where_we_watch_with_signals_reset(box: LocalTransport, tmp_path: Path,
                                                        request: pytest.FixtureRequest) -> None:
    project = tmp_path / "runs"
    (project / "ly").mkdir(parents=True)  # left over, empty: LibreYOLO would make ly2
    spec = make_spec("libreyolo", str(project), "ly", {
        "model": "yolox-n", "pretrained": "False", "data": data_yaml(tmp_path),
        "epochs": "1000", "eval_interval": "2"})
    events: list = []
    started = start_run(box, spec)
    request.addfinalizer(lambda: kill(started.result.pid))
    assert started.result.run_dir == str(project / "ly") and not started.failed
    watcher = Watcher(LocalTransport, started.result.run_dir, events.append,
                      poll_interval=0.05)
    watcher.start()
    try:
        until(lambda: sum(len(e.rows) for e in events if isinstance(e, MetricsEvent)) >= 2,
              "the watcher saw no rows at runs/ly")
        live = [e for e in events if isinstance(e, StatusEvent)][-1]
        assert live.health.verdict == "live" and live.read.get("pid") == started.result.pid
    finally:
        watcher.stop()
    # Its signals were put back: SIGINT (LibreYOLO's graceful stop) reaches it.
    assert sig_ignored(started.result.pid) & IGNORED_INT_QUIT == 0
    # Nothing of ours inside its folder; the launcher's files are beside it.
    assert {p.name for p in (project / "ly").iterdir()} <= LIBREYOLO_FILES
    assert sorted(p.name for p in (project / engines.BESIDE_DIR).iterdir()) == [
        "ly.console.log", "ly.launch.pid"]
    registry = Path(os.environ["GPURENT_RUN_REGISTRY"]).read_text().split()
    assert str((project / "ly").resolve()) in registry
    # Told to keep an existing folder's name off (exist_ok=False), LibreYOLO makes ly2...
    (project / "again").mkdir()
    renamed = start_run(box, make_spec("libreyolo", str(project), "again",
                                       {**spec.args, "epochs": "2", "exist_ok": "False"}))
    request.addfinalizer(lambda: kill(renamed.result.pid))
    # ... and the launch follows it there.
    assert renamed.result.run_dir == str(project / "again2"), renamed.run
    assert renamed.run is not None and renamed.run.read.ok


def test_our_trainer_starts_with_default_signals(tmp_path: Path,
                                                 request: pytest.FixtureRequest) -> None:
    from tests.fixtures.launch_kit import sim_transport, wait_for

    result = launch_run(sim_transport(), make_spec("trainer", str(tmp_path), "r",
                                               {"epochs": "1", "hold": "1"}))
    request.addfinalizer(lambda: kill(result.pid))
    facts = wait_for(tmp_path / "r" / "launch.json")
    assert not facts["sigint_ignored"] and not facts["sigquit_ignored"]
    assert facts["sighup_ignored"]  # nohup's, kept


# ------------------------------------------------------------------ stop


def test_stop_is_sigint_and_shows_stopped_with_the_real_epochs(
        box: LocalTransport, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    project = tmp_path / "runs"
    args = {"model": "yolox-n", "pretrained": "False", "data": data_yaml(tmp_path),
            "epochs": "1000", "eval_interval": "2"}
    started = start_run(box, make_spec("libreyolo", str(project), "ly", args))
    request.addfinalizer(lambda: kill(started.result.pid))
    run_dir = started.result.run_dir
    until(lambda: (runfiles.read_status(run_dir).get("completed_epochs") or 0) >= 3, "epochs")
    result = stop_run(box, run_dir, timeout=30)
    assert result.outcome == "stopped" and "after SIGINT" in result.detail, result.detail
    inventory([run_dir])  # hashes its weights: the cache is ours, kept out of its folder
    assert {p.name for p in Path(run_dir).iterdir()} <= LIBREYOLO_FILES
    assert not local_pid_alive(started.result.pid) and result.torn == ()
    status = runfiles.read_status(run_dir)
    assert status.get("state") == "failed" and status.get("completed_epochs") is None
    epochs = len((Path(run_dir) / runfiles.METRICS_FILE).read_text().splitlines())
    run = read_run(box, run_dir)
    assert run.health.verdict == "stopped"
    assert run.health.reason == f"stopped by gpurent stop after {epochs}/1000 epochs"
    assert run.read.get("best_metric_name") == "metrics/mAP50-95"
    # The watcher (follower and file polling alike) says the same.
    for polling in (False, True):
        events: list = []
        seen = events
        watcher = Watcher(LocalTransport, run_dir, seen.append, poll_interval=0.05)
        if polling:
            watcher.poll_files("test")
        watcher.start()
        try:
            # Stopped at once, and with its epochs once the last row has come.
            until(lambda seen=seen: [e for e in seen if isinstance(e, StatusEvent)
                                     and e.health.verdict == "stopped"
                                     and e.read.get("completed_epochs") == epochs],
                  f"not shown stopped after {epochs} epochs (polling={polling})")
        finally:
            watcher.stop()

    # A run started the old way (SIGINT ignored) is killed after the timeout, and its
    # unclosed `running` is shown as stopped too.
    project.joinpath("old").mkdir()
    old = subprocess.run(["sh", "-c", f"cd {project} && libreyolo train model=yolox-n "
                          f"pretrained=False data={args['data']} epochs=1000 project=. "
                          "name=old exist_ok=True > /dev/null 2>&1 & echo $!"],
                         capture_output=True, text=True, env=os.environ)
    pid = int(old.stdout)
    request.addfinalizer(lambda: kill(pid))
    until(lambda: runfiles.read_status(project / "old").get("completed_epochs"), "no epoch")
    result = stop_run(box, str(project / "old"), timeout=1)
    assert result.outcome == "killed", result.detail
    # What it saved while ignoring SIGINT is whole; only a save the SIGKILL met is not.
    assert len(result.torn) <= 1, result.torn
    assert runfiles.read_status(project / "old").get("state") == "running"
    assert read_run(box, str(project / "old")).health.verdict == "stopped"
    assert [(r.name, r.health) for r in list_runs(box, str(project))] == [
        ("old", "stopped"), ("ly", "stopped")]


def test_stop_waits_out_a_save_and_a_cut_one_is_caught(
        box: LocalTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """torch.save writes in place: a SIGINT during it leaves a zip that lacks records.
    The stop signals between saves; one that came during a save is told by the mark, and
    a resume takes an intact checkpoint."""
    monkeypatch.setenv("FAKE_LIBREYOLO_SAVE_SECONDS", "1.5")  # saves: 3 s of each 3.1 s
    project = tmp_path / "runs"
    args = {"model": "yolox-n", "pretrained": "False", "data": data_yaml(tmp_path),
            "epochs": "1000", "save_period": "1"}
    runs = {}
    for name in ("calm", "cut"):
        started = start_run(box, make_spec("libreyolo", str(project), name, args), wait=0)
        request.addfinalizer(lambda pid=started.result.pid: kill(pid))
        runs[name] = (started.result.run_dir, started.result.pid)
    for run_dir, _ in runs.values():
        until(lambda d=run_dir: runfiles.read_status(d).get("completed_epochs"), "no epoch", 90)
    calm = stop_run(box, runs["calm"][0], timeout=20)
    assert calm.outcome == "stopped" and calm.torn == (), calm.detail
    with zipfile.ZipFile(Path(runs["calm"][0]) / "weights/last.pt") as zf:
        assert len(zf.namelist()) == 10
    run_dir, pid = runs["cut"]
    last = Path(run_dir) / "weights" / "last.pt"
    before = last.stat().st_mtime_ns
    until(lambda: last.stat().st_mtime_ns != before, "epoch 2's save never began", 30)
    signal_when_quiet(box, run_dir, pid, signal.SIGINT, seconds=0)  # stop_run, no wait
    until(lambda: not local_pid_alive(pid), "not stopped")
    assert torn_checkpoints(box, run_dir) == ("last.pt",)
    assert json.loads(Path(engines.beside_path(run_dir, "stop.json")).read_text())["torn"] \
        == ["last.pt"]
    with zipfile.ZipFile(last) as zf:  # a whole zip, as torch leaves it, but short
        assert len(zf.namelist()) < 10
    spec = make_spec("libreyolo", str(project), "cut", {"resume": "True",
                                                         "data": args["data"]})
    done = len((Path(run_dir) / runfiles.METRICS_FILE).read_text().splitlines())
    assert resume_checkpoint(box, spec) == f"cut/weights/epoch_{done}.pt"
    monkeypatch.setenv("FAKE_LIBREYOLO_SAVE_SECONDS", "0.01")
    resumed = start_run(box, spec)
    request.addfinalizer(lambda: kill(resumed.result.pid))
    assert resumed.result.run_dir == run_dir and not resumed.failed, resumed.error
    status = until(lambda: runfiles.read_status(run_dir).get("pid") == resumed.result.pid
                   and runfiles.read_status(run_dir), "no takeover")
    assert status.get("start_epoch") == done + 1


def test_a_resume_is_not_judged_by_the_earlier_runs_status(
        box: LocalTransport, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        request: pytest.FixtureRequest) -> None:
    """Until the resumed process writes its own status.json (LibreYOLO sets up for
    seconds first), the folder holds the interrupted run's `failed`: the launch goes by
    its own pid instead."""
    project = tmp_path / "runs"
    project.mkdir()
    data = data_yaml(tmp_path)
    proc = subprocess.Popen([sys.executable, str(FAKE), "train", "model=yolox-n",
                             "pretrained=False", f"data={data}", "epochs=50", "project=.",
                             "name=ly"], cwd=project, env=fake_env(),
                            stderr=subprocess.DEVNULL)
    until(lambda: (runfiles.read_status(project / "ly").get("completed_epochs") or 0) >= 2,
          "no epochs")
    proc.send_signal(signal.SIGINT)  # by hand, not gpurent stop: it reads failed
    proc.wait(30)
    assert read_run(box, str(project / "ly")).health.verdict == "failed"
    monkeypatch.setenv("FAKE_LIBREYOLO_SETUP_SECONDS", "2")
    resumed = start_run(box, make_spec("libreyolo", str(project), "ly",
                                       {"resume": "True", "data": data}), wait=1)
    request.addfinalizer(lambda: kill(resumed.result.pid))
    assert not resumed.failed and resumed.run is not None
    assert resumed.run.health.verdict == "starting", resumed.run.health


# ------------------------------------------------------------------ push watcher


def test_watcher_pushes_every_new_best_and_the_end(box: LocalTransport, tmp_path: Path,
                                                    hub_standin: HubStandin,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    request: pytest.FixtureRequest) -> None:
    for key in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_HUB_DISABLE_XET", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("FAKE_LIBREYOLO_EPOCH_SECONDS", "0.3")
    project = tmp_path / "runs"
    spec = make_spec("libreyolo", str(project), "ly", {
        "model": "yolox-n", "pretrained": "False", "data": data_yaml(tmp_path),
        "epochs": "1000", "eval_interval": "2", "hub": "org/ly"})
    assert spec.push == "org/ly" and "hub" not in spec.args
    hub_standin.hold("commit")  # the first push waits there, its snapshot taken
    started = start_run(box, spec, stdin=VALID_TOKEN.encode())
    request.addfinalizer(lambda: kill(started.result.pid))
    run_dir = Path(started.result.run_dir)
    watchers = until(lambda: live_watchers(run_dir), "no push watcher")
    request.addfinalizer(lambda: [kill(pid) for pid in live_watchers(run_dir)])
    assert push_in_flight(run_dir)  # the guard waits for it
    assert VALID_TOKEN.encode() not in Path(f"/proc/{watchers[0]}/cmdline").read_bytes()
    until(lambda: hub_standin.routes("commit"), "no push began", 90)
    # The snapshot being pushed is a copy under our cache, not a file in its folder.
    snapshots = engines.run_cache(run_dir, "push")
    assert [p.name for p in snapshots.iterdir()][0].startswith(".hub-push-")
    assert {p.name for p in run_dir.iterdir()} <= LIBREYOLO_FILES
    hub_standin.release("commit")
    repo = lambda: hub_standin.repo("org/ly") if any(  # noqa: E731
        r.route == "commit" for r in hub_standin.requests) else None
    # New bests pushed while it trains, each with the best epoch's best.pt.
    until(lambda: repo() and len(repo().commits) >= 2, "no pushes while training", 90)
    first = repo().commits[0].message  # (with last.pt too when a milestone was due)
    assert "best metrics/mAP50-95" in first and "best.pt" in first
    assert stop_run(box, str(run_dir), timeout=30).outcome == "stopped"
    until(lambda: not live_watchers(run_dir), "the watcher never finished", 120)
    log = Path(engines.beside_path(run_dir, "push.log")).read_text()
    assert "final push done" in log, log
    assert "last.pt" in repo().commits[-1].message
    entries = read_ledger(run_dir)
    assert Path(engines.beside_path(run_dir, "hub.json")).exists()
    best = [e for e in entries if e["file"] == "best.pt"]
    assert best[-1]["sha256"] == sha256_file(run_dir / "weights/best.pt") \
        == repo().files["best.pt"].oid
    assert best[-1]["epoch"] == read_run(box, str(run_dir)).read.get("best_epoch")
    # The destroy check finds the ledger, and no file of ours is in its folder.
    (answer,) = inventory([run_dir])["runs"]
    required = [f for f in answer["files"] if f["required"]]
    assert "best.pt" in {f["file"] for f in required}  # last.pt too when newer than best
    assert all(f["hub"] for f in required)
    assert {p.name for p in run_dir.iterdir()} <= LIBREYOLO_FILES
