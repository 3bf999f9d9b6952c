"""The follower's messages besides the run's own files: the project's runs (merged from
the follower's changes), the run the box chose, the guard's state, the weight files'
identity, ``hub.json``, GPU samples and the host's load (``RunContext``, a part of
``remote.watch.watcher.Watcher``). Each malformed field is dropped, never trusted (text
from the box is cleaned where it is shown)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeGuard

from remote.fields import num
from remote.runs.guard import GuardState
from remote.runs.listing import RunsBook
from remote.watch.events import (
    ChosenEvent,
    GpuEvent,
    GpuSample,
    GuardEvent,
    HostEvent,
    HubEvent,
    RunsEvent,
    WatchEvent,
    WeightFile,
    WeightsEvent,
)
from trainer.text import clean_text


class RunContext:
    """The watched run (``run_dir``: ``None`` until the box chooses one), its project and
    the handlers of ``runs``, ``guard``, ``hub``, ``weights``, ``gpu`` and ``host``
    messages; ``emit`` gets each event."""

    def __init__(self, run_dir: str | None, project: str | None,
                 emit: Callable[[WatchEvent], None]) -> None:
        self.run_dir = run_dir
        self.project = project
        self._emit = emit
        self.runs_book = RunsBook()
        self._chosen_told = False

    def handlers(self) -> dict[str, Callable[[dict[str, Any]], None]]:
        """Message type -> handler."""
        return {"runs": self._on_runs, "guard": self._on_guard, "hub": self._on_hub,
                "weights": self._on_weights, "gpu": self._on_gpu, "host": self._on_host}

    def chose(self, run: Any) -> None:
        """The ``hello``'s run: adopted (and told once) when the box chose it."""
        if self.run_dir is None and isinstance(run, str) and run:
            self.run_dir = run
            self._chosen_told = False
        if not self._chosen_told and self.project and (self.run_dir or run is None):
            self._chosen_told = True
            self._emit(ChosenEvent(self.run_dir))

    def _on_runs(self, message: dict[str, Any]) -> None:
        runs = self.runs_book.apply(message)
        if runs is not None:
            self._emit(RunsEvent(str(self.project or message.get("project") or ""), runs))

    def _on_guard(self, message: dict[str, Any]) -> None:
        data, ack = message.get("guard"), message.get("ack")
        state = None
        if isinstance(data, dict):
            state = GuardState.from_dict(data, message.get("alive") is True,
                                         ack if isinstance(ack, dict) else None)
        self._emit(GuardEvent(state))

    def _on_hub(self, message: dict[str, Any]) -> None:
        error = message.get("error")
        self._emit(HubEvent(message.get("hub"),
                            clean_text(error) if isinstance(error, str) else ""))

    def _on_weights(self, message: dict[str, Any]) -> None:
        files = []
        for item in message.get("files") or ():
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                continue
            size, mtime_ns, ino = (item.get(k) for k in ("size", "mtime_ns", "ino"))
            if _count(size) and _count(mtime_ns) and _count(ino):
                files.append(WeightFile(item["name"], size, mtime_ns, ino))
        self._emit(WeightsEvent(tuple(files)))

    def _on_gpu(self, message: dict[str, Any]) -> None:
        rows = message.get("gpus")
        if not isinstance(rows, list):
            return  # an error report: nvidia-smi failed; nothing to show
        gpus = []
        for r in rows:
            if not _count(r[0]):
                raise ValueError(f"{r[0]!r} is not a GPU index")
            gpus.append(GpuSample(r[0], clean_text(str(r[1])), *(num(v) for v in r[2:7])))
        self._emit(GpuEvent(gpus, time.time()))

    def _on_host(self, message: dict[str, Any]) -> None:
        cpus = message.get("cpus")
        self._emit(HostEvent(num(message.get("cpu")),
                             cpus if isinstance(cpus, int) and not isinstance(cpus, bool)
                             else None,
                             num(message.get("mem_used_mib")),
                             num(message.get("mem_total_mib")), time.time()))


def _count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0

