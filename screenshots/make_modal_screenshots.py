"""Render the README's pictures of a Modal run from a real one.

The real ``modal`` client and CLI talk to the Modal stand-in of the test harness
(``tests.fixtures.modal_standin``, never Modal itself), which runs the app's function for
real in a local process: ``gpurent launch modal:shapes ...`` launches a tiny CPU run of
our trainer detached, ``gpurent-tui modal:shapes`` watches it through its runs Volume to
its end, then ``l`` opens the launch form of the next run, whose Estimate is a real probe.
Writes SVGs with Textual's ``save_screenshot`` and PNGs when ``cairosvg`` is installed.

    .venv/bin/python screenshots/make_modal_screenshots.py [--out screenshots]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from make_screenshots import LARGE, SMALL, say, settle, to_png  # noqa: E402

from tests.fixtures.modal_standin import ModalStandin  # noqa: E402
from trainer.datasets.shapes import write_dataset  # noqa: E402

WAIT = 300.0


def launch(data_dir: Path) -> None:
    """``gpurent launch modal:shapes``: a tiny CPU run, detached, with a 2 h timeout."""
    done = subprocess.run(
        [sys.executable, "-m", "remote.cli", "launch", "modal:shapes", "name=r1", "model=n",
         "imgsz=64", "epochs=6", "batch=4", "workers=0", "seed=0",
         "data=/cache/shapes/data.yaml", "gpu=cpu", "timeout=2h"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True,
        text=True, timeout=WAIT)
    if done.returncode:
        raise SystemExit(f"launch failed: {done.stderr}")
    say(done.stdout.strip())


async def shoot(out: Path) -> list[Path]:
    """The run as it trains and once ended (both sizes), then the next run's form."""
    from tui.box.view import BoxView
    from tui.dialogs.modal_form import ModalForm
    from tui.main import app_from_args

    saved: list[Path] = []
    app = app_from_args(["modal:shapes"])
    async with app.run_test(size=LARGE) as pilot:
        box = app.query_one(BoxView)

        def epochs() -> int:
            status = box.state.status
            return 0 if status is None else int(status.read.get("completed_epochs") or 0)

        await settle(pilot, lambda: epochs() >= 3, WAIT)
        for name, (width, height) in (("modal-run", LARGE), ("modal-run", SMALL)):
            await pilot.resize_terminal(width, height)
            await pilot.pause(1.2)  # a tick draws the money line again
            path = out / f"{name}-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
            say(f"wrote {path}")
        await pilot.resize_terminal(*LARGE)
        state = box.spec.connector.state
        await settle(pilot, lambda: box.state.status is not None
                     and box.state.status.health.verdict == "completed", WAIT)
        await settle(pilot, lambda: (view := state.last()) is not None and not view.running,
                     WAIT)
        await pilot.press("l")
        await settle(pilot, lambda: isinstance(app.screen, ModalForm))
        form = app.screen
        form.query_one("#estimate").press()
        await settle(pilot, lambda: form.proposed != "", WAIT)
        for width, height in (LARGE, SMALL):
            await pilot.resize_terminal(width, height)
            await pilot.pause(0.8)
            path = out / f"modal-form-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
            say(f"wrote {path}")
    return saved


def main() -> int:
    """Stand Modal in, launch, shoot, convert."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpurent-modal-shots-") as tmp:
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        os.environ["OMP_NUM_THREADS"] = "1"
        standin = ModalStandin(Path(tmp) / "modal")
        os.environ.update(standin.env())
        os.environ["MODAL_CONFIG_PATH"] = str(Path(tmp) / "modal.toml")
        try:
            data = write_dataset(Path(tmp) / "shapes", train=16, val=8, imgsz=64, seed=0)
            shutil.copytree(data.parent, standin.volumes.published("gpurent-cache") / "shapes")
            started = time.monotonic()
            launch(data.parent)
            paths = asyncio.run(shoot(out))
            say(f"done in {time.monotonic() - started:.0f}s")
        finally:
            standin.close()
    to_png(paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
