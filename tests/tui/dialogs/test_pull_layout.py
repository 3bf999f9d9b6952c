"""One layout for every pull: ``gpurent pull`` and the TUI's ``w``, with no folder named,
put a run's ``best.pt`` at the same path (``./weights/<host>/<the run's absolute path on
the box>/weights/``), and the demo's pulls go beside its runs in the cache, never into
the checkout ``scripts/demo.sh`` starts it from. Real pulls on this machine (``local``),
the real CLI and app."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from remote.weights.pull import ledger_entries
from tests.fixtures.paths import ROOT
from tests.fixtures.pilot import SIZE, connected, local_app, messages, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.tui_runs import write_run
from tui.app import GpurentApp
from tui.demo import demo_project, demo_root
from tui.dialogs.pull import PullDialog
from tui.spec import BoxSpec

pytestmark = pytest.mark.anyio
GPURENT = Path(sys.executable).with_name("gpurent")


async def pull_with_w(app: GpurentApp) -> tuple[str, str]:
    """Press ``w`` and Enter on the folder offered: (what the dialog says the files land
    in, where best.pt went as the pull ledger records it)."""
    async with app.run_test(size=SIZE, notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("w")
        await until(pilot, lambda: shown(app, PullDialog))
        # The dialog names the folder once the box has said where the run is.
        await until(pilot, lambda: "finding" not in str(app.screen.query_one("#lands").render()))
        lands = str(app.screen.query_one("#lands").render())
        await pilot.press("enter")
        await until(pilot, lambda: any(m.startswith("pulled best.pt") for m in messages(app)))
    [entry] = [e for e in ledger_entries("local") if e["file"] == "best.pt"]
    return lands, entry["local_path"]


async def test_gpurent_pull_and_the_tuis_pull_land_in_one_place(run_factory, tmp_path):
    run = run_factory("exp1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(os.urandom(4096))
    want = tmp_path / "weights" / f"local{run.resolve()}" / "weights"
    lands, pulled = await pull_with_w(local_app(run.parent))  # from tmp_path
    assert lands == f"lands in {want}{os.sep}"
    assert pulled == str(want / "best.pt")
    cli = subprocess.run([str(GPURENT), "pull", str(run), "--json"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert cli.returncode == 0, cli.stderr
    assert [f["local_path"] for f in json.loads(cli.stdout)["files"]] == [pulled]


async def test_the_demos_pulls_go_beside_its_runs_not_into_the_checkout(tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    checkout = tmp_path / "checkout"  # where scripts/demo.sh runs the app from
    checkout.mkdir()
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    monkeypatch.chdir(checkout)
    run = write_run(Path(demo_project()) / "demo-1", done=3, total=3, state="completed")
    (run / "weights" / "best.pt").write_bytes(os.urandom(4096))
    # The demo's training is what start_demo launches; this run stands for its result.
    monkeypatch.setattr("tui.demo.start_demo", lambda _progress: (demo_project(), "demo-1"))
    app = GpurentApp([BoxSpec("local", "local", project=demo_project(), demo=True)])
    lands, pulled = await pull_with_w(app)
    want = demo_root() / "weights" / f"local{run.resolve()}" / "weights"
    assert lands == f"lands in {want}{os.sep}" and pulled == str(want / "best.pt")
    assert Path(pulled).read_bytes() == (run / "weights" / "best.pt").read_bytes()
    untracked = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                               cwd=checkout, capture_output=True, text=True, check=True)
    assert untracked.stdout == "", untracked.stdout
