"""Short, fixed-width renderings of durations, money and numbers for the panes."""

from __future__ import annotations

import math

from rich.text import Text

from remote.text import clean_text


def duration(seconds: float | None) -> str:
    """``42s``, ``12m05s``, ``3h07m`` or ``2d04h``; ``-`` when unknown."""
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return "-"
    s = int(round(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def money(usd: float | None) -> str:
    """``$0.42`` or ``$1,234``; ``$?`` when unknown."""
    if usd is None or not math.isfinite(usd):
        return "$?"
    if abs(usd) >= 1000:
        return f"${usd:,.0f}"
    return f"${usd:.2f}" if abs(usd) >= 0.1 or usd == 0 else f"${usd:.4f}"


def number(value: float | None, digits: int = 4) -> str:
    """A float in ``digits`` significant digits, ``-`` when missing or not finite."""
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return "-"
    if not math.isfinite(value):
        return "-"
    return f"{value:.{digits}g}"


def safe(text: object, limit: int = 200, style: str = "") -> Text:
    """Untrusted text as an inert ``Text``: controls stripped, no markup, cut to ``limit``."""
    cleaned = clean_text(str(text))
    if len(cleaned) > limit:
        cleaned = cleaned[: limit - 1] + "…"
    return Text(cleaned, style=style)


BLOCKS = "▁▂▃▄▅▆▇█"


def spark(values: list[float], lo: float = 0.0, hi: float = 100.0) -> str:
    """A one-line sparkline of ``values`` scaled between ``lo`` and ``hi``."""
    span = hi - lo if hi > lo else 1.0
    out = []
    for v in values:
        frac = min(1.0, max(0.0, (v - lo) / span))
        out.append(BLOCKS[min(len(BLOCKS) - 1, int(frac * len(BLOCKS)))])
    return "".join(out)
