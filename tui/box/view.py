"""One box tab: connects (with visible progress), watches one run with
``remote.watcher.Watcher`` and feeds the panes. The actions on the box live in
``tui.box.actions.BoxActions``; this module is the watching half.

Connecting costs one round trip once SSH is up: the watcher starts at once and its
follower, started through the gate (``remote.gate``), chooses the run, sends its status
first, then the project's runs, the log's tail, and from then on every change of the
run's files, ``hub.json``, ``guard.json`` and the weights' identity (so the badges need
no polling). The control connection for actions opens beside it and waits for the
follower to say where the trainer runs."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.widgets import Static

from remote.billing.address import Locator
from remote.billing.providers import parse_instance_target
from remote.connect import Connector
from remote.events import (
    ChosenEvent,
    ConnectionEvent,
    GpuEvent,
    GuardEvent,
    HubEvent,
    LogEvent,
    MetricsEvent,
    RunsEvent,
    StatusEvent,
    WatchEvent,
    WeightsEvent,
)
from remote.runlist import GOING, box_runs
from remote.transport.base import Transport
from remote.watcher import LOG_TAIL_BYTES, Watcher
from trainer.text import one_line
from tui.box.actions import BoxActions
from tui.box.logs import LogActions
from tui.box.resume import ResumeActions
from tui.dialogs.confirm import host_key_dialog
from tui.spec import BoxSpec
from tui.widgets.badges import ConnectionBadge, WeightsBadge
from tui.widgets.gpu import GpuPane
from tui.widgets.header import RunHeader
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import MetricsPane
from tui.widgets.runs import RunsList

#: Health verdicts that ring the bell when a run reaches them.
ALERT_VERDICTS = {"completed": "information", "failed": "error", "dead": "error",
                  "stalled": "warning"}
#: How long the control connection waits for the follower to say where the trainer
#: runs before bootstrapping by itself (a box the follower cannot start on).
READY_TIMEOUT = 60.0


class BoxView(BoxActions, ResumeActions, LogActions, Vertical):
    """Everything about one box. ``clock`` gives the time (injected for snapshots)."""

    DEFAULT_CSS = """
    BoxView { height: 1fr; }
    BoxView #badges { height: 1; background: $boost; }
    BoxView #guard-badge { width: 1fr; padding: 0 1; }
    BoxView #body { height: 1fr; }
    BoxView #panes { width: 1fr; }
    BoxView #top { height: 14; }
    BoxView MetricsPane { width: 1fr; }
    BoxView GpuPane { width: 46; }
    """

    class Progress(Message):
        """A connecting / bootstrap step (from the connect worker)."""

        def __init__(self, line: str) -> None:
            super().__init__()
            self.line = line

    class Follow(Message):
        """Start watching ``project`` (its run ``run``, else the one the box chooses)."""

        def __init__(self, project: str, run: str | None) -> None:
            super().__init__()
            self.project = project
            self.run = run

    class Connected(Message):
        """The control connection is up; ``runs`` were listed in ``project`` (``None``:
        the watcher's follower lists them)."""

        def __init__(self, transport: Transport, project: str, runs: list[Any],
                     run: str | None, notes: list[str]) -> None:
            super().__init__()
            self.transport = transport
            self.project = project
            self.runs = runs
            self.run = run
            self.notes = notes

    class ConnectFailed(Message):
        """Connecting or bootstrapping failed (one line for the user)."""

        def __init__(self, error: str) -> None:
            super().__init__()
            self.error = error

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
        """The watched run reached a verdict worth telling the user about."""

        def __init__(self, box: BoxView, verdict: str, reason: str) -> None:
            super().__init__()
            self.box = box
            self.verdict = verdict
            self.reason = reason

    def __init__(self, spec: BoxSpec, clock: Callable[[], float] = time.time,
                 autoconnect: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.clock = clock
        self.autoconnect = autoconnect
        self.transport: Transport | None = None
        named = parse_instance_target(spec.target) if spec.kind == "ssh" else None
        # A box named by its instance is located anew on every (re)connection.
        self.connector = Connector(
            None if spec.kind == "local" else spec.target, port=spec.port,
            accept_new=spec.accept_new, ask_unknown=self.ask_host_key,
            ssh_options=dict(spec.ssh_options), python=spec.python,
            locate=Locator(named, base_url=spec.provider_url) if named else None)
        self.project = spec.project
        self.run_dir: str | None = None
        self.status: StatusEvent | None = None
        self.watcher: Any = None
        self.gen = 0
        self._accepted_keys: set[str] = set()
        self._asking = threading.Lock()
        self._weights: Any = None
        self.init_actions()
        self.init_logs()

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        """Header, badges, then runs list beside the metrics, GPU and log panes."""
        yield RunHeader(self.spec.title, self.clock, id="header")
        with Horizontal(id="badges"):
            yield ConnectionBadge(id="conn-badge")
            yield WeightsBadge(id="weights-badge")
            yield Static(self.guard_text(), id="guard-badge")
        with Horizontal(id="body"):
            yield RunsList(id="runs")
            with Vertical(id="panes"):
                with Horizontal(id="top"):
                    yield MetricsPane(id="metrics")
                    yield GpuPane(id="gpu")
                yield LogPane(id="logpane")

    def on_mount(self) -> None:
        """Start connecting and the one-second tick."""
        self._app = self.app  # for threads Textual did not start (the watcher's)
        self.set_interval(1.0, self.tick)
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

    def tick(self) -> None:
        """Once a second: times and money move on."""
        self.header.tick()
        self.header.show_money(self.money_text())

    # ------------------------------------------------------------------ connecting

    @work(thread=True, exclusive=True, exit_on_error=False, group="connect",
          name="connect")
    def connect(self) -> None:
        """Open the control connection once the watcher's follower said where the
        trainer runs (the run is on screen first), and hand it to the UI thread."""
        spec = self.spec

        def progress(line: str) -> None:
            self.tell(self.Progress(line))

        try:
            notes: list[str] = []
            project, run = self.project, spec.run
            if spec.demo:
                from tui.demo import start_demo

                project, run = start_demo(progress)
                self.tell(self.Follow(project, run))
            # Unless the follower could not start (then this bootstraps), the prefix is
            # known by now and this connection only opens.
            self.connector.wait_ready(READY_TIMEOUT)
            transport = self.open_transport(progress, notes, early=False)
        except Exception as exc:  # noqa: BLE001 - any failure is shown, never raised
            self.tell(self.ConnectFailed(one_line(exc)))
            return
        self.tell(self.Connected(transport, project, None, run, notes))

    def on_box_view_follow(self, message: Follow) -> None:
        """Watch the demo's run once it started."""
        self.project = message.project
        self.watch_run(message.run and _join(message.project, message.run))

    def open_transport(self, progress: Callable[[str], None],
                       notes: list[str] | None = None, early: bool = True,
                       gate: bool = False) -> Transport:
        """A new connection to the box (worker threads only: it blocks), ready to run
        ``python3 -m trainer`` (bootstrapped unless the connector knows where the trainer
        runs; ``gate``: not at all, the watcher's follower starts through the gate).
        ``early``: the connection opened while the app started, if any (the watcher's)."""
        if self.spec.kind != "local":
            progress(f"connecting to {self.spec.title}")
        return self.connector.open(progress, notes, early=early, gate=gate)

    def ask_host_key(self, host: str, key_type: str, fingerprint: str) -> bool:
        """Asked by the SSH worker thread about an unknown host key: shows the modal on
        the UI thread and waits for the answer. A key trusted once in this session is
        trusted again on reconnect; the watcher's and the control connection's questions
        about the same key are asked once."""
        with self._asking:
            if fingerprint in self._accepted_keys:
                return True
            return self._ask_host_key(host, key_type, fingerprint)

    def _ask_host_key(self, host: str, key_type: str, fingerprint: str) -> bool:
        answered = threading.Event()
        answer: list[bool] = [False]

        def done(result: bool | None) -> None:
            answer[0] = bool(result)
            answered.set()

        self.tell(self.Progress(f"waiting for you to check {host}'s host key"))
        self._app.call_from_thread(self._app.push_screen,
                                   host_key_dialog(host, key_type, fingerprint), done)
        answered.wait()
        if answer[0]:
            self._accepted_keys.add(fingerprint)
        return answer[0]

    def on_box_view_progress(self, message: Progress) -> None:
        """Show a connecting step."""
        self.query_one(ConnectionBadge).show_progress(message.line)

    def on_box_view_connect_failed(self, message: ConnectFailed) -> None:
        """Show why connecting failed (and stop the watcher's retries); r tries again."""
        self.stop_watcher()
        self.query_one(ConnectionBadge).show_error(message.error)
        self.app.notify(one_line(message.error), title=f"{self.spec.title}: cannot connect",
                        severity="error", timeout=10)

    def on_box_view_connected(self, message: Connected) -> None:
        """The control connection is ready: actions may run, and the box is checked."""
        if self.transport is not None and self.transport is not message.transport:
            self.close_transport(self.transport)
        self.transport = message.transport
        self.project = message.project
        for note in message.notes:
            self.app.notify(one_line(note), title=self.spec.title, timeout=8)
        if message.runs is not None:  # listed by the caller (resume): choose here
            runs = message.runs
            chosen = None
            if message.run:
                chosen = next((r.run_dir for r in runs if r.name == message.run),
                              _join(message.project, message.run))
            elif runs:
                chosen = ([r for r in runs if r.health in GOING] or runs)[0].run_dir
            self.query_one(RunsList).show_runs(runs, chosen)
            if chosen is not None and (chosen != self.run_dir or self.watcher is None):
                self.watch_run(chosen)
        self.refresh_safety()
        self.refresh_instance()
        self.install_needs()
        if self.preflight is None and self.spec.kind == "ssh":
            self.check_box()

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
        self._last_verdict: str | None = None
        self._weights = None
        self.log_first = None
        self.header.show_run(run_dir.rstrip("/").rsplit("/", 1)[-1] if run_dir else "")
        self.query_one(MetricsPane).clear()
        self.log_pane.clear()
        runs = self.query_one(RunsList)
        runs.show_runs(runs.runs, run_dir)
        self.watcher = Watcher(
            self.watcher_connect, run_dir, lambda ev: self.on_watch_event(gen, ev),
            project=self.project, gate=self.connector, log_tail=LOG_TAIL_BYTES)
        self.watcher.start()

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
            if event.reset or self.log_first is None:
                self.log_first = event.offset  # older bytes are fetched on demand
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
        elif isinstance(ev, ConnectionEvent):
            self.query_one(ConnectionBadge).show(ev)
            if ev.state == "limited":  # a cap on the box's stream tripped (said once)
                self.app.notify(ev.detail, title=self.spec.title, severity="warning")
        elif isinstance(ev, RunsEvent):
            self.query_one(RunsList).show_runs(ev.runs, self.run_dir)
        elif isinstance(ev, ChosenEvent):
            self.on_chosen(ev.run_dir)
        elif isinstance(ev, GuardEvent):
            self._show_guard(ev.state)
        elif isinstance(ev, WeightsEvent | HubEvent):
            self.on_weights_changed(ev)

    def on_chosen(self, run_dir: str | None) -> None:
        """The box chose the run to watch (or found none in the project)."""
        if run_dir is None:
            self.query_one(ConnectionBadge).show_progress(
                f"connected; no runs in {self.project} yet (l: launch)")
            return
        self.run_dir = run_dir
        self.header.show_run(run_dir.rstrip("/").rsplit("/", 1)[-1])
        runs = self.query_one(RunsList)
        runs.show_runs(runs.runs, run_dir)

    def on_weights_changed(self, ev: WeightsEvent | HubEvent) -> None:
        """The run's weight files or its Hub ledger changed on the box: judge the
        weights again (the only time the badge asks the box)."""
        kind, value = ("weights", ev.files) if isinstance(ev, WeightsEvent) else \
            ("hub", ev.ledger)
        seen = self._weights or {}
        if kind not in seen or seen[kind] != value:
            self._weights = {**seen, kind: value}
            self.refresh_safety()

    def on_status(self, ev: StatusEvent) -> None:
        """A new status: header, money, bell on bad news, safety after each epoch."""
        self.status = ev
        self.header.show_status(ev)
        if ev.console:
            self.log_pane.show_console(ev.console)
        self.header.show_money(self.money_text())
        verdict = ev.health.verdict
        if verdict != self._last_verdict:
            if self._last_verdict is not None and verdict in ALERT_VERDICTS:
                self.post_message(self.HealthChanged(self, verdict, ev.health.reason))
            self._last_verdict = verdict

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
        """Stop watching and close the connection when the app exits. The watcher is
        told to stop but not waited for: its thread may be handing this UI an event."""
        watcher, self.watcher = self.watcher, None
        if watcher is not None:
            watcher.stop(timeout=0)
        if self.transport is not None:
            self.transport.close()

    # ------------------------------------------------------------------ runs list

    @work(thread=True, exclusive=True, exit_on_error=False, group="runs")
    def refresh_runs(self) -> None:
        """List the project's runs again now (after a launch or a stop; otherwise the
        follower sends what changes), in one exec on the box."""
        if self.transport is None:
            return
        self.tell(self.RunsListed(box_runs(self.transport, self.project)))

    def on_box_view_runs_listed(self, message: RunsListed) -> None:
        """Show the fresh list."""
        self.query_one(RunsList).show_runs(message.runs, self.run_dir)

    def on_runs_list_chosen(self, message: RunsList.Chosen) -> None:
        """Switch to the chosen run."""
        if message.run.run_dir != self.run_dir:
            self.watch_run(message.run.run_dir)

    def reconnect(self) -> None:
        """Reconnect now: the watcher at once, and the control connection too."""
        if self.transport is None:
            if self.watcher is None and not self.spec.demo:
                self.watch_run(self.run_dir)
            self.connect()
            return
        if self.watcher is not None:
            self.watcher.reconnect_now()
        self.reconnect_control()

    @work(thread=True, exclusive=True, exit_on_error=False, group="connect")
    def reconnect_control(self) -> None:
        """A fresh connection for actions (the old one may have died with the link)."""
        transport = self.open_transport(lambda line: self.tell(self.Progress(line)))
        runs = box_runs(transport, self.project, self.connector)
        run = self.run_dir.rstrip("/").rsplit("/", 1)[-1] if self.run_dir else None
        self.tell(self.Connected(transport, self.project, runs, run, []))


def _join(project: str, run: str) -> str:
    """``project/run``."""
    return f"{project.rstrip('/')}/{run}"
