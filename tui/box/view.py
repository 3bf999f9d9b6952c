"""One box tab: connects (with visible progress), finds the runs, watches one run with
``remote.watcher.Watcher`` and feeds the panes. The actions on the box live in
``tui.box.actions.BoxActions``; this module is the watching half."""

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
    ConnectionEvent,
    GpuEvent,
    LogEvent,
    MetricsEvent,
    StatusEvent,
    WatchEvent,
)
from remote.runs import list_runs
from remote.transport.base import Transport
from remote.watcher import Watcher
from trainer.text import one_line
from tui.box.actions import BoxActions
from tui.box.guard import GUARD_REFRESH
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
#: Seconds between refreshes of the runs list.
RUNS_REFRESH = 15.0


class BoxView(BoxActions, ResumeActions, Vertical):
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

    class Connected(Message):
        """The box is reachable; ``runs`` were listed in ``project``."""

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
        self.init_actions()

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
        self.set_interval(RUNS_REFRESH, self.refresh_runs)
        self.set_interval(GUARD_REFRESH, self.refresh_guard)
        if self.autoconnect:
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
        """Open the box (SSH + bootstrap, or this machine), list the runs, then hand
        over to the UI thread, which starts watching."""
        spec = self.spec

        def progress(line: str) -> None:
            self.tell(self.Progress(line))

        try:
            notes: list[str] = []
            project, run = self.project, spec.run
            if spec.demo:
                from tui.demo import start_demo

                project, run = start_demo(progress)
            transport = self.open_transport(progress, notes)
            progress(f"listing runs in {project}")
            runs = list_runs(transport, project)
        except Exception as exc:  # noqa: BLE001 - any failure is shown, never raised
            self.tell(self.ConnectFailed(one_line(exc)))
            return
        self.tell(self.Connected(transport, project, runs, run, notes))

    def open_transport(self, progress: Callable[[str], None],
                       notes: list[str] | None = None) -> Transport:
        """A new connection to the box, ready to run ``python3 -m trainer`` (worker
        threads only: it blocks)."""
        if self.spec.kind != "local":
            progress(f"connecting to {self.spec.title}")
            if self.connector.trainer_prefix is None:
                progress("bootstrapping the box (python, trainer upload)")
        return self.connector.open(progress, notes)

    def ask_host_key(self, host: str, key_type: str, fingerprint: str) -> bool:
        """Asked by the SSH worker thread about an unknown host key: shows the modal on
        the UI thread and waits for the answer. A key trusted once in this session is
        trusted again on reconnect."""
        if fingerprint in self._accepted_keys:
            return True
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
        """Show why connecting failed; r tries again."""
        self.query_one(ConnectionBadge).show_error(message.error)
        self.app.notify(one_line(message.error), title=f"{self.spec.title}: cannot connect",
                        severity="error", timeout=10)

    def on_box_view_connected(self, message: Connected) -> None:
        """Pick the run to watch and start the watcher."""
        if self.transport is not None and self.transport is not message.transport:
            self.close_transport(self.transport)
        self.transport = message.transport
        self.project = message.project
        for note in message.notes:
            self.app.notify(one_line(note), title=self.spec.title, timeout=8)
        runs = message.runs
        chosen = None
        if message.run:
            chosen = next((r.run_dir for r in runs if r.name == message.run),
                          _join(message.project, message.run))
        elif runs:
            live = [r for r in runs if r.health in ("live", "starting", "slow", "stalled")]
            chosen = (live or runs)[0].run_dir
        self.query_one(RunsList).show_runs(runs, chosen)
        if chosen is None:
            self.query_one(ConnectionBadge).show_progress(
                f"connected; no runs in {message.project} yet (l: launch)")
        elif chosen != self.run_dir:
            self.watch_run(chosen)
        self.refresh_safety()
        self.refresh_instance()
        if self.preflight is None and self.spec.kind == "ssh":
            self.check_box()

    @work(thread=True, exit_on_error=False, group="close")
    def close_transport(self, transport: Transport) -> None:
        """Close an old connection without blocking the UI."""
        transport.close()

    # ------------------------------------------------------------------ watching

    def watch_run(self, run_dir: str) -> None:
        """Watch ``run_dir`` from now on (stops watching the previous run)."""
        self.stop_watcher()
        self.gen += 1
        gen = self.gen
        self.run_dir = run_dir
        self.status = None
        self._last_verdict: str | None = None
        self._last_epoch: int | None = None
        self.header.show_run(run_dir.rstrip("/").rsplit("/", 1)[-1])
        self.query_one(MetricsPane).clear()
        self.log_pane.clear()
        runs = self.query_one(RunsList)
        runs.show_runs(runs.runs, run_dir)
        self.watcher = Watcher(
            self.watcher_connect, run_dir, lambda ev: self.on_watch_event(gen, ev))
        self.watcher.start()

    def watcher_connect(self) -> Transport:
        """The watcher's own connection (called again after a drop, from its thread)."""
        return self.open_transport(lambda line: self.tell(self.Progress(line)))

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
        elif isinstance(ev, ConnectionEvent):
            self.query_one(ConnectionBadge).show(ev)
            if ev.state == "limited":  # a cap on the box's stream tripped (said once)
                self.app.notify(ev.detail, title=self.spec.title, severity="warning")

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
            self.refresh_runs()
            self.refresh_guard()
        epoch = ev.read.get("completed_epochs")
        if epoch != self._last_epoch:
            self._last_epoch = epoch
            self.refresh_safety()

    def do_cycle_metric(self) -> None:
        """Chart the next metric column of the metrics pane."""
        key = self.query_one(MetricsPane).cycle_metric()
        self.app.notify(f"charting {key}" if key else "no metric column yet",
                        title=self.spec.title, timeout=2)

    def stop_watcher(self) -> None:
        """Stop the current watcher in the background (it may take a moment)."""
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
        """List the project's runs again."""
        if self.transport is None:
            return
        runs = list_runs(self.transport, self.project)
        self.tell(self.RunsListed(runs))

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
            self.connect()
            return
        if self.watcher is not None:
            self.watcher.reconnect_now()
        self.reconnect_control()

    @work(thread=True, exclusive=True, exit_on_error=False, group="connect")
    def reconnect_control(self) -> None:
        """A fresh connection for actions (the old one may have died with the link)."""
        transport = self.open_transport(lambda line: self.tell(self.Progress(line)))
        runs = list_runs(transport, self.project)
        run = self.run_dir.rstrip("/").rsplit("/", 1)[-1] if self.run_dir else None
        self.tell(self.Connected(transport, self.project, runs, run, []))


def _join(project: str, run: str) -> str:
    return f"{project.rstrip('/')}/{run}"
