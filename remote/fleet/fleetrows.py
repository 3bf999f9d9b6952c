"""The fleet's rows as a screen or a script sees them: each row's identity through
listings, its state in words, its notes, the sort orders and the filter, and what the
stop key would do with a row. ``gpurent instances`` and the TUI's fleet screen
(``tui.screens.fleet``, which only draws these and asks) share them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trainer.text import clock_time, money

#: States in which a stop has nothing to do.
NOT_RUNNING = ("stopped", "stopping", "destroyed", "destroying")


def row_key(row: Any) -> str:
    """The row's identity through refreshes: its instance (``vast:4242``), or its
    account for an account's failure."""
    return row.target if row.instance is not None else f"account {row.account}"


def provider_state(inst: Any) -> str:
    """The instance's state in our words, the provider's own beside them when they
    differ: ``stopped (exited)``."""
    return inst.state if inst.raw_state in ("", inst.state) else \
        f"{inst.state} ({inst.raw_state})"


def state_words(row: Any) -> str:
    """The row's state (:func:`provider_state`), ``taken away:`` first when its
    provider took it away under a run."""
    state = provider_state(row.instance)
    return f"taken away: {state}" if row.interrupted is not None else state


def notes(row: Any, now: float) -> list[str]:
    """The row's words about money and waste, less the weights verdict (its own
    column)."""
    verdict = row.weights
    return [w for w in row.words(now) if verdict is None or w != verdict.words()]


def _money_key(row: Any) -> float:
    inst = row.instance
    return -(inst.billing_per_hour or 0.0) if inst is not None else 1.0


def _spent_key(now: float) -> Callable[[Any], float]:
    def key(row: Any) -> float:
        spent = row.spent(row.seen(now)) if row.instance is not None else None
        return -(spent or 0.0)
    return key


def _idle_key(row: Any) -> float:
    return -(row.idle.seconds if row.idle is not None else -1.0)


#: The sort orders, in the order a screen cycles through them: a name, and the key of a
#: row at ``now``.
SORTS: tuple[tuple[str, Callable[[float], Callable[[Any], Any]]], ...] = (
    ("as listed", lambda now: lambda row: 0),
    ("$/h now", lambda now: _money_key),
    ("spent", _spent_key),
    ("idle", lambda now: _idle_key),
    ("instance", lambda now: row_key),
    ("account", lambda now: lambda row: (row.account, row_key(row))),
)


def haystack(row: Any, now: float) -> str:
    """What the filter looks in: the row's whole id, account, GPU, state and notes."""
    if row.instance is None:
        return f"{row.account} account failed {row.error}".lower()
    return " ".join([row.target, row.account, row.instance.gpu or "", state_words(row),
                     *notes(row, now)]).lower()


def shown(rows: list[Any], now: float, sort: int, query: str) -> list[Any]:
    """The rows to show: those whose words hold ``query`` (any case), in sort order
    ``sort`` (an index of ``SORTS``; a stable sort, so ties keep the listing's
    order)."""
    needle = query.strip().lower()
    picked = [row for row in rows if not needle or needle in haystack(row, now)]
    return sorted(picked, key=SORTS[sort % len(SORTS)][1](now))


def nothing_to_stop(row: Any, destroy_hint: str = "") -> str:
    """Why a stop of ``row``'s instance has nothing to do (``""``: it has, ask):
    already stopped (as of when, for a row kept from an earlier listing), with what its
    disk bills a day then, ``destroy_hint`` after it."""
    inst = row.instance
    if inst.state not in NOT_RUNNING:
        return ""
    as_of = "" if row.stale is None else f" as of {clock_time(row.stale, True)}"
    day = row.disk_per_day()
    bills = "" if inst.state != "stopped" or day is None else \
        f"; its disk bills {money(day)}/day{destroy_hint}"
    return f"{row.target} is already {inst.state}{as_of}: nothing to stop{bills}"
