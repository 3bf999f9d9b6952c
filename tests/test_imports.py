"""Import hygiene: the laptop side never loads torch, the headless side never loads
textual, and the box-side contract and follower stay standard-library only."""

from __future__ import annotations

import json
import os
import pkgutil
import subprocess
import sys

import pytest

from tests.fixtures.importgraph import ROOT, box_light_modules, find_modules

#: Modules that must run on a box with nothing but python3: every module of ``trainer``
#: outside the subpackages that need torch (``importgraph.HEAVY``).
STDLIB_ONLY = box_light_modules(find_modules(ROOT, ["trainer"]))


def modules_of(package: str) -> list[str]:
    """Every module of a top-level package in this repository."""
    found = [package]
    for info in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}."):
        found.append(info.name)
    return found


def loaded_after_import(modules: list[str], *, bare: bool = False) -> set[str]:
    """Top-level names in sys.modules after importing ``modules`` in a fresh interpreter.

    ``bare`` runs it without site-packages (``-S``), like a box that has only python3."""
    code = (
        "import importlib, json, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    flags = ["-S"] if bare else []
    result = subprocess.run([sys.executable, *flags, "-c", code], capture_output=True, text=True,
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                            timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout))


def test_laptop_side_never_loads_torch() -> None:
    loaded = loaded_after_import(modules_of("remote") + modules_of("tui"))
    assert "torch" not in loaded


def test_headless_and_box_side_never_load_textual() -> None:
    loaded = loaded_after_import(modules_of("remote") + modules_of("trainer"))
    assert "textual" not in loaded


@pytest.mark.parametrize("module", STDLIB_ONLY)
def test_box_contract_is_standard_library_only(module: str) -> None:
    loaded = loaded_after_import([module], bare=True)
    third_party = loaded - set(sys.stdlib_module_names) - {"trainer", "__main__"}
    assert not third_party, f"{module} imports {sorted(third_party)}"


def test_a_face_is_its_type_checking_imports_loaded_on_first_use(tmp_path) -> None:
    """A wing's face is written once, under ``if TYPE_CHECKING:`` (what mypy reads):
    ``trainer._exports.typed_exports`` names those and loads a module on first use."""
    (tmp_path / "wing").mkdir()
    (tmp_path / "wing" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from trainer._exports import typed_exports\n"
        "if TYPE_CHECKING:\n"
        "    from wing.part import Thing, make\n"
        "__all__, __getattr__ = typed_exports(__name__, __file__)\n")
    (tmp_path / "wing" / "part.py").write_text("Thing = 1\ndef make():\n    return 2\n")
    code = ("import sys, wing\n"
            "assert wing.__all__ == ['Thing', 'make'], wing.__all__\n"
            "assert 'wing.part' not in sys.modules\n"
            "assert wing.make() == 2 and 'wing.part' in sys.modules\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"},
                            timeout=60)
    assert result.returncode == 0, result.stderr
