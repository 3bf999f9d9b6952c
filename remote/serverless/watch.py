"""A Modal app as the laptop sees it: Modal's own state of the app (running, stopped,
timed out), its money, and its run's files through the runs Volume.

"Timed out" is judged from Modal's timestamps: an app stopped when its run had been
going for its whole timeout was ended by that timeout. Money is the GPU's list price
times the time the app ran (Modal bills a function per second while its container
runs), with at most the price times what is left before the timeout still to come.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from remote.serverless.appfile import RUNS_VOLUME
from remote.serverless.bill import BILLS
from remote.serverless.client import AppRow, find_app, list_apps
from remote.serverless.record import ModalRecord, modal_records, record_for
from remote.transport.base import NeedsSetup
from remote.transport.volume import VolumeTransport
from trainer.text import format_duration

#: How long Modal's answer about an app's state is reused (``modal app list`` is a
#: process start and one RPC).
STATE_TTL = 5.0
#: An app stopped within this many seconds of its timeout was ended by it.
TIMEOUT_SLACK = 5.0


class UnknownApp(NeedsSetup):
    """``modal:APP`` names no app launched from this laptop."""


def limit_words(seconds: float) -> str:
    """A timeout as a person gave it: ``4h``, ``90m``, else hours and minutes."""
    whole = int(seconds)
    if whole and whole % 3600 == 0:
        return f"{whole // 3600}h"
    if whole and whole % 60 == 0 and whole < 3600:
        return f"{whole // 60}m"
    return format_duration(seconds)


def need_record(app: str) -> ModalRecord:
    """App ``app``'s record; ``UnknownApp`` (one line) when it was not launched here."""
    record = record_for(app)
    if record is None:
        raise UnknownApp(f"modal:{app} was not launched from this laptop (gpurent launch "
                         f"modal:{app} ... records its app id)")
    return record


@dataclass(frozen=True)
class AppView:
    """Record ``record`` with Modal's ``row`` for it (``None``: Modal lists no such app)
    at ``now``."""

    record: ModalRecord
    row: AppRow | None
    now: float

    @property
    def running(self) -> bool | None:
        """Whether Modal runs the app (``None``: Modal does not list it)."""
        return None if self.row is None else self.row.running

    @property
    def ran_seconds(self) -> float:
        """How long the app ran (so far), on Modal's clock when it says."""
        row = self.row
        start = row.created_at if row is not None and row.created_at else \
            self.record.launched_at
        if row is not None and not row.running and row.stopped_at:
            return max(0.0, row.stopped_at - start)
        return max(0.0, self.now - start)

    @property
    def timed_out(self) -> bool:
        """Whether Modal ended the app at its timeout."""
        return self.running is False and \
            self.ran_seconds >= self.record.timeout - TIMEOUT_SLACK

    @property
    def timeout_left(self) -> float | None:
        """Seconds before Modal ends a running app (``None`` once stopped)."""
        if not self.running:
            return None
        return max(0.0, self.record.timeout - self.ran_seconds)

    @property
    def spent(self) -> float:
        """Dollars so far: the GPU's price times the time the app ran."""
        return self.record.price_per_hour * self.ran_seconds / 3600

    @property
    def most_more(self) -> float:
        """At most this many dollars more before the timeout (0 once stopped)."""
        left = self.timeout_left
        return 0.0 if left is None else self.record.price_per_hour * left / 3600

    @property
    def state_words(self) -> str:
        """Modal's state of the app in words: running with its timeout, timed out at it,
        stopped, or not listed."""
        limit = limit_words(self.record.timeout)
        if self.row is None:
            return "not listed by Modal (deleted, or another account or environment)"
        if self.running:
            return (f"running on Modal ({self.row.state}), its timeout of {limit} in "
                    f"{format_duration(self.timeout_left or 0)}")
        if self.timed_out:
            return f"timed out at {limit}"
        return f"stopped after {format_duration(self.ran_seconds)} ({self.row.state})"

    @property
    def money_words(self) -> str:
        """The money line: spent so far, and at most how much more before the timeout."""
        rate = f"${self.record.price_per_hour:.2f}/h {self.record.gpu or 'CPU'}"
        if self.running:
            return (f"${self.spent:.2f} so far at {rate}; at most ${self.most_more:.2f} "
                    f"more before its timeout")
        return f"${self.spent:.2f} at {rate}; nothing more (the app is stopped)"


def app_view(record: ModalRecord, now: float | None = None) -> AppView:
    """Ask Modal about ``record``'s app now."""
    return AppView(record, find_app(record.app_id), time.time() if now is None else now)


class AppState:
    """Modal's state of one app, asked at most every ``STATE_TTL`` seconds (from any
    thread): what a Volume transport's ``pid_alive`` answers."""

    def __init__(self, record: ModalRecord) -> None:
        self.record = record
        self._lock = threading.Lock()
        self._asked = 0.0
        self._view: AppView | None = None
        self._asking = False

    def follow(self, record: ModalRecord) -> None:
        """From now on the state is that of ``record``'s app (the app was launched
        again): what was asked of the previous one is forgotten."""
        with self._lock:
            self.record, self._view, self._asked = record, None, 0.0

    def view(self) -> AppView:
        """The app's view, fresh within ``STATE_TTL``."""
        with self._lock:
            if self._view is not None and time.monotonic() - self._asked < STATE_TTL:
                return self._view
        view = app_view(self.record)  # not under the lock: the UI's `last` never waits
        with self._lock:
            self._view, self._asked = view, time.monotonic()
        return view

    def last(self, now: float | None = None) -> AppView | None:
        """The last view asked (never blocks: for the UI's clock), moved on to ``now``;
        ``None`` before the first. One older than ``STATE_TTL`` is asked again in the
        background, so that a word does not outlive its truth by more than that."""
        with self._lock:
            view = self._view
            stale = view is None or time.monotonic() - self._asked >= STATE_TTL
            if stale and not self._asking:
                self._asking = True
                threading.Thread(target=self._refresh, daemon=True,
                                 name=f"modal state {self.record.app}").start()
        if view is None:
            return None
        return AppView(view.record, view.row, time.time() if now is None else now)

    def _refresh(self) -> None:
        try:
            self.view()
        except Exception:  # noqa: BLE001 (the next look asks again; the line says "asking")
            pass
        finally:
            with self._lock:
                self._asking = False

    def alive(self) -> bool | None:
        """Whether the app still runs (``None``: Modal does not list it)."""
        return self.view().running


def volume_transport(record: ModalRecord, state: AppState | None = None) -> VolumeTransport:
    """The runs Volume as a transport, its ``pid_alive`` answered by the app's state."""
    state = state or AppState(record)
    return VolumeTransport(RUNS_VOLUME, label=record.target, alive=state.alive)


def fleet_rows(now: float | None = None) -> list[dict[str, Any]]:
    """The running Modal apps launched from here, with their timeout left and dollars
    (ours, and Modal's own bill through its last whole hour)."""
    records = [r for r in modal_records().values() if r.want == "running"]
    if not records:
        return []
    listed = {a.app_id: a for a in list_apps()}
    now = time.time() if now is None else now
    views = [v for r in records if (v := AppView(r, listed.get(r.app_id), now)).running]
    bill = BILLS.get(min(v.record.launched_at for v in views)) if views else None
    rows = []
    for view in views:
        record = view.record
        rows.append({"target": record.target, "app_id": record.app_id, "run": record.run,
                     "gpu": record.gpu, "timeout_left": view.timeout_left,
                     "dollars": round(view.spent, 4), "most_more": round(view.most_more, 4),
                     "words": view.state_words, "money": view.money_words,
                     "bill": bill.words(record.run, record.launched_at) if bill else ""})
    return rows
