"""The app as the README installs it: a wheel built from the project, installed (not
editable) into a fresh environment, started from a directory outside the checkout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.fixtures.wheel import install_wheel

#: Started by the installed python: the TUI headless on a local project, until it runs.
START = """
import asyncio, sys
import tui
from tui.app import GpurentApp
from tui.main import build_parser, connect_early, specs_from_args

async def main():
    parser = build_parser()
    specs = connect_early(specs_from_args(parser.parse_args(sys.argv[1:]), parser))
    app = GpurentApp(specs)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        print("started", tui.__file__, flush=True)
        await pilot.press("q")

asyncio.run(main())
"""


@pytest.mark.slow
def test_the_installed_wheel_starts_outside_the_checkout(tmp_path: Path) -> None:
    venv = install_wheel(tmp_path)
    py = venv / "bin" / "python"

    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "runs").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HOME"] = str(tmp_path / "home")
    helped = subprocess.run([str(venv / "bin" / "gpurent"), "--help"], cwd=elsewhere, env=env,
                            capture_output=True, text=True, timeout=120)
    assert helped.returncode == 0 and "usage: gpurent" in helped.stdout, helped.stderr
    started = subprocess.run([str(py), "-c", START, "--local", "runs"], cwd=elsewhere, env=env,
                             capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-2000:]
    where = started.stdout.split("started ", 1)[1].split()[0]
    assert Path(where).is_relative_to(venv), where
