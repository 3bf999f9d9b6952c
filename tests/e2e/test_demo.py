"""``gpurent-tui --demo``, the README's main job: it generates the shapes dataset in the
cache directory, launches the built-in trainer detached and the app shows the run live."""

from __future__ import annotations

import pytest

from tests.fixtures.launched import kill_launched
from tests.fixtures.pilot import until
from tests.fixtures.screen import screen_text
from tests.fixtures.tui_main_kit import specs
from trainer.health import local_pid_alive
from tui.app import GpurentApp
from tui.box.view import BoxView

pytestmark = pytest.mark.anyio


async def test_demo_generates_data_launches_and_shows_the_run(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("GPURENT_DATA_DIR", str(tmp_path / "data"))
    app = GpurentApp(specs("--demo"))
    runs = tmp_path / "cache" / "gpurent" / "demo" / "runs"
    pid = None
    try:
        async with app.run_test(size=(150, 46)) as pilot:
            box = app.query_one(BoxView)
            # Dataset generation, the torch import and the first status: a functional
            # bound, generous for a loaded 2-core machine.
            await until(pilot, lambda: box.state.status is not None and box.state.status.read.ok,
                        timeout=240)
            status = box.state.status.read
            pid = status.get("pid")
            assert status.get("state") == "running"
            assert box.state.status.health.verdict == "live"
            assert box.state.run_dir.startswith(str(runs))
            await until(pilot, lambda: box.log_pane.log_view.lines, timeout=60)
            # Work on this machine: no billing words (issue 28), no money line at all.
            assert box.money_text().plain == ""
            for word in ("money", "$?", "--price", "counting"):
                assert word not in screen_text(app), word
        data = tmp_path / "cache" / "gpurent" / "demo" / "shapes" / "data.yaml"
        assert data.is_file()
        # Quitting the app detaches: the run keeps going.
        assert isinstance(pid, int) and local_pid_alive(pid)
    finally:
        # The launcher records every run's pid (its process group), even one that failed
        # before writing status.json.
        for pid_file in runs.glob("*/launch.pid"):
            kill_launched(pid_file.parent)
