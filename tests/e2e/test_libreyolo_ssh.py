"""The acceptance of LibreYOLO as an engine over a real OpenSSH server, with the stand-in
``tests.fixtures.fake_libreyolo`` on the box (the real one: ``bench/libreyolo_interop.sh``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from remote.runs.launch import make_spec
from remote.runs.start import start_run
from remote.runs.stop import stop_run
from remote.watch.events import MetricsEvent, StatusEvent
from remote.watch.watcher import Watcher
from tests.fixtures.fake_libreyolo import libreyolo_shim
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.libreyolo_kit import LIBREYOLO_FILES, data_yaml, kill, until
from tests.fixtures.sshd import make_server
from trainer import engines, runfiles
from trainer.hub.autopush import live_watchers
from trainer.hub.ledger import sha256_file


def test_over_ssh_launch_watch_stop_resume_push(tmp_path: Path, hub_standin: HubStandin,
                                                monkeypatch: pytest.MonkeyPatch,
                                                request: pytest.FixtureRequest) -> None:
    """The acceptance, with the stand-in on a box reached over a real OpenSSH server: the
    run is watched live at runs/ly, stop ends as stopped with its epochs, resume goes
    on, and the box-side watcher pushes the bests to the Hub (stand-in)."""
    bin_dir = tmp_path / "bin"
    libreyolo_shim(bin_dir, {"FAKE_LIBREYOLO_EPOCH_SECONDS": "0.3",
                             "FAKE_LIBREYOLO_SAVE_SECONDS": "0.02",
                             "FAKE_LIBREYOLO_SETUP_SECONDS": "4"})
    server = make_server(tmp_path / "sshd", box_path=[
        str(bin_dir), str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"],
        env={"HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
             "HF_HOME": str(tmp_path / "box-hf")})
    request.addfinalizer(server.sshd.stop)
    monkeypatch.setenv(engines.CACHE_ENV, f"{server.home}/.cache/gpurent")  # the box's
    transport = server.connect()
    request.addfinalizer(transport.close)
    project, data = f"{server.home}/runs", data_yaml(tmp_path)
    run_dir = f"{project}/ly"
    token = VALID_TOKEN.encode()
    args = {"model": "yolox-n", "pretrained": "False", "data": data, "epochs": "1000",
            "eval_interval": "2", "hub": "org/ly"}
    started = start_run(transport, make_spec("libreyolo", project, "ly", args), stdin=token)
    request.addfinalizer(lambda: kill(started.result.pid))
    request.addfinalizer(lambda: [kill(p) for p in live_watchers(Path(run_dir))])
    assert started.result.run_dir == run_dir and not started.failed, started.error
    events: list = []
    watcher = Watcher(server.connect, run_dir, events.append, poll_interval=0.1)
    watcher.start()
    request.addfinalizer(watcher.stop)

    def rows() -> list[dict]:
        return [r for e in events if isinstance(e, MetricsEvent) for r in e.rows]

    def statuses() -> list[StatusEvent]:
        return [e for e in events if isinstance(e, StatusEvent)]

    until(lambda: len(rows()) >= 3, "no rows watched at runs/ly", 90)
    assert statuses()[-1].health.verdict == "live"
    until(lambda: hub_standin.routes("commit"), "no best pushed", 90)
    stopped = stop_run(transport, run_dir, timeout=30)
    assert stopped.outcome == "stopped", stopped.detail
    done = len(Path(run_dir, runfiles.METRICS_FILE).read_text().splitlines())
    until(lambda: any(e.health.verdict == "stopped" and e.read.get("completed_epochs") == done
                      for e in statuses()), f"not shown stopped after {done} epochs")
    until(lambda: not live_watchers(Path(run_dir)), "no final push", 120)
    assert "last.pt" in hub_standin.repo("org/ly").commits[-1].message

    resumed = start_run(transport, make_spec("libreyolo", project, "ly", {
        "resume": "True", "data": data, "hub": "org/ly"}), stdin=token)
    request.addfinalizer(lambda: kill(resumed.result.pid))
    assert resumed.result.run_dir == run_dir and not resumed.failed, resumed.error
    until(lambda: any(e.health.verdict == "live" and e.read.get("pid") == resumed.result.pid
                      for e in statuses()), "the resumed run was not watched")
    until(lambda: rows()[-1]["epoch"] > done + 2, "no epochs after the resume", 90)
    assert [r["epoch"] for r in rows()] == list(range(1, len(rows()) + 1))  # no gap
    # The new push watcher did not take the stopped run's status for its own end.
    assert live_watchers(Path(run_dir))
    assert stop_run(transport, run_dir, timeout=30).outcome == "stopped"
    until(lambda: not live_watchers(Path(run_dir)), "no final push after the resume", 120)
    best = Path(run_dir, "weights", "best.pt")
    assert hub_standin.repo("org/ly").files["best.pt"].oid == sha256_file(best)
    assert {p.name for p in Path(run_dir).iterdir()} <= LIBREYOLO_FILES
