"""Values from provider answers: numbers, times, lists and short texts, read the same
way by every client, whatever type the API sent. Standard library only."""

from __future__ import annotations

import datetime
import itertools
from typing import Any

from trainer.text import one_line


def number(value: Any) -> float | None:
    """A finite float from an API field (numbers or numeric strings), else ``None``."""
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if out == out and out not in (float("inf"), float("-inf")) else None


def integer(value: Any) -> int | None:
    """An int from an API field, else ``None``."""
    out = number(value)
    return None if out is None else int(out)


def epoch_of(value: Any) -> float | None:
    """Epoch seconds from an API field: a number, or an ISO-8601 time (``Z`` allowed)."""
    found = number(value)
    if found is not None:
        return found if found > 0 else None
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip().replace("Z", "+00:00").replace(" ", "T", 1)
    if "." in text:  # fromisoformat on 3.9 takes 3 or 6 fraction digits only
        head, _, rest = text.partition(".")
        digits = "".join(itertools.takewhile(str.isdigit, rest))
        text = f"{head}.{(digits + '000000')[:6]}{rest[len(digits):]}"
    try:
        when = datetime.datetime.fromisoformat(text)
    except ValueError:
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return when.timestamp()


def listed(payload: Any, *keys: str) -> list[dict[str, Any]]:
    """The objects of a list answer: ``payload`` itself when it is a list, else the list
    under the first of ``keys`` that holds one (non-objects dropped)."""
    found = payload
    if isinstance(payload, dict):
        found = next((payload[k] for k in keys if isinstance(payload.get(k), list)), None)
    if not isinstance(found, list):
        return []
    return [item for item in found if isinstance(item, dict)]


def text_or_none(value: Any) -> str | None:
    """A short clean string from an API field, else ``None``."""
    if value is None or value == "":
        return None
    return one_line(value, 120)
