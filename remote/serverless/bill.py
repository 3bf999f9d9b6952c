"""Modal's own bill for the runs gpurent launched: ``modal billing report`` by the
``gpurent_run`` tag (every app gpurent generates carries it), hourly.

Modal reports whole intervals only ("partial end intervals will be excluded"), so the bill
is known through the last full hour (UTC): a run that started within this hour has no bill
yet, and the words say so rather than "$0.00". The report is for Team and Enterprise plans
(Modal's changelog, 1.3.3); another account gets an error, shown as the reason the bill is
not available, never as a zero. One report is asked at most every ``CACHE_SECONDS`` (a
process start and one RPC); the TUI asks in the background and never waits.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from remote.serverless.appfile import RUN_TAG
from remote.serverless.client import run_modal
from remote.transport.base import TransportError

#: How long a billing report is reused before Modal is asked again.
CACHE_SECONDS = 300.0
#: How long one ``modal billing report`` may take.
REPORT_TIMEOUT = 60.0
HOUR = 3600


@dataclass(frozen=True)
class ModalBill:
    """One billing report: dollars per ``gpurent_run`` tag (``spent``), known through
    ``through`` (epoch seconds: the end of the last whole hour reported), or why the
    account has none (``refused``)."""

    spent: dict[str, Decimal] = field(default_factory=dict)
    through: float | None = None
    refused: str = ""

    def dollars(self, run: str) -> Decimal | None:
        """The run's dollars as Modal billed them (``None``: no report)."""
        return None if self.refused else self.spent.get(run, Decimal(0))

    def words(self, run: str, launched_at: float) -> str:
        """The bill of ``run`` (launched at ``launched_at``) in words."""
        if self.refused or self.through is None:
            return f"Modal's bill: not available ({self.refused or 'not asked yet'})"
        through = _hour(self.through)
        if launched_at >= self.through:
            first = _hour(_floor(launched_at) + HOUR)
            return f"Modal's bill: none yet (whole hours only; the first ends {first})"
        return f"Modal's bill: ${self.spent.get(run, Decimal(0)):.2f} through {through} " \
               f"(whole hours)"


def fetch_bill(since: float, now: float | None = None) -> ModalBill:
    """Ask Modal now for the hourly report from the hour of ``since`` on."""
    now = time.time() if now is None else now
    start = datetime.fromtimestamp(_floor(since), UTC).strftime("%Y-%m-%dT%H:%M:%S")
    try:
        out = run_modal("billing", "report", "--start", start, "--resolution", "h",
                        "--tag-names", RUN_TAG, "--json", timeout=REPORT_TIMEOUT)
        rows = json.loads(out or "[]")
    except TransportError as exc:  # ModalError: Modal's last line; or the client is missing
        return ModalBill(refused=str(exc) or "Modal refused the billing report")
    except json.JSONDecodeError:
        return ModalBill(refused="Modal's billing report was not JSON")
    spent: dict[str, Decimal] = {}
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        try:
            tags = json.loads(str(row.get("tags") or "{}"))
            cost = Decimal(str(row.get("cost", "0")))
        except (json.JSONDecodeError, InvalidOperation):
            continue
        run = tags.get(RUN_TAG) if isinstance(tags, dict) else None
        if isinstance(run, str) and cost.is_finite():
            spent[run] = spent.get(run, Decimal(0)) + cost
    return ModalBill(spent, _floor(now))


class BillCache:
    """Reports reused for ``CACHE_SECONDS``, keyed by the hour they start at; ``get``
    waits for Modal, ``last`` never does (it asks in the background)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bills: dict[float, tuple[float, ModalBill]] = {}
        self._asking: set[float] = set()

    def get(self, since: float) -> ModalBill:
        """The report from ``since``'s hour, fresh within ``CACHE_SECONDS``."""
        key = _floor(since)
        with self._lock:
            kept = self._bills.get(key)
        if kept is not None and time.monotonic() - kept[0] < CACHE_SECONDS:
            return kept[1]
        bill = fetch_bill(key)
        with self._lock:
            self._bills[key] = (time.monotonic(), bill)
        return bill

    def last(self, since: float) -> ModalBill | None:
        """The last report from ``since``'s hour (``None`` before the first); a stale one
        is asked again in the background."""
        key = _floor(since)
        with self._lock:
            kept = self._bills.get(key)
            stale = kept is None or time.monotonic() - kept[0] >= CACHE_SECONDS
            if stale and key not in self._asking:
                self._asking.add(key)
                threading.Thread(target=self._refresh, args=(key,), daemon=True,
                                 name="modal bill").start()
        return None if kept is None else kept[1]

    def _refresh(self, key: float) -> None:
        try:
            self.get(key)
        finally:
            with self._lock:
                self._asking.discard(key)


#: The process's reports (the CLI asks once per command, the TUI every few minutes).
BILLS = BillCache()


def _floor(moment: float) -> float:
    return moment - moment % HOUR


def _hour(moment: float) -> str:
    return datetime.fromtimestamp(moment, UTC).strftime("%H:00 UTC")
