"""A project's runs in one exec: ``trainer runs PROJECT --json`` judged on the box
(``trainer.watch.runs``), whatever the number of runs, and the follower's ``runs``
messages merged into the same list. Every field from the box is type-checked; a run
that does not parse is left out. Where the box cannot run the tool (no usable python),
the runs are read over SFTP instead (``remote.runs.read.list_runs``, a few round trips a run).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from remote.link.tools import ask_tool
from remote.runs.read import RunInfo, list_runs
from remote.transport.base import Transport, TransportError
from trainer.health import HEALTH_VERDICTS
from trainer.text import natural_key

if TYPE_CHECKING:
    from remote.link.connector import Connector

RUNS_TIMEOUT = 120.0
_STR, _INT, _NUM = (str,), (int,), (int, float)
#: ``RunInfo`` field -> the JSON types it accepts (``None`` always).
_FIELDS: dict[str, tuple[type, ...]] = {
    "state": _STR, "epoch": _INT, "total_epochs": _INT, "best_metric": _NUM,
    "best_metric_name": _STR, "updated_at": _STR,
}


def run_info(item: Any) -> tuple[float, RunInfo] | None:
    """``(updated, RunInfo)`` from one run object of the box, or ``None`` when it is not
    one (a bad field of the optional ones is read as unknown)."""
    if not isinstance(item, dict):
        return None
    name, run_dir, health = item.get("name"), item.get("run_dir"), item.get("health")
    if not isinstance(name, str) or not name or not isinstance(run_dir, str):
        return None
    values = {}
    for key, types in _FIELDS.items():
        value = item.get(key)
        ok = isinstance(value, types) and not isinstance(value, bool)
        values[key] = value if ok else None
    updated = item.get("updated")
    updated = float(updated) if isinstance(updated, int | float) and \
        not isinstance(updated, bool) else 0.0
    reason = item.get("reason")
    return updated, RunInfo(
        name=name, run_dir=run_dir,
        health=health if health in HEALTH_VERDICTS else "unreadable",
        reason=reason if isinstance(reason, str) else "", **values)


def _ordered(entries: dict[str, tuple[float, RunInfo]]) -> list[RunInfo]:
    """Newest first; runs updated in the same second by name, numbers by value (exp10
    before exp9, not exp1 before exp10 before exp2 as text)."""
    return [info for _, info in sorted(entries.values(),
                                       key=lambda e: (e[0], natural_key(e[1].name)),
                                       reverse=True)]


class RunsBook:
    """The runs the follower told about: its first ``runs`` message is the whole list,
    later ones what changed (``runs``) and what went away (``gone``)."""

    def __init__(self) -> None:
        self.entries: dict[str, tuple[float, RunInfo]] = {}

    def apply(self, message: dict[str, Any]) -> list[RunInfo] | None:
        """Merge one message; the list, newest first (``None`` for a malformed one)."""
        items, gone = message.get("runs"), message.get("gone") or []
        if not isinstance(items, list) or not isinstance(gone, list):
            return None
        if message.get("full") is True:
            self.entries = {}
        for name in gone:
            if isinstance(name, str):
                self.entries.pop(name, None)
        for item in items:
            parsed = run_info(item)
            if parsed is not None:
                self.entries[parsed[1].name] = parsed
        return _ordered(self.entries)


def runs_in(report: dict[str, Any] | None) -> list[RunInfo] | None:
    """The runs of a ``gpurent.runs/1`` report (``None`` when it is not one)."""
    if report is None or not isinstance(report.get("runs"), list):
        return None
    book = RunsBook()
    return book.apply({"full": True, "runs": report["runs"]})


def box_runs(transport: Transport, project: str,
             connector: Connector | None = None) -> list[RunInfo]:
    """The runs under ``project``, newest first, in one exec of ``trainer runs`` (through
    ``connector``'s gate when given: a box without the trainer gets it on the way). Falls
    back to reading the files over SFTP when the tool cannot run there."""
    try:
        answer = ask_tool(transport, ["runs", project, "--json"], connector=connector,
                          timeout=RUNS_TIMEOUT)
    except (TransportError, ValueError):
        answer = None
    runs = runs_in(answer.report) if answer is not None and answer.ok else None
    return runs if runs is not None else list_runs(transport, project)
