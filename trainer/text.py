"""Text for people, one way on the box and on the laptop: untrusted text (log lines,
names, errors from a box or an API) made safe to show, errors on one line, durations,
money. Standard library only."""

from __future__ import annotations

import math
import re

# CSI / OSC / other ESC sequences (7- and 8-bit), then any remaining control character
# except tab. OSC ends with BEL or ST; an unterminated one is dropped to the end.
_ESCAPES = re.compile(
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\|$)"  # OSC ... BEL / ST
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\|$)"  # DCS, PM, APC, SOS ... ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]"  # CSI
    r"|\x1b[ -/]*[0-~]"  # two-byte and nF ESC sequences (ESC c, ESC ( 0, ESC 7 ...)
    r"|\x9b[0-?]*[ -/]*[@-~]"  # 8-bit CSI
    r"|[\x90\x98\x9d-\x9f][^\x07\x9c\x1b]*(?:\x07|\x9c|\x1b\\|$)"  # 8-bit DCS/SOS/OSC/PM/APC
)
#: Characters that are invisible or reorder what is shown: bidi embeddings, overrides and
#: isolates (a file name that reads backwards), zero-width characters, line and paragraph
#: separators, invisible operators, interlinear annotations and Unicode tags.
INVISIBLE = ("\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"
             "\ufeff\ufff9-\ufffb\U000e0000-\U000e007f")
_CONTROLS = re.compile(f"[\x00-\x08\x0a-\x1f\x7f-\x9f{INVISIBLE}]")
# Every escape sequence starts with a control character, so text without one other than
# newline is already clean: one fast scan instead of the substitutions (log floods).
_CONTROLS_BUT_NEWLINE = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{INVISIBLE}]")


def clean_text(text: str | bytes, *, keep_newlines: bool = False) -> str:
    """Strip terminal escape sequences, C0 and C1 control characters, bidi controls and
    zero-width characters (``INVISIBLE``); decode bytes leniently.

    Invalid UTF-8 becomes U+FFFD. Tabs are kept; newlines are kept only when asked."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    if not _CONTROLS_BUT_NEWLINE.search(text):
        return text if keep_newlines else text.replace("\n", "")
    text = _ESCAPES.sub("", text)
    if keep_newlines:
        return "\n".join(_CONTROLS.sub("", part) for part in text.split("\n"))
    return _CONTROLS.sub("", text)


#: Characters of an error kept whole where a program reads it (``--json``): a changed host
#: key's message, both fingerprints and the known_hosts path, is about 300; words for
#: people may cut it shorter.
WHOLE_ERROR = 1000


def one_line(value: object, limit: int = 300) -> str:
    """Text or an exception as one line for a person: whitespace runs collapsed, escape
    sequences and control characters removed, cut to ``limit`` (ending in "…"). An
    exception without a message gives its type's name."""
    flat = clean_text(" ".join(str(value).split())).strip()
    if not flat and isinstance(value, BaseException):
        flat = type(value).__name__
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def console_tail(data: bytes | str, lines: int = 20) -> str:
    """The last ``lines`` non-empty lines of console output, cleaned for people."""
    kept = [ln.rstrip() for ln in clean_text(data, keep_newlines=True).splitlines()]
    return "\n".join([ln for ln in kept if ln.strip()][-lines:])


def format_duration(seconds: float | None) -> str:
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


def money(usd: float | None, digits: int | None = None) -> str:
    """``$0.42``, ``$0.0083`` (under ten cents), ``$1,234``; exactly ``digits`` decimals
    when given; ``$?`` when unknown. The one way money is written: CLI, TUI and the box's
    guard (its notifications) alike; the laptop reaches it as
    ``remote.billing.cost.money``."""
    if usd is None or not math.isfinite(usd):
        return "$?"
    if digits is not None:
        return f"${usd:,.{digits}f}"
    if abs(usd) >= 1000:
        return f"${usd:,.0f}"
    return f"${usd:.2f}" if abs(usd) >= 0.1 or usd == 0 else f"${usd:.4f}"


def rate(usd_per_hour: float | None) -> str:
    """A price per hour: ``$0.0694/h``, ``$?/h`` when unknown."""
    return f"{money(usd_per_hour, 4)}/h"


_DIGITS = re.compile(r"(\d+)")


def natural_key(name: str) -> tuple[tuple[int, int, str], ...]:
    """A sort key that orders the numbers inside names by value: ``exp2`` before
    ``exp10`` (as text ``exp10`` comes first)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part.lower())
                 for part in _DIGITS.split(name) if part)


def human_bytes(n: float | None) -> str:
    """``1536`` -> ``"1.5 KB"`` (decimal units, as disks are sold)."""
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


def clock_time(when: float, seconds: bool = False) -> str:
    """``14:47`` (``14:47:05`` with ``seconds``) on this machine's clock, local time: the
    time of day a person reads on the laptop (24-hour)."""
    import time

    return time.strftime("%H:%M:%S" if seconds else "%H:%M", time.localtime(when))
