"""One box tab: connects (with visible progress and retries, ``tui.box.link``), watches
one run with ``remote.watch.watcher.Watcher`` and feeds the panes, and reports the state of its
workers: every failure reaches the screen from here. The actions live in
``tui.box.actions`` and ``tui.box.launching``.

The watcher starts at once; its follower (through ``remote.link.gate``: one exec) chooses the
run and streams it, the project's runs and the side files (``tui.box.stream``): nothing
here polls the box. The control connection opens once the follower has answered."""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Static
from textual.worker import Worker, WorkerState

from remote.billing import Locator, parse_instance_target
from remote.link import Connector
from remote.runs import box_runs
from remote.transport import Transport
from remote.watch import (
    LOG_TAIL_BYTES,
    ConnectionEvent,
    GpuEvent,
    HostEvent,
    LogEvent,
    MetricsEvent,
    StatusEvent,
    Watcher,
    WatchEvent,
)
from trainer.health import GOING
from trainer.text import one_line
from tui.box.actions import BoxActions
from tui.box.launching import BoxLaunching
from tui.box.link import BoxLink
from tui.box.logs import LogActions
from tui.box.resume import ResumeActions
from tui.box.stream import StreamEvents
from tui.spec import BoxSpec
from tui.widgets.badges import ConnectionBadge, WeightsBadge
from tui.widgets.gpu import GpuPane
from tui.widgets.header import HEALTH_STYLES, RunHeader
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import MetricsPane
from tui.widgets.runs import RunsList
from tui.widgets.textline import TextLine

#: Health verdicts that ring the bell when a run reaches them (any run of the box).
ALERT_VERDICTS = {"completed": "information", "failed": "error", "dead": "error",
                  "stalled": "warning"}


class BoxView(BoxLink, BoxLaunching, BoxActions, ResumeActions, LogActions, StreamEvents,
              Vertical):
    """Everything about one box. ``clock`` gives the time (injected for snapshots)."""

    DEFAULT_CSS = """
    BoxView { height: 1fr; }
    BoxView #badges { height: 1; background: $boost; }
    BoxView #guard-badge { width: 1fr; padding: 0 1; }
    BoxView #status-row { height: 1; padding: 0 1; }
    BoxView #body { height: 1fr; }
    BoxView #panes { width: 1fr; }
    BoxView #top { height: 60%; min-height: 9; }
    BoxView LogPane { height: 1fr; min-height: 6; }
    BoxView MetricsPane { width: 1fr; }
    BoxView GpuPane { width: 40; }
    BoxView.-offline .data-pane { opacity: 55%; }
    BoxView.-offline .data-pane { border: round $warning; }
    """

    class Progress(Message):
        """A connecting / bootstrap step (from the connect worker)."""

        def __init__(self, line: str) -> None:
            super().__init__()
            self.line = line

    class Connected(Message):
        """The control connection is up; ``runs`` were listed in ``project`` (``None``:
        the watcher's follower lists them)."""

        def __init__(self, transport: Transport, project: str, runs: list[Any] | None,
                     run: str | None, notes: list[str]) -> None:
            super().__init__()
            self.transport = transport
            self.project = project
            self.runs = runs
            self.run = run
            self.notes = notes

    class ConnectFailed(Message):
        """A try to connect failed: ``error`` in one line, ``retry_in`` seconds to the
        next try (``None``: not retried), ``attempt`` the try that failed."""

        def __init__(self, error: str, what: str, retry_in: float | None,
                     attempt: int) -> None:
            super().__init__()
            self.error = error
            self.what = what
            self.retry_in = retry_in
            self.attempt = attempt

    class Watch(Message):
        """A watcher event for the run of generation ``gen``."""

        def __init__(self, gen: int, event: WatchEvent) -> None:
            super().__init__()
            self.gen = gen
            self.event = event

    class RunsListed(Message):
        """A fresh list of the project's runs."""

        def __init__(self, runs: list[Any]) -> None:
            super().__init__()
            self.runs = runs

    class HealthChanged(Message):
        """A run of this box (any run, watched or not) reached a verdict worth an alert."""

        def __init__(self, box: BoxView, run: str, verdict: str, reason: str) -> None:
            super().__init__()
            self.box = box
            self.run = run
            self.verdict = verdict
            self.reason = reason

    class TitleChanged(Message):
        """The tab's label changed (run health, link, unseen alerts)."""

        def __init__(self, box: BoxView) -> None:
            super().__init__()
            self.box = box

    def __init__(self, spec: BoxSpec, clock: Callable[[], float] = time.time,
                 autoconnect: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.clock = clock
        self.autoconnect = autoconnect
        named = parse_instance_target(spec.target) if spec.kind == "ssh" else None
        # A box named by its instance is located anew on every (re)connection.
        self.connector = spec.connector or Connector(
            None if spec.kind == "local" else spec.target, port=spec.port,
            accept_new=spec.accept_new, ssh_options=dict(spec.ssh_options),
            python=spec.python,
            locate=Locator(named, base_url=spec.provider_url) if named else None)
        self.connector.ask_unknown = self.ask_host_key
        self.project = spec.project
        self.run_dir: str | None = None
        self.status: StatusEvent | None = None
        self.watcher: Any = None
        self.gen = 0
        self._last_verdict: str | None = None
        #: The last verdict seen of every run (run dir -> verdict), to alert on changes.
        self.verdicts: dict[str, str] = {}
        #: Runs whose alert the user has not looked at yet.
        self.unseen: set[str] = set()
        self._frame = 0
        self.init_link()
        self.init_actions()
        self.init_launching()
        self.init_logs()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        """Header, badges, status row, then runs list beside the metrics, GPU and log."""
        yield RunHeader(self.spec.title, self.clock, id="header")
        with Horizontal(id="badges"):
            yield ConnectionBadge(id="conn-badge")
            yield WeightsBadge(id="weights-badge")
            yield Static(self.guard_text(), id="guard-badge")
        yield TextLine(id="status-row")  # shown only when it has something to say
        with Horizontal(id="body"):
            yield RunsList(id="runs", classes="data-pane")
            with Vertical(id="panes"):
                with Horizontal(id="top"):
                    yield MetricsPane(id="metrics", classes="data-pane")
                    yield GpuPane(id="gpu", classes="data-pane")
                yield LogPane(id="logpane", classes="data-pane")

    def on_mount(self) -> None:
        """Start connecting, the one-second tick and the spinner."""
        self._app = self.app  # for threads Textual did not start (the watcher's)
        self.set_interval(1.0, self.tick)
        self.set_interval(0.15, self.spin)
        if self.autoconnect:
            if not self.spec.demo:
                self.watch_run(_join(self.project, self.spec.run) if self.spec.run else None)
            self.connect()

    def tell(self, message: Message) -> None:
        """Post ``message`` to this view from any thread, including the watcher's,
        which has no Textual context. Dropped once the app has stopped."""
        if threading.get_ident() == self._thread_id:
            self.post_message(message)
            return
        if self._app.is_running:
            with contextlib.suppress(RuntimeError):
                self._app.call_from_thread(self.post_message, message)

    @property
    def header(self) -> RunHeader:
        """The run header."""
        return self.query_one(RunHeader)

    @property
    def log_pane(self) -> LogPane:
        """The log pane."""
        return self.query_one(LogPane)

    @property
    def conn_badge(self) -> ConnectionBadge:
        """The connection badge."""
        return self.query_one(ConnectionBadge)

    def tick(self) -> None:
        """Once a second: times, ages and money move on."""
        self.header.tick()
        self.header.show_money(self.money_text())
        self.draw_safety()
        if self.down_since is not None:
            self.draw_link()
        self.draw_status_row()

    def spin(self) -> None:
        """Turn the spinner while an action runs."""
        if self.activities:
            self._frame += 1
            self.draw_status_row()

    def draw_status_row(self) -> None:
        """Actions in progress; else the link warning; else the last thing that happened."""
        now = self.clock()
        if self.activities:
            text = self.activities.line(now, self._frame)
        elif self.down_since is not None:
            text = Text("⚠ no link to the box: ", style="bold yellow")
            text.append(f"{self.stale_words()}; reconnecting on its own (r: now)")
        elif self.last_line is not None:
            line, severity = self.last_line
            text = Text(line, style="red" if severity == "error" else "dim")
            text.append("  (e: events)", style="dim")
        else:
            text = Text("")
        row = self.query_one("#status-row", TextLine)
        row.display = bool(text.plain)
        row.update(text)

    def tab_label(self) -> Text:
        """The tab's title: host, the watched run's health glyph, link and alerts."""
        text = Text(self.spec.title)
        if self.status is not None:
            label, style = HEALTH_STYLES.get(self.status.health.verdict, ("?", ""))
            text.append(" " + label.split(" ", 1)[0], style=style)
        if self.down_since is not None:
            text.append(" ◌", style="bold yellow")
        if self.unseen:
            text.append(f" ⚠{len(self.unseen)}", style="bold red")
        return text

    # ------------------------------------------------------------------ workers

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place this box's worker outcomes are handled (the message does not
        bubble): an ended action leaves the status row, a failed one is reported."""
        worker = event.worker
        if event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            self.end_activity(worker.name)
        if event.state == WorkerState.ERROR and worker.error is not None:
            self.report_failure(worker.name, worker.error)

    # ------------------------------------------------------------------ connected

    def on_box_view_progress(self, message: Progress) -> None:
        """Show a connecting step, unless the watch's link is already up: the control
        connection opens after the first status, and its steps must not make a live
        link look as if it were still connecting."""
        if self.conn_badge.state not in ("live", "polling"):
            self.conn_badge.show_progress(message.line)

    def on_box_view_connected(self, message: Connected) -> None:
        """Actions may run, the box is checked; listed runs (a resume) choose the run."""
        if self.transport is not None and self.transport is not message.transport:
            self.close_transport(self.transport)
        first = self.transport is None
        self.transport = message.transport
        self.retrying = False
        self.project = message.project
        for note in message.notes:
            self.app.notify(one_line(note), title=self.spec.title, timeout=8)
        runs = message.runs
        chosen = self.run_dir
        if runs is not None:
            if message.run:
                chosen = next((r.run_dir for r in runs if r.name == message.run),
                              _join(message.project, message.run))
            elif runs and chosen is None:
                chosen = ([r for r in runs if r.health in GOING] or runs)[0].run_dir
            self.show_runs(runs)
            if chosen is None:
                self.conn_badge.show_progress(
                    f"connected; no runs in {message.project} yet (l: launch)")
        if self.watcher is None or (chosen is not None and chosen != self.run_dir):
            self.watch_run(chosen)  # None: the box chooses (after a failed start)
        if self.watcher is None or first:
            self.link_up()
        self.refresh_safety()
        self.refresh_instance()
        self.install_needs()
        if self.preflight is None and self.spec.kind == "ssh":
            self.check_box()
        if not first:
            self.app.record("control connection open again", self.spec.title, "note")

    @work(thread=True, exit_on_error=False, group="close")
    def close_transport(self, transport: Transport) -> None:
        """Close an old connection without blocking the UI."""
        transport.close()

    # ------------------------------------------------------------------ watching

    def watch_run(self, run_dir: str | None) -> None:
        """Watch ``run_dir`` from now on (stops watching the previous run); ``None``: the
        run the box chooses in the project (the newest going one, else the newest)."""
        self.stop_watcher()
        self.gen += 1
        gen = self.gen
        self.run_dir = run_dir
        self.status = None
        self._last_verdict = None
        self._weights = None
        self.unseen.discard(run_dir or "")
        self.header.show_run(run_dir.rstrip("/").rsplit("/", 1)[-1] if run_dir else "")
        self.query_one(MetricsPane).clear()
        self.log_pane.clear()
        runs = self.query_one(RunsList)
        runs.show_runs(runs.runs, run_dir, self.unseen)
        self.watcher = Watcher(
            self.watcher_connect, run_dir, lambda ev: self.on_watch_event(gen, ev),
            project=self.project, gate=self.connector, log_tail=LOG_TAIL_BYTES)
        self.watcher.start()
        self.post_message(self.TitleChanged(self))

    def watcher_connect(self) -> Transport:
        """The watcher's own connection (called again after a drop, from its thread);
        its follower starts through the gate."""
        return self.open_transport(lambda line: self.tell(self.Progress(line)), gate=True)

    def on_watch_event(self, gen: int, event: WatchEvent) -> None:
        """Called on the watcher thread: log bytes go straight into the log feed (cut
        into clean lines there), everything else becomes a message for the UI."""
        if gen != self.gen:
            return
        if isinstance(event, LogEvent):
            self.log_pane.feed.feed(event)
        else:
            self.tell(self.Watch(gen, event))

    def on_box_view_watch(self, message: Watch) -> None:
        """Route a watcher event to its pane."""
        if message.gen != self.gen:
            return
        ev = message.event
        if isinstance(ev, StatusEvent):
            self.on_status(ev)
        elif isinstance(ev, MetricsEvent):
            self.query_one(MetricsPane).add(ev)
        elif isinstance(ev, GpuEvent):
            self.query_one(GpuPane).add(ev)
            self.header.show_gpus([g.name for g in ev.gpus])
        elif isinstance(ev, HostEvent):
            self.query_one(GpuPane).add_host(ev)
        elif self.on_stream_event(ev):
            pass
        elif isinstance(ev, ConnectionEvent):
            if ev.state == "limited":  # a cap on the box's stream tripped (said once)
                self.app.notify(ev.detail, title=self.spec.title, severity="warning")
            before = self.down_since
            self.on_link_event(ev)
            if before != self.down_since:
                self.post_message(self.TitleChanged(self))

    def on_status(self, ev: StatusEvent) -> None:
        """A new status: header, runs list row, money, alerts."""
        self.status = ev
        self.header.show_status(ev)
        if ev.console:
            self.log_pane.show_console(ev.console)
        self.header.show_money(self.money_text())
        verdict = ev.health.verdict
        if self.run_dir is not None:
            self.query_one(RunsList).update_run(
                self.run_dir, health=verdict, reason=ev.health.reason,
                state=ev.read.get("state"), epoch=ev.read.get("completed_epochs"),
                total_epochs=ev.read.get("total_epochs"),
                best_metric=ev.read.get("best_metric"))
            self.note_verdict(self.run_dir, verdict, ev.health.reason)
        if verdict != self._last_verdict:
            self._last_verdict = verdict
            self.post_message(self.TitleChanged(self))

    def note_verdict(self, run_dir: str, verdict: str, reason: str) -> None:
        """Remember a run's verdict; alert when it changed to one worth it."""
        before = self.verdicts.get(run_dir)
        self.verdicts[run_dir] = verdict
        if before is None or before == verdict or verdict not in ALERT_VERDICTS:
            return
        if run_dir != self.run_dir or not self.is_visible_tab():
            self.unseen.add(run_dir)
        name = run_dir.rstrip("/").rsplit("/", 1)[-1]
        self.post_message(self.HealthChanged(self, name, verdict, reason))
        self.post_message(self.TitleChanged(self))

    def is_visible_tab(self) -> bool:
        """Whether this box's tab is the one shown."""
        return self.app.box is self if hasattr(self.app, "box") else True

    def seen(self) -> None:
        """The user looks at this tab: the watched run's alert is read."""
        if self.run_dir in self.unseen:
            self.unseen.discard(self.run_dir)
            self.show_runs(self.query_one(RunsList).runs)
            self.post_message(self.TitleChanged(self))

    def stop_watcher(self) -> None:
        """Stop the current watcher in the background (it may take a moment); what it
        still says is not shown."""
        self.gen += 1
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            self._stop_watcher(watcher)

    @work(thread=True, exit_on_error=False, group="stop-watcher")
    def _stop_watcher(self, watcher: Any) -> None:
        watcher.stop(timeout=5.0)

    def on_unmount(self) -> None:
        """However the app ends (quit, Ctrl+C, a test's ``run_test`` closing), stop the
        watcher, whose follower process on the box would otherwise keep running."""
        self.shutdown()

    def shutdown(self) -> None:
        """Stop watching, retrying and the connection when the app exits. The watcher is
        told to stop but not waited for: its thread may be handing this UI an event."""
        self._retry_stop.set()
        self._retry_wake.set()
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop(timeout=0)
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ runs list

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs", name="refresh_runs")
    def refresh_runs(self) -> None:
        """List the project's runs now, in one exec (after a launch or a stop; otherwise
        the follower sends what changes); not while the link is known to be down."""
        if self.transport is None or self.down_since is not None:
            return
        self.tell(self.RunsListed(box_runs(self.transport, self.project)))

    def on_box_view_runs_listed(self, message: RunsListed) -> None:
        """Show the fresh list."""
        self.show_runs(message.runs)

    def show_runs(self, runs: list[Any]) -> None:
        """Show ``runs`` (the watched run's row keeps its live health) and alert on any
        run whose verdict changed."""
        live = None if self.status is None else self.status.health.verdict
        if live is not None and self.run_dir is not None:
            runs = [dataclasses.replace(r, health=live) if r.run_dir == self.run_dir else r
                    for r in runs]
        for info in runs:
            self.note_verdict(info.run_dir, info.health, info.reason)
        self.query_one(RunsList).show_runs(runs, self.run_dir, self.unseen)

    def on_runs_list_chosen(self, message: RunsList.Chosen) -> None:
        """Switch to the chosen run."""
        if message.run.run_dir != self.run_dir:
            self.watch_run(message.run.run_dir)


def _join(project: str, run: str) -> str:
    return f"{project.rstrip('/')}/{run}"
