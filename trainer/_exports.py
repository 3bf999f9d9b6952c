"""Lazy public faces for the subpackages: a package's ``__init__`` names what it offers
without importing its modules, so ``import trainer.hub.client`` on the laptop loads one
module and nothing in ``trainer.engine`` imports torch until a name is used."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence


def lazy_exports(package: str, faces: Mapping[str, Sequence[str]]
                 ) -> tuple[list[str], Callable[[str], object]]:
    """``(__all__, __getattr__)`` for ``package``; ``faces`` maps each submodule's name
    to the public names it defines."""
    where = {name: f"{package}.{module}" for module, names in faces.items() for name in names}

    def __getattr__(name: str) -> object:
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(where[name]), name)

    return sorted(where), __getattr__
