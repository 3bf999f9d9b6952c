"""Lazy public faces for the subpackages: a package's ``__init__`` names what it offers
without importing its modules, so ``import trainer.hub.client`` on the laptop loads one
module and nothing in ``trainer.engine`` imports torch until a name is used."""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path


def lazy_exports(package: str, faces: Mapping[str, Sequence[str]]
                 ) -> tuple[list[str], Callable[[str], object]]:
    """``(__all__, __getattr__)`` for ``package``; ``faces`` maps each submodule's name
    to the public names it defines."""
    where = {name: f"{package}.{module}" for module, names in faces.items() for name in names}
    return _lazy(package, where)


def typed_exports(package: str, init_file: str
                  ) -> tuple[list[str], Callable[[str], object]]:
    """``(__all__, __getattr__)`` for ``package``, read from the ``if TYPE_CHECKING:``
    block of its ``__init__`` (``init_file``): each ``from MODULE import NAME`` there is
    a public name, loaded from MODULE on first use. A type checker reads the same block,
    so the face is written once and checked."""
    tree = ast.parse(Path(init_file).read_text(encoding="utf-8"), init_file)
    where = {alias.name: stmt.module
             for node in tree.body
             if isinstance(node, ast.If) and isinstance(node.test, ast.Name)
             and node.test.id == "TYPE_CHECKING"
             for stmt in node.body
             if isinstance(stmt, ast.ImportFrom) and stmt.module and not stmt.level
             for alias in stmt.names}
    if not where:
        raise ImportError(f"{init_file} names nothing under `if TYPE_CHECKING:`")
    return _lazy(package, where)


def _lazy(package: str, where: Mapping[str, str]
          ) -> tuple[list[str], Callable[[str], object]]:
    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return sorted(where), __getattr__
