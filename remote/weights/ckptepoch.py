"""The epoch a pulled ``last.pt`` holds, read on the laptop without torch.

A torch checkpoint is a zip whose ``*/data.pkl`` pickles the saved dict; tensors are
persistent ids. The pickle is read with an unpickler that never resolves a real global
(every class and function named in it becomes an inert stand-in), so reading a file is
safe whatever it holds; only the top-level ``epoch`` integer is taken.
"""

from __future__ import annotations

import pickle
import zipfile
from typing import Any


class _Inert:
    """What any global named in the pickle becomes: takes anything, does nothing."""

    def __init__(self, *_args: Any, **_kwargs: Any) -> None:
        pass

    def __setitem__(self, _key: Any, _value: Any) -> None:
        pass

    def __setstate__(self, _state: Any) -> None:
        pass


class _Reader(pickle.Unpickler):
    """An unpickler that resolves no global and loads no tensor."""

    def find_class(self, module: str, name: str) -> Any:
        return dict if (module, name) == ("collections", "OrderedDict") else _Inert

    def persistent_load(self, pid: Any) -> None:
        return None


def checkpoint_epoch(path: str) -> int | None:
    """The ``epoch`` of the torch checkpoint at ``path``; ``None`` when it is unreadable
    or holds none."""
    try:
        with zipfile.ZipFile(path) as archive:
            names = [n for n in archive.namelist() if n.endswith("/data.pkl")]
            if len(names) != 1:
                return None
            with archive.open(names[0]) as fh:
                saved = _Reader(fh).load()
    except (OSError, zipfile.BadZipFile, pickle.UnpicklingError, EOFError, ValueError,
            TypeError, AttributeError, IndexError, KeyError):
        return None
    epoch = saved.get("epoch") if isinstance(saved, dict) else None
    return epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else None
