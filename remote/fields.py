"""Fields of box files and reports (guard.json, the Hub answer, preflight, doctor and
profile reports) read by type: a field of the wrong type reads as unreadable, for that
field only, and never crashes whoever shows it. Text comes back cleaned
(``trainer.text.clean_text``)."""

from __future__ import annotations

import math
from typing import Any

from trainer.text import clean_text

#: What a wrongly typed field shows instead of its value.
UNREADABLE = "(unreadable)"


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def objs(value: Any) -> list[dict[str, Any]]:
    """The objects of a JSON list (other items dropped); ``[]`` when not a list."""
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def num(value: Any) -> float | None:
    """A JSON number as a finite float, else ``None``: booleans are not numbers, and NaN,
    the infinities and an integer past a float's range are none either. The one reader
    of "a number from JSON" for remote/ and tui/."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def integer(value: Any) -> int | None:
    """An integer, else ``None``."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def text(value: Any, missing: str = "?") -> str:
    """A string or number as clean text; ``missing`` for null or absent, ``UNREADABLE``
    for anything else (an object, a list, true/false)."""
    if value is None:
        return missing
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return f"{value:g}" if isinstance(value, float) else str(value)
    return UNREADABLE


def texts(value: Any) -> list[str]:
    """A JSON list as clean texts (``[]`` when not a list)."""
    return [text(v) for v in value] if isinstance(value, list) else []


def typed(data: dict[str, Any], types: dict[str, tuple[type, ...]]) -> tuple[dict[str, Any],
                                                                            tuple[str, ...]]:
    """``data``'s known keys whose values have their declared types (``None`` always
    allowed; ``bool`` only where declared), and the names of those that did not."""
    good: dict[str, Any] = {}
    bad: list[str] = []
    for key, allowed in types.items():
        value = data.get(key)
        if value is None:
            continue
        if isinstance(value, bool) and bool not in allowed or not isinstance(value, allowed):
            bad.append(key)
        else:
            good[key] = value
    return good, tuple(bad)
