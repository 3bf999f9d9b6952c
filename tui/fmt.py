"""Short, fixed-width renderings of durations, money and numbers for the panes."""

from __future__ import annotations

import math
import re

from rich.text import Text

from trainer.text import clean_text, format_duration


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


_AGE = re.compile(r"\b(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)? ago\b")


def advance_ages(text: str, seconds: float) -> str:
    """``written 2m07s ago`` as it reads ``seconds`` later (``format_duration`` ages
    followed by "ago"), so a reason computed once does not freeze on screen."""
    if seconds < 1:
        return text

    def later(match: re.Match[str]) -> str:
        d, h, m, s = (int(g) if g else 0 for g in match.groups())
        if not any(match.groups()):
            return match.group(0)
        return f"{format_duration(d * 86400 + h * 3600 + m * 60 + s + seconds)} ago"

    return _AGE.sub(later, text)
