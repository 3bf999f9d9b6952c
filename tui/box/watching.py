"""Watching one run of a box with ``remote.watch.Watcher``: which run (chosen by the user,
the box or a launch), its status in the header and its row, the project's runs in the
list, and alerts when any run of the box reaches a verdict worth one.

The watcher calls ``deliver`` on its own thread: log bytes go straight into the log
pane's feed (cut into clean lines there), every other event is posted to the view as a
``Watch`` message; the view routes it back here or to the part it belongs to."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote.link import Connector
from remote.runs import box_runs
from remote.transport import Transport
from remote.watch import (
    LOG_TAIL_BYTES,
    ChosenEvent,
    FollowOptions,
    GpuEvent,
    HostEvent,
    LogEvent,
    MetricsEvent,
    RunsEvent,
    StatusEvent,
    Watcher,
    WatchEvent,
)
from tui.box.hubpush import HubPushes
from tui.box.link import DemoStarted
from tui.box.parts import PartMessage, handles
from tui.box.ports import Panes, PauseWatching, Ports, RunsStale

#: Seconds the app waits, when it ends, for a watcher's thread to finish.
SHUTDOWN_JOIN = 2.0


@dataclass
class Watch(PartMessage, bubble=False, namespace="box"):
    """A watcher event for the watch of generation ``gen``."""

    gen: int
    event: WatchEvent


@dataclass
class RunsListed(PartMessage, bubble=False, namespace="box"):
    """A fresh list of the project's runs."""

    runs: list[Any]


class Watching:
    """The watched run of one box and its watcher. ``connect`` opens the watcher's
    connections and ``gate`` starts its follower;
    ``title_changed`` and ``health_changed(run, verdict, reason)`` tell the app;
    ``visible`` says whether the box's tab is the one shown."""

    def __init__(self, ports: Ports, panes: Panes, connect: Callable[[], Transport],
                 gate: Connector, title_changed: Callable[[], None],
                 health_changed: Callable[[str, str, str], object],
                 visible: Callable[[], bool]) -> None:
        self.ports = ports
        self.panes = panes
        self.connect = connect
        self.gate = gate
        self.title_changed = title_changed
        self.health_changed = health_changed
        self.visible = visible
        self.watcher: Watcher | None = None
        self.pushes = HubPushes(ports, panes)

    # ------------------------------------------------------------------ the watcher

    def watch(self, run_dir: str | None) -> None:
        """Watch ``run_dir`` from now on (stops watching the previous run); ``None``: the
        run the box chooses in the project (the newest going one, else the newest)."""
        self.stop()
        state, panes = self.ports.state, self.panes
        gen = state.watch(run_dir)
        panes.weights_badge.show_push(None)  # the previous run's pushes
        panes.header.show_run(state.run_name)
        panes.metrics.clear()
        panes.log.clear()
        panes.runs.show_runs(panes.runs.runs, run_dir, state.unseen)
        polls = getattr(self.gate, "poll_reason", "")  # a Modal app's Volume: no follower
        self.watcher = Watcher(
            self.connect, run_dir, lambda ev: self.deliver(gen, ev),
            project=state.project, gate=None if polls else self.gate,
            log_tail=LOG_TAIL_BYTES,
            poll_interval=2.0 if polls else FollowOptions.poll_interval)
        if polls:
            self.watcher.poll_files(polls)
        self.watcher.start()
        self.title_changed()

    def deliver(self, gen: int, event: WatchEvent) -> None:
        """An event of watch ``gen`` (on the watcher's thread, or any): log bytes into
        the log feed, the rest to the view; nothing of an earlier watch."""
        if gen != self.ports.state.gen:
            return
        if isinstance(event, LogEvent):
            self.panes.log.feed.feed(event)
        else:
            self.ports.post(Watch(gen, event))

    def kick(self) -> None:
        """Make the watcher reconnect now, without backoff."""
        if self.watcher is not None:
            self.watcher.reconnect_now()

    @handles(PauseWatching, take=())
    def stop(self) -> None:
        """Stop the current watcher in the background (it may take a moment); what it
        still says is not shown."""
        self.ports.state.gen += 1
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            self.ports.work("stop_watcher", lambda: watcher.stop(timeout=5.0),
                            group="stop-watcher", exclusive=False)
        self.title_changed()  # what the tab says of the run may have changed

    def shutdown(self, timeout: float = SHUTDOWN_JOIN) -> None:
        """The app ends: stop the watcher, whose follower process on the box would
        otherwise keep running, and wait up to ``timeout`` s for its thread (it never
        waits on the UI: its events are posted)."""
        self.ports.state.gen += 1
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop(timeout=timeout)

    # ------------------------------------------------------------------ the run

    def show(self, event: WatchEvent) -> None:
        """A watcher event about the run or its project: metrics, GPU, host, the runs
        list, the run the box chose."""
        panes = self.panes
        if isinstance(event, MetricsEvent):
            panes.metrics.add(event)
        elif isinstance(event, GpuEvent):
            panes.gpu.add(event)
            panes.header.show_gpus([g.name for g in event.gpus])
        elif isinstance(event, HostEvent):
            panes.gpu.add_host(event)
        elif isinstance(event, RunsEvent):
            self.show_runs(event.runs)
        elif isinstance(event, ChosenEvent):
            self.chosen(event.run_dir)

    def status(self, ev: StatusEvent) -> None:
        """A new status: header, the run's row, alerts."""
        state, panes = self.ports.state, self.panes
        state.status = ev
        panes.header.show_status(ev)
        self.pushes.status(ev)
        if ev.console:
            panes.log.show_console(ev.console)
        verdict = ev.health.verdict
        if state.run_dir is not None:
            panes.runs.update_run(
                state.run_dir, health=verdict, reason=ev.health.reason,
                state=ev.read.get("state"), epoch=ev.read.get("completed_epochs"),
                total_epochs=ev.read.get("total_epochs"),
                best_metric=ev.read.get("best_metric"))
            self.note_verdict(state.run_dir, verdict, ev.health.reason)
        if verdict != state.last_verdict:
            state.last_verdict = verdict
            self.title_changed()

    def chosen(self, run_dir: str | None) -> None:
        """The box chose the run to watch (or found none in the project)."""
        state, panes = self.ports.state, self.panes
        if run_dir is None:
            panes.conn_badge.show_progress(
                f"connected; no runs in {state.project} yet (l: launch)")
            return
        state.run_dir = run_dir
        state.unseen.discard(run_dir)
        panes.header.show_run(state.run_name)
        panes.runs.show_runs(panes.runs.runs, run_dir, state.unseen)

    def note_verdict(self, run_dir: str, verdict: str, reason: str) -> None:
        """Remember a run's verdict; alert when it changed to one worth it (the alert
        stays unseen unless it is the watched run of the tab on screen)."""
        state = self.ports.state
        if not state.note_verdict(run_dir, verdict):
            return
        if run_dir != state.run_dir or not self.visible():
            state.unseen.add(run_dir)
        self.health_changed(run_dir.rstrip("/").rsplit("/", 1)[-1], verdict, reason)
        self.title_changed()

    def seen(self) -> None:
        """The user looks at this tab: the watched run's alert is read."""
        state = self.ports.state
        if state.run_dir in state.unseen:
            state.unseen.discard(state.run_dir)
            self.show_runs(self.panes.runs.runs)
            self.title_changed()

    # ------------------------------------------------------------------ runs list

    @handles(DemoStarted)
    def demo_started(self, message: DemoStarted) -> None:
        """The demo run is launched: watch it."""
        self.ports.state.project = message.project
        self.watch(message.run_dir)

    @handles(RunsStale, take=())
    def refresh_runs(self) -> None:
        """List the project's runs now (after a launch or a stop; otherwise the follower
        sends what changes)."""
        self.ports.work("refresh_runs", self._list_runs, group="runs")

    def _list_runs(self) -> None:
        """In one exec; not while the link is known to be down."""
        state = self.ports.state
        if state.transport is None or state.down_since is not None:
            return
        self.ports.post(RunsListed(box_runs(state.transport, state.project)))

    @handles(RunsListed, take=("runs",), action="refresh_runs")
    def show_runs(self, runs: list[Any]) -> None:
        """Show ``runs`` (the watched run's row keeps its live health) and alert on any
        run whose verdict changed."""
        state = self.ports.state
        runs = state.with_live_health(runs)
        for info in runs:
            self.note_verdict(info.run_dir, info.health, info.reason)
        self.panes.runs.show_runs(runs, state.run_dir, state.unseen)
