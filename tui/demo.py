"""``gpurent-tui --demo``: a generated shapes dataset in the cache directory and a short
run of the built-in trainer on this machine, launched through ``remote.runs.launch`` with
``LocalTransport``: the whole job on a built-in default, no box needed."""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable
from pathlib import Path

#: The demo dataset: big enough that the run visibly learns within two minutes on a
#: laptop CPU (mAP50 ~0.7 by epoch 8, ~0.86 at the end; see docs/BENCHMARKS.md).
DEMO_SHAPES = ["--train", "320", "--val", "64", "--imgsz", "96"]
#: The demo run's arguments (``key=value``, as ``trainer train`` takes them).
DEMO_ARGS = {"model": "n", "epochs": "15", "imgsz": "96", "batch": "16", "workers": "1"}


def demo_root() -> Path:
    """``$XDG_CACHE_HOME/gpurent/demo`` (default ``~/.cache/gpurent/demo``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "gpurent" / "demo"


def demo_project() -> str:
    """Where the demo runs are written."""
    return str(demo_root() / "runs")


def demo_data_yaml() -> str:
    """The demo dataset's data.yaml."""
    return str(demo_root() / "shapes" / "data.yaml")


#: What the demo's training needs in this python: (module, the package that brings it).
DEMO_NEEDS = (("torch", "torch"), ("numpy", "numpy"), ("PIL", "pillow"), ("yaml", "pyyaml"))


def missing_for_demo() -> list[str]:
    """The packages of the trainer's extra that this python lacks (found, not imported:
    importing torch takes seconds)."""
    missing = []
    for module, package in DEMO_NEEDS:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # ValueError: a module blanked in sys.modules
            found = False
        if not found:
            missing.append(package)
    return missing


def start_demo(progress: Callable[[str], None]) -> tuple[str, str]:
    """Generate the dataset (once) and launch a demo run; ``(project, run name)``.

    Blocking: called from the box view's connect worker."""
    from remote.link import BoxToolFailed, tool_report
    from remote.runs import LaunchSpec, launch_run
    from remote.transport import LocalTransport

    transport = LocalTransport()
    data = Path(demo_data_yaml())
    if not data.is_file():
        progress(f"generating the shapes dataset in {data.parent}")
        try:
            tool_report(transport, ["shapes", str(data.parent), *DEMO_SHAPES, "--json"],
                        timeout=600)
        except BoxToolFailed as exc:
            raise RuntimeError(f"generating the dataset failed: {exc.why or '?'}") from None
    name = time.strftime("demo-%Y%m%d-%H%M%S")
    progress(f"launching the demo run {name}")
    spec = LaunchSpec(engine="trainer", project=demo_project(), name=name,
                      args={**DEMO_ARGS, "data": str(data)})
    launch_run(transport, spec)
    transport.close()
    return demo_project(), name
