"""What the glance page is sent, and nothing else: every value that came from a box or a
provider is bounded here before it reaches a response.

Rows are built from allow-lists (a provider's raw record, an SSH address or a key never
gets in by accident); text is one line, control characters stripped and cut
(``MAX_TEXT``); numbers are finite or ``None``; nested values go one level deep; a run's
history keeps its last ``MAX_ROWS`` rows and ``MAX_COLUMNS`` columns, its log the last
``MAX_LOG_BYTES``. ``redact`` replaces the laptop's secrets wherever they would appear
(an error message that quotes a URL with a key in it). The page puts all of it in the
document as text (``textContent``), never as markup.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable, Mapping
from typing import Any

from remote.fields import num
from remote.fleet.fleet import FleetRow
from trainer.text import clean_text, format_duration, money, one_line, rate

#: Characters of one text value (a name, a reason, a status field).
MAX_TEXT = 300
#: Characters of a key (a status field's or a metric's name).
MAX_KEY = 80
#: Keys of a status object and of a nested object kept.
MAX_KEYS = 80
#: Rows of a run's metric history sent (its last ones) and columns (first seen first).
MAX_ROWS = 1000
MAX_COLUMNS = 48
#: Bytes of the end of ``metrics.jsonl`` read from a box (a row is a few hundred bytes).
MAX_METRICS_BYTES = 1 << 20
#: Bytes of the end of ``train.log`` kept per run, and sent by default.
MAX_LOG_BYTES = 64 * 1024
LOG_BYTES = 16 * 1024
#: What stands where a secret was.
REDACTED = "[redacted]"


def run_id(target: str, run_dir: str) -> str:
    """The run's id in URLs: opaque, the same every pass (16 hex digits)."""
    return hashlib.sha256(f"{target}\0{run_dir}".encode()).hexdigest()[:16]


def text(value: Any, limit: int = MAX_TEXT) -> str | None:
    """``value`` as one line of plain text (``None`` stays ``None``)."""
    return None if value is None else one_line(value, limit)


def number(value: Any) -> float | int | None:
    """A finite number (``remote.fields.num``) that a browser reads exactly (an integer
    within 2**53, kept an integer), else ``None``."""
    if num(value) is None or isinstance(value, int) and abs(value) >= 1 << 53:
        return None
    return value


def scalar(value: Any) -> str | float | int | bool | None:
    """A JSON scalar from a box: text bounded, numbers finite, anything else dropped."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return number(value)
    if isinstance(value, str):
        return text(value)
    return None


def flat_object(data: Mapping[str, Any], depth: int = 1) -> dict[str, Any]:
    """A box's JSON object, bounded: ``MAX_KEYS`` keys, their names cleaned; scalars as
    ``scalar``; objects ``depth`` levels down; lists of scalars (20 items); the rest
    dropped."""
    out: dict[str, Any] = {}
    for key, value in list(data.items())[:MAX_KEYS]:
        name = clean_text(str(key))[:MAX_KEY]
        if isinstance(value, Mapping):
            if depth > 0:
                out[name] = flat_object(value, depth - 1)
        elif isinstance(value, list):
            out[name] = [scalar(v) for v in value[:20] if not isinstance(v, dict | list)]
        else:
            out[name] = scalar(value)
    return out


def metrics_table(rows: list[dict[str, Any]], skipped: int = 0) -> dict[str, Any]:
    """``{"columns", "rows"}`` as ``libreyolo monitor`` sends a history: its last
    ``MAX_ROWS`` rows, the first ``MAX_COLUMNS`` column names seen, values as
    ``scalar``; ``truncated`` when rows were left out."""
    kept = rows[-MAX_ROWS:]
    columns: list[str] = []
    names: dict[str, str] = {}
    for row in kept:
        for key in row:
            if key not in names and len(columns) < MAX_COLUMNS:
                names[key] = clean_text(str(key))[:MAX_KEY]
                columns.append(names[key])
    table = [{names[k]: scalar(v) for k, v in row.items()
              if k in names and not isinstance(v, dict | list)} for row in kept]
    return {"columns": columns, "rows": table, "skipped": skipped,
            "truncated": len(rows) > len(kept)}


def log_text(data: bytes, nbytes: int = LOG_BYTES) -> tuple[str, bool]:
    """The last ``nbytes`` of a log tail as text from a line start, escape sequences and
    control characters stripped (newlines and tabs kept); and whether it was cut."""
    cut = len(data) > nbytes
    if cut:
        data = data[-nbytes:]
        start = data.find(b"\n") + 1
        data = data[start:] if 0 < start < len(data) else data
    return clean_text(data, keep_newlines=True), cut


def hhmm(when: float) -> str:
    """``14:02``: a moment on this laptop's clock, in its time zone."""
    return time.strftime("%H:%M", time.localtime(when))


def ago(seconds: float | None) -> str:
    """``12s ago``, ``3m05s ago``; ``-`` when unknown."""
    return "-" if seconds is None else f"{format_duration(max(0.0, seconds))} ago"


def instance_row(row: FleetRow, now: float) -> dict[str, Any]:
    """One instance (or a failed account) for ``/api/instances``: what it is, what it
    bills, idle, weights verdict, lease, and the fleet's own words. No address, no raw
    provider record."""
    inst = row.instance
    box = row.box
    said = [text(w) for w in row.words(now)]
    out: dict[str, Any] = {
        "account": text(row.account), "provider": text(row.provider),
        "target": text(row.target), "error": text(row.error) or None,
        "state": None, "gpu": None, "billing": None, "billing_per_hour": None,
        "price_per_hour": None, "spent_usd": number(row.spent(now)),
        "idle": None if row.idle is None else text(row.idle.words()),
        "weights": None if row.weights is None else {
            "state": text(row.weights.state), "safe": row.weights.safe,
            "words": text(row.weights.words())},
        "lease": None if row.lease is None else text(row.lease.left_words(now)),
        "reached": box is not None, "unreachable": text(row.unreachable) or None,
        "runs": None if box is None else len(box.runs),
        "live_runs": None if box is None else len(box.live_runs),
        "words": said,
    }
    if inst is not None:
        bills = inst.billing_per_hour
        out.update(state=text(inst.state), raw_state=text(inst.raw_state) or None,
                   gpu=text(inst.gpu) or None, billing=row.full_price,
                   billing_per_hour=number(bills), price_per_hour=number(inst.price_per_hour),
                   bill_words=("billing " if row.full_price else "not billing GPUs, ")
                   + rate(bills), uptime=format_duration(row.uptime(now))
                   if row.uptime(now) is not None else None)
        spent = row.spent(now)
        if spent is not None:
            out["spent_words"] = f"{money(spent)} since start"
    return out


def run_words(run: Mapping[str, Any]) -> dict[str, str]:
    """Short phrases for a run's card, from its ``/api/runs`` entry."""
    words: dict[str, str] = {}
    epoch, total = run.get("epoch"), run.get("total_epochs")
    if total:
        pct = run.get("progress")
        words["epoch"] = f"epoch {epoch or 0}/{total}" + (
            f" ({100 * pct:.0f}%)" if isinstance(pct, int | float) else "")
    if run.get("state") == "running" and run.get("eta_seconds") is not None:
        words["eta"] = f"ETA {format_duration(run['eta_seconds'])}"
    name, value = run.get("metric_name"), run.get("metric")
    best, best_name, best_epoch = (run.get("best_metric"), run.get("best_metric_name"),
                                   run.get("best_epoch"))
    at = f" at epoch {best_epoch}" if best_epoch else ""
    if value is not None:
        words["metric"] = f"{name or 'metric'} {value:.4g}"
        if best == value and best_name == name:
            words["metric"] += f" (best{at})"
    if best is not None and not (best == value and best_name == name):
        words["best"] = f"best {best_name or 'metric'} {best:.4g}{at}"
    cost, projected = run.get("cost_usd"), run.get("projected_usd")
    if cost is not None:
        words["cost"] = f"{money(cost)} so far" + (
            f", {money(projected)} projected" if projected is not None
            and run.get("state") == "running" else "")
    elif run.get("target") and run.get("price_per_hour") is None and \
            run.get("elapsed_seconds") is not None:
        words["cost"] = "cost unknown (no price)"
    return words


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """``value`` with every occurrence of each secret (8 characters or more) replaced
    by ``REDACTED``, in every string and key."""
    hidden = sorted({s for s in secrets if s and len(s) >= 8}, key=len, reverse=True)
    if not hidden:
        return value

    def scrub(item: Any) -> Any:
        if isinstance(item, str):
            for secret in hidden:
                if secret in item:
                    item = item.replace(secret, REDACTED)
            return item
        if isinstance(item, Mapping):
            return {scrub(k): scrub(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [scrub(v) for v in item]
        return item

    return scrub(value)
