"""The architecture as a test: every module's imports (function-level ones included) are
read with ``ast`` and checked against the rules below, which are the design written down
as data. A planted cycle and a planted forbidden import show that the checker bites."""

from __future__ import annotations

import ast
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.fixtures.importgraph import (
    ROOT,
    box_light_modules,
    cycles,
    find_modules,
    import_graph,
    read_imports,
    rule_violations,
)

#: What every part may import: text for people, the same on the box and the laptop.
BASE = ("trainer.text",)

#: Which parts of the project each part may import, besides :data:`BASE`. A module
#: belongs to the longest part that names it; an allowed entry covers that module and
#: everything under it. Imports inside a part are always allowed (the cycle check keeps
#: them honest).
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    # The TUI reaches remote/ through the wings' faces only (FACES_ONLY below).
    "tui": (*("remote." + w for w in ("link", "watch", "runs", "weights", "billing",
                                      "fleet", "resume", "glance", "serverless")),
            "remote.transport", "remote.config", "remote.fields",
            "trainer.runfiles", "trainer.health", "trainer.engines"),
    # remote/: the ground (config, fields, transport), the wings on it, the entry point.
    # commands -> glance -> resume -> fleet -> billing -> {weights, runs, link};
    # watch -> {link, runs}; runs
    # and weights -> link (the one door to the box tools); every wing -> the ground.
    "remote": ("trainer.runfiles", "trainer._exports"),
    "remote.transport": ("trainer.runfiles", "trainer.health", "trainer._exports"),
    "remote.link": ("remote.config", "remote.transport", "trainer.runfiles",
                    "trainer.version", "trainer._exports"),
    # trainer.procid: the laptop reads a box pid's start time before signalling it.
    # trainer.trainargs: the launch form checks values with the trainer's own parsers.
    # trainer.guard.ring: the probe appends to the box's GPU ring and reads its tail.
    # trainer.hub.push: the probe knows a push under way by its snapshot's name.
    # trainer.guard.lease: the box's lease file, its name and its one parser.
    "remote.runs": ("remote.link", "remote.config", "remote.fields", "remote.transport",
                    "trainer.runfiles", "trainer.health", "trainer.engines",
                    "trainer.guard.state", "trainer.guard.ring", "trainer.guard.lease",
                    "trainer.hub.client", "trainer.hub.push",
                    "trainer.procid", "trainer.smi", "trainer.trainargs",
                    "trainer._exports"),
    "remote.watch": ("remote.link", "remote.runs", "remote.config", "remote.fields",
                     "remote.transport", "trainer.runfiles", "trainer.health",
                     "trainer.engines", "trainer._exports"),
    "remote.weights": ("remote.link", "remote.config", "remote.fields", "remote.transport",
                       "trainer.runfiles", "trainer.hub.client", "trainer._exports"),
    # The instance core: a provider's instance, its money and its destroy check.
    "remote.billing": ("remote.weights", "remote.link", "remote.config", "remote.fields",
                       "remote.transport", "trainer.runfiles", "trainer.providers",
                       "trainer._exports"),
    # The fleet stands on the instance core: every account's instances, leases, the guard
    # armed on a box and the off-box watchdog; billing never reaches up to it.
    # trainer.guard.notify: the off-box watchdog tells the guard's webhooks, in its shapes.
    # trainer.hub.safe: the fleet's folded check stamps the box with the tool's own shell.
    # trainer.guard.lease: a lease's JSON is read by the guard's own parser.
    "remote.fleet": ("remote.billing", "remote.weights", "remote.runs", "remote.link",
                     "remote.config", "remote.fields", "remote.transport", "trainer.runfiles",
                     "trainer.providers", "trainer.guard.notify", "trainer.guard.lease",
                     "trainer.hub.safe", "trainer._exports"),
    # A run resumed or moved: a new instance (billing), its guard and lease carried along
    # (fleet); nothing below reaches up to it.
    "remote.resume": ("remote.fleet", "remote.billing", "remote.weights", "remote.runs",
                      "remote.link", "remote.config", "remote.fields", "remote.transport",
                      "trainer.runfiles", "trainer.providers", "trainer._exports"),
    # glance -> fleet (every instance) -> billing (accounts, intents) -> runs (a run's
    # status in one exec) -> link; it reads the laptop's Hub token only to keep it out.
    "remote.glance": ("remote.fleet", "remote.billing", "remote.weights", "remote.runs",
                      "remote.link",
                      "remote.config", "remote.fields", "remote.transport",
                      "trainer.runfiles", "trainer.health", "trainer.providers",
                      "trainer._exports"),
    # serverless -> billing (the intents that record an app) -> the ground: a Modal app
    # is watched through its Volume (remote.transport.volume), not a box's tools;
    # remote.runs only for the trainer's argument rules (a launch refuses what it would).
    "remote.serverless": ("remote.billing", "remote.weights", "remote.config",
                          "remote.transport", "remote.fields", "remote.runs",
                          "trainer.runfiles", "trainer._exports"),
    # trainer.version: the providers canary's report names the version that read it.
    "remote.commands": ("remote.serverless", "remote.glance", "remote.resume", "remote.fleet",
                        "remote.billing",
                        "remote.weights", "remote.runs",
                        "remote.watch", "remote.link", "remote.config", "remote.fields",
                        "remote.transport", "trainer.runfiles", "trainer.health",
                        "trainer.providers", "trainer.engines", "trainer.guard.notify",
                        "trainer.guard.state", "trainer.version"),
    "remote.cli": ("remote.commands", "remote.transport", "trainer.version"),
    "trainer": ("trainer._exports", "trainer.version"),
    "trainer.__main__": ("trainer.version",),
    "trainer._exports": (),
    "trainer.version": (),
    "trainer.text": (),
    "trainer.smi": (),
    "trainer.runfiles": (),
    "trainer.health": ("trainer.runfiles",),
    "trainer.engines": ("trainer.runfiles",),
    "trainer.procid": (),
    "trainer.trainargs": (),
    "trainer.follow": ("trainer.runfiles", "trainer.health", "trainer.smi", "trainer.engines",
                       "trainer.watch"),
    # What the follower and `trainer runs`/`trainer log` read; guard.state for the
    # guard's file and liveness, streamed to the laptop.
    "trainer.watch": ("trainer.runfiles", "trainer.health", "trainer.smi", "trainer.procid",
                      "trainer.guard.state", "trainer.version", "trainer.engines"),
    "trainer.providers": (),
    "trainer.hub": ("trainer.runfiles", "trainer.health", "trainer._exports", "trainer.engines"),
    "trainer.guard": ("trainer.runfiles", "trainer.health", "trainer.providers",
                      "trainer.hub.safe", "trainer.smi", "trainer._exports", "trainer.procid",
                      "trainer.engines"),
    "trainer.checks": ("trainer.datasets.layout", "trainer.smi", "trainer._exports"),
    "trainer.datasets": ("trainer._exports",),
    "trainer.detector": ("trainer._exports",),
    "trainer.engine": ("trainer.runfiles", "trainer.health", "trainer.datasets",
                       "trainer.detector", "trainer.hub.uploader", "trainer._exports",
                       "trainer.procid", "trainer.trainargs"),
    # trainer.engines: the probes' private directory is in the box's gpurent cache.
    "trainer.profiler": ("trainer.runfiles", "trainer.health", "trainer.engine",
                         "trainer.datasets", "trainer.detector", "trainer._exports",
                         "trainer.engines"),
}

#: Parts that may import these packages through their face (``__init__``) only, never
#: a module inside them.
FACES_ONLY: dict[str, tuple[str, ...]] = {
    "tui": ("remote.link", "remote.watch", "remote.runs", "remote.weights", "remote.billing",
            "remote.fleet", "remote.resume", "remote.glance", "remote.transport",
            "remote.serverless"),
}

#: The wings of ``remote/``: folders with one job and a face. Everything else at its top
#: is the entry point or the ground (``__init__``, ``cli``, ``config``, ``fields``,
#: ``transport/``), at most :data:`REMOTE_TOP_CAP` modules.
REMOTE_WINGS = ("link", "watch", "runs", "weights", "billing", "fleet", "resume", "glance",
                "commands", "serverless")
REMOTE_TOP_CAP = 5

#: Third-party packages a part must never import, not even inside a function.
NEVER: dict[str, tuple[str, ...]] = {
    "tui": ("torch",),
    "remote": ("torch", "textual"),
    "trainer": ("textual", "paramiko"),
}


MODULES = find_modules(ROOT)
IMPORTS = read_imports(MODULES)


def test_no_import_cycles() -> None:
    assert cycles(import_graph(IMPORTS, MODULES)) == []


def test_every_import_follows_the_rules() -> None:
    assert rule_violations(IMPORTS, MODULES, MAY_IMPORT, NEVER, BASE, FACES_ONLY) == []


def test_box_side_light_modules_import_nothing_heavy_at_module_level() -> None:
    # `tests/test_imports.py` also imports each of them under `python -S`.
    light = box_light_modules(MODULES)
    for imp in IMPORTS:
        if imp.top_level and imp.source in light:
            top = imp.target.split(".")[0]
            assert top in sys.stdlib_module_names or top == "trainer", \
                f"{imp.source}:{imp.line} imports {imp.target} at module level"


def remote_top(root: Path) -> list[str]:
    """The modules at ``remote/``'s top under ``root``, packages counted, wings left out."""
    remote = root / "remote"
    names = {p.stem for p in remote.glob("*.py")}
    names |= {p.name for p in remote.iterdir()
              if (p / "__init__.py").is_file() and p.name not in REMOTE_WINGS}
    return sorted(names)


def test_the_tree_stays_readable() -> None:
    top = list((ROOT / "trainer").glob("*.py"))
    assert len(top) <= 12, sorted(p.name for p in top)
    # remote/'s top holds the entry point and the ground only; the rest lives in wings.
    assert len(remote_top(ROOT)) <= REMOTE_TOP_CAP, remote_top(ROOT)
    long = {name: n for name, path in MODULES.items()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > 500}
    assert long == {}


# ------------------------------------------------------------- the checker bites


def _plant(root: Path, files: Mapping[str, str]) -> dict[str, Path]:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return find_modules(root)


def test_a_planted_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    modules = _plant(tmp_path, {
        "trainer/__init__.py": "",
        "trainer/engine/__init__.py": "",
        "trainer/engine/plan.py": "def f():\n    from trainer.engine.loop import run\n",
        "trainer/engine/loop.py": "from trainer.engine.plan import f\n",
        "trainer/engine/world.py": "",
    })
    found = cycles(import_graph(read_imports(modules), modules))
    assert found == [["trainer.engine.loop", "trainer.engine.plan"]]


def test_a_cycle_through_a_package_init_is_found(tmp_path: Path) -> None:
    modules = _plant(tmp_path, {
        "remote/__init__.py": "",
        "remote/billing/__init__.py": "from remote.billing.teardown import x\n",
        "remote/billing/teardown.py": "from remote.weights.safety import y\nx = 1\n",
        "remote/weights/safety.py": "from remote.billing.cost import z\ny = 1\n",
        "remote/billing/cost.py": "z = 1\n",
    })
    found = cycles(import_graph(read_imports(modules), modules))
    assert found == [["remote.billing", "remote.billing.teardown", "remote.weights.safety"]]


def test_planted_forbidden_imports_are_reported(tmp_path: Path) -> None:
    modules = _plant(tmp_path, {
        "trainer/__init__.py": "",
        "trainer/runfiles.py": "def f():\n    import paramiko\n",
        "trainer/hub/__init__.py": "",
        "trainer/hub/push.py": "from remote.weights.pull import pull\n",
        "remote/__init__.py": "",
        "remote/weights/__init__.py": "",
        "remote/weights/pull.py": "from trainer.hub.push import push\npull = 1\n",
        "remote/link/__init__.py": "",
        "remote/link/gate.py": "from remote.runs.read import read_run\n",
        "remote/runs/__init__.py": "",
        "remote/runs/read.py": "read_run = 1\n",
        "tui/__init__.py": "",
        "tui/app.py": "def go():\n    import torch\n    from trainer import runfiles\n",
        "tui/box.py": "from remote.runs import read_run\nfrom remote.runs.read import read_run\n",
    })
    found = rule_violations(read_imports(modules), modules, MAY_IMPORT, NEVER, BASE, FACES_ONLY)
    link = ", ".join(MAY_IMPORT["remote.link"])
    weights = ", ".join(MAY_IMPORT["remote.weights"])
    assert sorted(found) == sorted([
        "trainer.runfiles:2 imports paramiko (never under trainer)",
        "trainer.hub.push:1 imports remote.weights.pull (trainer.hub may import "
        "trainer.runfiles, trainer.health, trainer._exports, trainer.engines)",
        f"remote.weights.pull:1 imports trainer.hub.push (remote.weights may import {weights})",
        # a lower wing reaching up: the link must not know about runs
        f"remote.link.gate:1 imports remote.runs.read (remote.link may import {link})",
        "tui.app:2 imports torch (never under tui)",
        # the face is fine, the inside is not
        "tui.box:2 imports remote.runs.read (tui may import remote.runs through its face only)",
    ])


def test_a_planted_sixth_module_at_remotes_top_is_over_the_cap(tmp_path: Path) -> None:
    ground = {"remote/__init__.py": "", "remote/cli.py": "", "remote/config.py": "",
              "remote/fields.py": "", "remote/transport/__init__.py": "",
              **{f"remote/{wing}/__init__.py": "" for wing in REMOTE_WINGS}}
    _plant(tmp_path, ground)
    assert len(remote_top(tmp_path)) == REMOTE_TOP_CAP  # the wings are not counted
    _plant(tmp_path, {"remote/extra.py": ""})
    assert len(remote_top(tmp_path)) > REMOTE_TOP_CAP
    (tmp_path / "remote" / "extra.py").unlink()
    _plant(tmp_path, {"remote/extras/__init__.py": ""})  # a folder that is no wing
    assert len(remote_top(tmp_path)) > REMOTE_TOP_CAP


def test_planted_imports_up_the_fleet_and_resume_wings_are_reported(tmp_path: Path) -> None:
    # resume -> fleet -> billing: the instance core never reaches up, the fleet never
    # reaches the resume wing, and the TUI takes both through their faces.
    modules = _plant(tmp_path, {
        "remote/__init__.py": "",
        "remote/billing/__init__.py": "",
        "remote/billing/cost.py": "from remote.fleet.leases import lease_for\n",
        "remote/fleet/__init__.py": "",
        "remote/fleet/leases.py": "from remote.resume.move import move_run\nlease_for = 1\n",
        "remote/resume/__init__.py": "",
        "remote/resume/move.py": "from remote.fleet.leases import lease_for\nmove_run = 1\n",
        "tui/__init__.py": "",
        "tui/fleet.py": ("from remote.fleet import lease_for\n"
                         "from remote.resume.move import move_run\n"),
    })
    found = rule_violations(read_imports(modules), modules, MAY_IMPORT, NEVER, BASE, FACES_ONLY)
    billing = ", ".join(MAY_IMPORT["remote.billing"])
    fleet = ", ".join(MAY_IMPORT["remote.fleet"])
    assert sorted(found) == sorted([
        f"remote.billing.cost:1 imports remote.fleet.leases (remote.billing may import {billing})",
        f"remote.fleet.leases:1 imports remote.resume.move (remote.fleet may import {fleet})",
        "tui.fleet:2 imports remote.resume.move (tui may import remote.resume through its face "
        "only)",
    ])


def imports_of_test_modules(tests: Path) -> list[str]:
    """Every import, under ``tests``, of a test module (``tests.x.test_y``, relative ones
    included): shared helpers live in conftest files and ``tests/fixtures/``."""
    found = []
    for path in sorted(tests.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else \
                [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names += [f"{node.module or ''}.{a.name}" for a in node.names]
            if any(part.startswith("test_") for name in names for part in name.split(".")):
                found.append(f"{path.relative_to(tests)}:{node.lineno}")
    return found


def test_no_test_module_imports_another() -> None:
    assert imports_of_test_modules(ROOT / "tests") == []


def test_a_planted_import_of_a_test_module_is_found(tmp_path: Path) -> None:
    _plant(tmp_path, {
        "tests/fixtures/pilot.py": "from tests.fixtures.sshd import SSHServer\n",
        "tests/tui/test_app.py": "from tests.fixtures.pilot import until\n",
        "tests/tui/test_words.py": "from tests.tui.test_app import until\n",
        "tests/tui/box/test_parts.py": "def f():\n    from ..test_app import until\n",
        "tests/remote/test_x.py": "import tests.tui.test_app\n",
        "tests/remote/test_y.py": "from tests.tui import test_app\n",
    })
    assert imports_of_test_modules(tmp_path / "tests") == [
        "remote/test_x.py:1", "remote/test_y.py:1", "tui/box/test_parts.py:2",
        "tui/test_words.py:1"]
