"""What the laptop needs to know about this install, sent in the follower's ``hello``:
the python and the directory the trainer runs from (so the laptop can build its command
prefix without another round trip) and which of the box tools' needs this python lacks.

The needs check is cached by version: once nothing is missing, ``deps-X.Y.ok-KEY``
(KEY: a hash of the python's path) beside the install says so and later starts skip the
look-up; a failed install leaves
``deps-X.Y.failed`` (written by the laptop), which is reported so that it is not retried.
Standard library only."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from trainer.version import __version__

#: The directory holding the ``trainer`` package (the versioned install on a box).
INSTALL_DIR = Path(__file__).resolve().parents[2]
#: The marker bootstrap writes last into an uploaded install (a checkout has none, and
#: gets no cache file).
UPLOADED = ".complete"


def deps_name() -> str:
    """``deps-X.Y``: where ``pip install --target`` puts the needs for this python."""
    return f"deps-{sys.version_info[0]}.{sys.version_info[1]}"


def missing_needs(names: list[str], install: Path = INSTALL_DIR) -> list[str]:
    """The import names in ``names`` this python cannot find (cached once none is)."""
    key = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]
    ok = install / f"{deps_name()}.ok-{key}"
    if not names or ok.exists():
        return []
    missing = [name for name in names if importlib.util.find_spec(name) is None]
    if not missing and (install / UPLOADED).exists():
        with contextlib.suppress(OSError):
            ok.write_text(",".join(names) + "\n")
    return missing


def box_info(needs: list[str], install: Path = INSTALL_DIR) -> dict[str, Any]:
    """``python`` (absolute), ``python_version``, ``dir`` (what PYTHONPATH names),
    ``version`` (the trainer's), ``missing`` (needs) and ``failed`` (an install of them
    failed before on this version)."""
    v = sys.version_info
    return {"python": sys.executable, "python_version": f"{v[0]}.{v[1]}.{v[2]}",
            "dir": str(install), "version": __version__,
            "missing": missing_needs(needs, install),
            "failed": (install / f"{deps_name()}.failed").exists()}
