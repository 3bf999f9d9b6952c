"""The box side on the oldest pythons it supports, for real: over sshd, with pyenv's
3.9 (standard library only) and the cached 3.10 venv with torch as the box's
``python3``. What only a static reading can see (``int | None`` in a module a 3.9 box
without torch never imports) is checked by ``tests.fixtures.pycompat``."""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from pathlib import Path

import pytest

from remote.link.bootstrap import bootstrap_box
from remote.runs.launch import LaunchSpec
from remote.runs.start import start_run
from remote.runs.stop import stop_run
from remote.watch.events import MetricsEvent, StatusEvent
from remote.watch.watcher import Watcher
from tests.fixtures.boxes import PY39, PY310_VENV, py310_torch, require
from tests.fixtures.cli import gpurent, ssh_home
from tests.fixtures.importgraph import ROOT, box_light_modules, find_modules
from tests.fixtures.pycompat import findings, iter_findings
from tests.fixtures.sshd import SSHServer
from tests.fixtures.watch_log import Collector, wait_until
from trainer import runfiles

TRAINER = find_modules(ROOT, ["trainer"])


def test_box_side_code_has_nothing_python_39_cannot_run() -> None:
    sources = {str(path.relative_to(ROOT)): path.read_text(encoding="utf-8")
               for path in TRAINER.values()}
    assert list(iter_findings(sources)) == []


@pytest.mark.parametrize("code", [
    "Measure = Callable[[int], int | None]\n",
    "from __future__ import annotations\nok = isinstance(x, list | tuple)\n",
    "pairs = list(zip(a, b, strict=True))\n",
    "from dataclasses import dataclass\n@dataclass(slots=True)\nclass A:\n    x: int\n",
    "from datetime import UTC\n",
    "import datetime\nnow = datetime.datetime.now(datetime.UTC)\n",
    "def f(x: int | None) -> None:\n    pass\n",
    "match x:\n    case 1:\n        pass\n",
    "import tomllib\n",
    "from itertools import pairwise\n",
    "import traceback\ntraceback.format_exception(exc)\n",
])
def test_the_checker_finds_what_39_cannot_run(code: str) -> None:
    assert findings(code), code


@pytest.mark.parametrize("code", [
    "from __future__ import annotations\ndef f(x: int | None) -> list[int] | None:\n"
    "    y: dict[str, int] | None = None\n    return None\n",
    "import re\nflags = re.IGNORECASE | re.MULTILINE\n",
    "mask = a | b\nmerged = {**d} | {'k': 1}\n",
    "from typing import Optional\nMeasure = Callable[[int], Optional[int]]\n",
])
def test_the_checker_lets_39_code_through(code: str) -> None:
    assert findings(code) == []


@pytest.fixture
def py39_box(box_factory: Callable[..., SSHServer]) -> SSHServer:
    """A box whose python3 is 3.9 and where no python has torch (PATH: pyenv's 3.9,
    then Debian's 3.11 without torch)."""
    py39 = require(PY39, "Python 3.9")
    return box_factory(path=[str(Path(py39).parent), "/usr/bin", "/bin"])


@pytest.mark.timeout(300)
def test_a_python_39_box_runs_the_box_side_tools(py39_box: SSHServer, tmp_path: Path) -> None:
    with py39_box.connect() as box:
        result = bootstrap_box(box)
        assert result.python_version.startswith("3.9.") and result.torch == ""
        assert any("no python on" in n and "has torch" in n for n in result.notes)
        # Every standard-library module imports on 3.9, and every module compiles.
        light = box_light_modules(TRAINER)
        code = f"import importlib; [importlib.import_module(m) for m in {light!r}]"
        base, py = shlex.quote(result.trainer_dir), shlex.quote(result.python)
        imported = box.run(f"cd / && PYTHONPATH={base} {py} -c {shlex.quote(code)} && "
                           f"{py} -m compileall -q {base}/trainer", timeout=120)
        assert imported.ok, imported.stdout + imported.stderr
        report = result.preflight
        assert report is not None and report["python"] == result.python_version
        assert report["torch"] is None and "torch" in report["failed"]
        # The follower runs on 3.9: a run written here is watched to its end.
        run = Path(py39_box.home) / "runs" / "sim"
        from tests.fixtures.run_sim import main as simulate

        assert simulate([str(run), "--epochs", "3", "--epoch-seconds", "0.02"]) == 0
        prefix = box.trainer_prefix

    def connect():
        transport = py39_box.connect()
        transport.trainer_prefix = prefix
        return transport

    events = Collector()
    watcher = Watcher(connect, str(run), events)
    watcher.start()
    try:
        assert wait_until(lambda: any(isinstance(e, StatusEvent)
                                      and e.health.verdict == "completed"
                                      for _, e in events.snapshot()), 60)
        assert wait_until(lambda: len(events.log_bytes()) == (run / "train.log").stat().st_size)
    finally:
        watcher.stop()
    assert not watcher.polling  # the follower itself ran, no SFTP fallback
    rows = [r for _, e in events.snapshot() if isinstance(e, MetricsEvent) for r in e.rows]
    assert [r["epoch"] for r in rows] == [1, 2, 3]


@pytest.mark.timeout(300)
def test_a_box_without_torch_is_refused_before_launch(py39_box: SSHServer,
                                                      tmp_path: Path) -> None:
    project = Path(py39_box.home) / "refused"
    out = gpurent("launch", f"box:{project}", "name=r1", "epochs=1", "data=d.yaml",
                  env=ssh_home(tmp_path, py39_box), timeout=180)
    assert out.returncode == 1 and out.stdout == ""
    line = out.stderr.splitlines()[-1]  # after bootstrap's note that no python has torch
    assert line.startswith("gpurent launch: ")
    assert f"{PY39} (python 3.9.18) on " in line and "cannot import torch, numpy, pillow" \
        in line and f"({PY39} -m pip install torch numpy pillow" in line
    assert "--python PATH" in line
    assert not project.exists()


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_a_python_310_box_with_torch_trains_is_watched_and_stops(
        box_factory: Callable[..., SSHServer], tmp_path: Path) -> None:
    py310 = py310_torch()
    server = box_factory(path=[str(PY310_VENV / "bin"), "/usr/bin", "/bin"])
    project = Path(server.home) / "runs310"
    with server.connect() as box:
        result = bootstrap_box(box, preflight=False)
        assert result.python == py310 and result.python_version.startswith("3.10.")
        assert result.torch.startswith("2.13.0")
        # Every module of the box side, the torch ones included, imports on 3.10.
        code = f"import importlib; [importlib.import_module(m) for m in {sorted(TRAINER)!r}]"
        imported = box.run(f"cd / && PYTHONPATH={shlex.quote(result.trainer_dir)} "
                           f"{py310} -c {shlex.quote(code)}", timeout=180)
        assert imported.ok, imported.stderr
        made = box.run(f"{box.trainer_prefix} -m trainer shapes {project}/data --train 8 "
                       "--val 4 --imgsz 32", timeout=180)
        assert made.ok, made.stderr
        spec = LaunchSpec("trainer", str(project), "r310", {
            "data": f"{project}/data/data.yaml", "epochs": "500", "batch": "8",
            "imgsz": "32", "workers": "0", "device": "cpu"})
        started = start_run(box, spec, wait=60)
        assert not started.failed, started.error
        prefix = box.trainer_prefix

    def connect():
        transport = server.connect()
        transport.trainer_prefix = prefix
        return transport

    events = Collector()
    watcher = Watcher(connect, started.result.run_dir, events)
    watcher.start()
    try:
        assert wait_until(lambda: any(isinstance(e, MetricsEvent) and e.rows
                                      for _, e in events.snapshot()), 240), \
            (project / "r310" / "console.log").read_text()[-2000:]
        with server.connect() as box:
            stopped = stop_run(box, started.result.run_dir, timeout=120)
        assert stopped.outcome == "stopped", stopped.detail
        assert wait_until(lambda: any(isinstance(e, StatusEvent)
                                      and e.health.verdict == "stopped"
                                      for _, e in events.snapshot()), 60)
    finally:
        watcher.stop()
    status = json.loads((project / "r310" / runfiles.STATUS_FILE).read_text())
    assert status["state"] == "stopped" and (project / "r310" / "weights" / "last.pt").exists()
    assert py310 in started.result.command


def test_a_python_39_box_is_watched_through_the_gate(py39_box: SSHServer, tmp_path: Path,
                                                     monkeypatch) -> None:
    """The TUI's connect path on a 3.9 box it has never met: the gate ships the package,
    chooses 3.9 and starts the project-mode follower (status, then the runs); the older
    log and the whole-log search run there too."""
    from remote import config
    from remote.link.bootstrap import box_id
    from remote.runs import log as logread
    from remote.watch.events import ChosenEvent, RunsEvent
    from tests.fixtures.gate_kit import watch_once
    from tests.fixtures.tui_runs import write_run

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "laptop"))
    project = Path(py39_box.home) / "gate39"
    lines = [f"step {n} {'needle' if n % 100 == 0 else 'hay'}" for n in range(1000)]
    write_run(project / "exp1", done=2, total=2, state="completed", log_lines=lines)
    write_run(project / "exp2", done=1, total=1, state="completed")
    used, seen, gate = watch_once(py39_box, project)
    assert len(used.execs) == 1 and used.sftp == 0
    with py39_box.connect() as link:
        assert config.remembered(box_id(link))["python"] == str(PY39)
    assert sorted(r.name for r in seen.of(RunsEvent)[0].runs) == ["exp1", "exp2"]
    assert seen.of(ChosenEvent)
    with py39_box.connect() as box:
        box.trainer_prefix = gate.trainer_prefix
        found = logread.search_log(box, str(project / "exp1"), "NEEDLE")
        older = logread.older_log(box, str(project / "exp1"), 300, 100)
    assert found.total == 10 and found.matches[1].line == 101
    whole = (project / "exp1" / "train.log").read_bytes()
    assert 200 <= older.offset < 300 and whole[older.offset - 1:older.offset] == b"\n"
    assert older.data == whole[older.offset:300] and older.size == len(whole)
