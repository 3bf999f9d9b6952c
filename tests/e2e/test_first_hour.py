"""The README's first hour (issue 37): its commands exist and parse, every path the
README names is in the repository, and, as written, they take a fresh box (a real sshd,
logged into as a user of its own) from nothing to a run that trains there, the dataset
put on the Hub (stand-in) with ``hf`` and staged on the box by ``gpurent stage``."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.cli import build_parser
from tests.fixtures.cli import ssh_home
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.paths import ROOT
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_main_kit import specs
from trainer.datasets.shapes import write_dataset

README = ROOT / "README.md"
BIN = Path(sys.executable).parent


def first_hour() -> list[str]:
    """The commands of the README's first hour, in order, their comments dropped."""
    section = README.read_text(encoding="utf-8").split("\n## The first hour\n", 1)[1]
    block = section.split("\n## ", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines()
            if line.startswith("    ") and line.strip()]


def test_every_command_of_the_first_hour_exists_and_parses() -> None:
    commands = [shlex.split(c) for c in first_hour()]
    assert [words[0] for words in commands] == [
        "pipx", "tar", "hf", "gpurent", "gpurent", "gpurent", "gpurent", "gpurent-tui"]
    for words in commands:
        if words[0] == "gpurent":
            assert build_parser().parse_args(words[1:]).func  # SystemExit when it does not
        elif words[0] == "gpurent-tui":
            assert [s.target for s in specs(*words[1:])] == ["box"]
        elif words[0] == "hf":
            shown = subprocess.run([str(BIN / "hf"), words[1], "--help"], capture_output=True,
                                   text=True, timeout=120)
            assert shown.returncode == 0, shown.stderr
            assert all(w in shown.stdout for w in words if w.startswith("--"))
    # `pipx install --include-deps .` puts the apps of the dependencies beside ours: hf
    # is huggingface_hub's, a dependency of this project.
    (hf,) = importlib.metadata.entry_points(group="console_scripts", name="hf")
    assert hf.dist is not None and hf.dist.name == "huggingface_hub"
    assert "huggingface_hub" in (ROOT / "pyproject.toml").read_text()


def test_every_path_the_readme_names_is_in_the_repository() -> None:
    text = README.read_text(encoding="utf-8")
    named = re.findall(r"\]\(([^)\s]+)\)", text)  # links and images
    named += re.findall(r"`((?:\.\./|\.ci/|docs/|scripts/|tests/|screenshots/|bench/)"
                        r"[^`\s]+)`", text)
    named += re.findall(r"# (docs/\S+)", text)  # in the examples' comments
    assert len(named) > 10
    assert [p for p in named if "://" not in p and not (ROOT / p).exists()] == []


def hub_at(hub: HubStandin) -> dict[str, str]:
    """The environment that points huggingface_hub (and ``hf``) at the stand-in."""
    return {"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1"}


def box_hub(request: pytest.FixtureRequest) -> dict[str, str]:
    """The box's Hub: the stand-in."""
    return hub_at(request.getfixturevalue("hub_standin"))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.box_env.with_args(box_hub)  # a function: with_args, not a decorator
def test_the_first_hour_as_written(user_box: SSHServer, hub_standin: HubStandin,
                                   tmp_path: Path) -> None:
    box = user_box
    here = tmp_path / "work"  # the laptop's working directory, with the user's dataset
    write_dataset(here / "mydata", train=8, val=4, imgsz=32, seed=0)
    env = {**os.environ, **ssh_home(tmp_path, box), "PATH": f"{BIN}{os.pathsep}"
           f"{os.environ['PATH']}", "PYTHONPATH": str(ROOT), "HF_TOKEN": VALID_TOKEN,
           "HF_HOME": str(tmp_path / "laptop-hf"), **hub_at(hub_standin)}
    said: dict[str, str] = {}
    for command in first_hour():
        tool = command.split()[0]
        if tool in ("pipx", "gpurent-tui"):  # the install is this one; the watch is below
            continue
        done = subprocess.run(command, shell=True, cwd=here, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        said[command.split()[1] if tool == "gpurent" else tool] = done.stdout
    assert hub_standin.repo("me/data", "dataset").private
    home = Path(box.home)
    assert said["stage"].splitlines()[-1] == f"data={home / 'data/mydata/data.yaml'}"
    assert said["shapes"].splitlines()[-1] == f"data={home / 'data/shapes/data.yaml'}"
    # The watch, headless: the run trains on the box with the staged dataset.
    run = "box:runs/train/first"
    deadline = time.monotonic() + 600
    while True:
        status = subprocess.run([str(BIN / "gpurent"), "status", run, "--json"], env=env,
                                capture_output=True, text=True, timeout=120)
        summary = json.loads(status.stdout) if status.returncode == 0 else {}
        if (summary.get("epoch") or 0) >= 1:
            break
        assert summary.get("health") not in ("failed", "dead"), summary
        assert time.monotonic() < deadline, (status.stdout, status.stderr)
        time.sleep(2)
    assert summary["health"] in ("live", "slow") and summary["total_epochs"] == 50
    stopped = subprocess.run([str(BIN / "gpurent"), "stop", run], env=env,
                             capture_output=True, text=True, timeout=300)
    assert stopped.returncode == 0, stopped.stderr

