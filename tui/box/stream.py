"""What the watcher's follower streams besides the run's own files, mixed into
``tui.box.view.BoxView``: the run the box chose, the project's runs (the list, and the
alerts on any run's verdict), the guard's state for its badge, and the weight files'
identity and ``hub.json``, on whose change the weights badge is judged again. Nothing
here polls the box."""

from __future__ import annotations

from typing import Any

from remote.watch import ChosenEvent, GuardEvent, HubEvent, RunsEvent, WeightsEvent
from tui.widgets.runs import RunsList


class StreamEvents:
    """The follower's side messages for a box view (``self`` is the ``BoxView``)."""

    _weights: Any = None

    def on_stream_event(self, ev: Any) -> bool:
        """Handle one of these events; ``False`` for another kind."""
        if isinstance(ev, RunsEvent):
            self.show_runs(ev.runs)
        elif isinstance(ev, ChosenEvent):
            self.on_chosen(ev.run_dir)
        elif isinstance(ev, GuardEvent):
            self._show_guard(ev.state)
        elif isinstance(ev, WeightsEvent | HubEvent):
            self.on_weights_changed(ev)
        else:
            return False
        return True

    def on_chosen(self, run_dir: str | None) -> None:
        """The box chose the run to watch (or found none in the project)."""
        if run_dir is None:
            self.conn_badge.show_progress(
                f"connected; no runs in {self.project} yet (l: launch)")
            return
        self.run_dir = run_dir
        self.unseen.discard(run_dir)
        self.header.show_run(run_dir.rstrip("/").rsplit("/", 1)[-1])
        runs = self.query_one(RunsList)
        runs.show_runs(runs.runs, run_dir, self.unseen)

    def on_weights_changed(self, ev: WeightsEvent | HubEvent) -> None:
        """The run's weight files or its Hub ledger changed on the box: judge the
        weights again (the only time the badge asks the box)."""
        kind, value = ("weights", ev.files) if isinstance(ev, WeightsEvent) else \
            ("hub", ev.ledger)
        seen = self._weights or {}
        if kind not in seen or seen[kind] != value:
            self._weights = {**seen, kind: value}
            self.refresh_safety()
