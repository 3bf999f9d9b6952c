"""``python3 -m trainer ready [--json]``: can this python start a training run?

Standard library only, and quick: the modules training needs are looked up, not imported,
so the answer costs no torch import. The launcher asks it before starting a run, so a
python without torch is refused with the fix instead of starting a run that dies at
``import torch``. Exit 0 ready, 1 something is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import sys
from typing import Any

#: What ``trainer train`` imports, by import name -> the pip name that provides it.
NEEDED = {"torch": "torch", "numpy": "numpy", "PIL": "pillow", "yaml": "pyyaml"}
#: What the other box tools use when it is there (GPU stats, Hub pushes).
OPTIONAL = ("psutil", "huggingface_hub")


def installed_version(module: str, dist: str | None = None) -> str | None:
    """The version of the distribution providing ``module`` from its metadata (no import);
    ``None`` when the module is not importable, ``"?"`` when it has no metadata."""
    if importlib.util.find_spec(module) is None:
        return None
    try:
        from importlib.metadata import PackageNotFoundError, version
    except ImportError:
        return "?"
    try:
        return version(dist or module)
    except PackageNotFoundError:
        return "?"


def readiness() -> dict[str, Any]:
    """``python``, ``executable``, ``trainer`` (the package directory that runs),
    ``torch`` (version or null), ``missing`` (pip names), ``optional`` (module -> version
    or null), ``ok``."""
    missing = [pip for module, pip in NEEDED.items() if importlib.util.find_spec(module) is None]
    trainer = importlib.util.find_spec("trainer")
    return {"python": platform.python_version(), "executable": sys.executable,
            "trainer": os.path.dirname(trainer.origin or "") if trainer else None,
            "torch": installed_version("torch"), "missing": missing,
            "optional": {name: installed_version(name) for name in OPTIONAL},
            "ok": not missing}


def main(argv: list[str]) -> int:
    """Print whether this python can train; 0 when it can."""
    p = argparse.ArgumentParser(prog="python3 -m trainer ready",
                                description="Say whether this python can start a training run.")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)
    report = readiness()
    if args.json:
        print(json.dumps(report))
    elif report["ok"]:
        print(f"ready: python {report['python']} at {report['executable']}, "
              f"torch {report['torch']}")
    else:
        print(f"not ready: python {report['python']} at {report['executable']} cannot import "
              f"{', '.join(report['missing'])}")
    return 0 if report["ok"] else 1
