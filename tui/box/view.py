"""One box tab, composed of parts that each own their share of the box: the facts live in
one ``tui.box.state.BoxState``; ``Link`` connects, ``Watching`` follows one run,
``Weights``, ``RunStop``, ``InstanceActions``, ``Guard``, ``Resume`` and ``Launching`` act,
``LogPaging`` reads the log beyond the watch, ``Outcomes`` puts how actions end on screen.
Each part gets what it needs (``tui.box.ports``), never this view, and declares its keys
and the results it handles (``tui.box.parts``): threads post results as ``PartMessage``s,
which one handler here hands (on the UI thread) to the part's method marked for them;
this view handles only those that several parts share. Failures reach the screen from
``on_worker_state_changed``, and so does what a result's handler raises."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.worker import Worker, WorkerState

from remote.watch import ConnectionEvent, GuardEvent, HubEvent, StatusEvent, WeightsEvent
from tui.box import money
from tui.box.failures import describe
from tui.box.guard import Guard
from tui.box.instance import InstanceActions, InstanceDestroyed
from tui.box.launching import Launched, Launching
from tui.box.lines import status_line, tab_label
from tui.box.link import Connected, Link
from tui.box.logs import LogPaging
from tui.box.outcomes import Outcomes
from tui.box.parts import PartMessage, handles, keys_of, routes
from tui.box.ports import Panes, Ports, host
from tui.box.resume import Resume, ResumeDone
from tui.box.state import BoxState
from tui.box.stop import RunStop
from tui.box.watching import Watch, Watching
from tui.box.weights import Weights
from tui.spec import BoxSpec
from tui.widgets.badges import ConnectionBadge, WeightsBadge
from tui.widgets.gpu import GpuPane
from tui.widgets.header import RunHeader
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import MetricsPane
from tui.widgets.runs import RunsList
from tui.widgets.textline import TextLine


class BoxView(Vertical):
    """Everything about one box. ``clock`` gives the time (injected for snapshots)."""

    #: The parts' keys (each part's ``KEYS``), for the app's bindings, footer and help.
    KEYS = keys_of(Launching, Weights, RunStop, Guard, Resume, InstanceActions)

    DEFAULT_CSS = """
    BoxView { height: 1fr; }
    BoxView #badges { height: 1; background: $boost; }
    BoxView #weights-badge { max-width: 60%; }
    BoxView #guard-badge { width: 1fr; padding: 0 1; }
    BoxView #status-row { padding: 0 1; }
    BoxView #body { height: 1fr; }
    BoxView #panes { width: 1fr; }
    BoxView #top { height: 60%; min-height: 9; }
    BoxView LogPane { height: 1fr; min-height: 6; }
    BoxView MetricsPane { width: 1fr; }
    BoxView GpuPane { width: 40; }
    BoxView.-offline .data-pane { opacity: 55%; }
    BoxView.-offline .data-pane { border: round $warning; }
    """

    @dataclass
    class HealthChanged(Message):
        """A run of this box (any run, watched or not) reached a verdict worth an alert."""

        box: BoxView
        run: str
        verdict: str
        reason: str

    @dataclass
    class TitleChanged(Message):
        """The tab's label changed (run health, link, unseen alerts)."""

        box: BoxView

    def __init__(self, spec: BoxSpec, clock: Callable[[], float] = time.time,
                 autoconnect: bool = True, **kwargs) -> None:
        super().__init__(**kwargs)
        self.spec = spec
        self.autoconnect = autoconnect
        self.state = BoxState(spec, clock)
        self.panes = Panes(self)
        ports = Ports(self.state, post=self._post, work=self._work, app=lambda: host(self))
        self.outcomes = Outcomes(ports, redraw=self.draw_status_row)
        self.link = Link(ports, self.panes, redraw=self.draw_status_row, again=self.reconnect)
        self.watching = Watching(
            ports, self.panes, connect=self.link.watcher_transport, gate=self.link.connector,
            title_changed=self._title_changed, visible=self.is_visible_tab,
            health_changed=lambda *seen: self.post_message(self.HealthChanged(self, *seen)))
        self.weights = Weights(ports, self.panes)
        self.run_stop = RunStop(ports)
        self.instance = InstanceActions(ports, costs=self.costs)
        self.guard = Guard(ports, self.panes)
        self.resume = Resume(ports, self.link.connector)
        self.launching = Launching(ports, self.panes, timer=self.set_timer)
        self.logs = LogPaging(ports, self.panes)
        parts = (self.outcomes, self.link, self.watching, self.weights, self.run_stop,
                 self.instance, self.guard, self.resume, self.launching,
                 self.launching.estimate, self.logs)
        #: The parts' keys on this box: command name -> the part's method (``KEYS``).
        self.commands: dict[str, Callable[[], None]] = {
            key.name: getattr(part, key.method) for part in parts
            for key in getattr(part, "KEYS", ())}
        #: Message class -> the part's method that handles it (this view's own included).
        self.routes = routes((*parts, self))
        self._frame = 0
        #: r asked for the control connection anew: its return is said out loud.
        self._reconnecting = False

    # ------------------------------------------------------------------ wiring

    def _post(self, message: Message) -> bool:
        """Post ``message`` to this view from any thread (``post_message`` is
        thread-safe); ``False`` once the view or the app has gone."""
        with contextlib.suppress(RuntimeError):  # the app's loop has closed
            return self.post_message(message)
        return False

    def _work(self, name: str, fn: Callable[[], object], *, group: str,
              label: str | None = None, exclusive: bool = True) -> None:
        """Run ``fn`` in a worker thread named ``name`` (``label``: in the status row)."""
        if label is not None:
            self.outcomes.begin(name, label)
        self.run_worker(fn, name=name, group=group, exclusive=exclusive, thread=True,
                        exit_on_error=False)

    def _title_changed(self) -> None:
        self.post_message(self.TitleChanged(self))

    # ------------------------------------------------------------------ layout

    def compose(self) -> ComposeResult:
        """Header, badges, status row, then runs list beside the metrics, GPU and log."""
        yield RunHeader(self.spec.title, self.state.clock,
                        money=money.money_text(self.state, None), id="header")
        with Horizontal(id="badges"):
            yield ConnectionBadge(id="conn-badge")
            yield WeightsBadge(id="weights-badge")
            yield TextLine(self.guard.text(), id="guard-badge")
        yield TextLine(id="status-row", wrap=True)  # shown only when it has something to say
        with Horizontal(id="body"):
            yield RunsList(id="runs", classes="data-pane")
            with Vertical(id="panes"):
                with Horizontal(id="top"):
                    yield MetricsPane(id="metrics", classes="data-pane")
                    yield GpuPane(id="gpu", classes="data-pane")
                yield LogPane(id="logpane", classes="data-pane")

    def on_mount(self) -> None:
        """Start connecting (the provider is asked at once), the tick and the spinner."""
        self.set_interval(1.0, self.tick)
        self.set_interval(0.15, self.spin)
        if self.autoconnect:
            self.instance.refresh()  # the provider answers without the box
            if not self.spec.demo:
                self.watching.watch(self.state.run_path(self.spec.run) if self.spec.run
                                    else None)
            self.link.connect()

    @property
    def header(self) -> RunHeader:
        """The run header."""
        return self.panes.header

    @property
    def log_pane(self) -> LogPane:
        """The log pane."""
        return self.panes.log

    def costs(self) -> Any:
        """The ``CostReport`` of the run watched, up to now."""
        return money.costs(self.state, self.header.elapsed())

    def money_text(self) -> Text:
        """The header's money line (``tui.box.money.money_text``)."""
        return money.money_text(self.state, self.header.elapsed())

    def tick(self) -> None:
        """Once a second: times, ages, money and the badges move on."""
        self.header.tick()
        self.header.show_money(self.money_text())
        self.weights.tick()
        self.guard.draw()
        if self.state.down_since is not None:
            self.link.draw()
        self.draw_status_row()

    def spin(self) -> None:
        """Turn the spinner while an action runs."""
        if self.state.activities:
            self._frame += 1
            self.draw_status_row()

    def draw_status_row(self) -> None:
        """The status row, shown only when it has something to say."""
        text = status_line(self.state, self._frame)
        row = self.panes.status_row
        row.display = bool(text.plain)
        row.update(text)

    def tab_label(self) -> Text:
        """The tab's title (``tui.box.lines.tab_label``)."""
        return tab_label(self.state)

    def is_visible_tab(self) -> bool:
        """Whether this box's tab is the one shown."""
        return self.app.box is self if hasattr(self.app, "box") else True

    # ------------------------------------------------------------------ keys, failures

    def reconnect(self) -> None:
        """r: reconnect the watcher and the control connection now (a declined host key
        is asked about again); the status row says so until it is open again."""
        if self.instance.gone("there is no box to reconnect to"):
            return
        self.link.forget_declined()
        if self.link.retry_now():
            self.outcomes.done("r: trying to connect again now")
            return
        if self.state.transport is None:
            self.link.connect()
            return
        self.watching.kick()
        self.link.reconnect_control()
        self.outcomes.begin("reconnect_control", "reconnecting (r)")
        self._reconnecting = True

    def relink(self) -> None:
        """An action found the link broken: one reconnect for the control connection
        (and the watcher, unless it is already on it)."""
        if self.state.down_since is None:
            self.watching.kick()
        self.link.reconnect_control()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """An ended action leaves the status row; a failed one is reported."""
        worker = event.worker
        if event.state in (WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            self.outcomes.end(worker.name)
        if event.state == WorkerState.ERROR and worker.error is not None:
            self.report_failure(worker.name, worker.error)

    def report_failure(self, name: str, error: BaseException) -> None:
        """``name``'s failure on screen in one line with the next step (and in the launch
        form when it is the form's); a broken link starts the reconnect."""
        failure = describe(name, error, self.state.transport)
        if failure.link and self.state.transport is not None:
            self.relink()
        self.launching.failed(name, failure.line, said=self.outcomes.failed(name, failure))

    def shutdown(self) -> None:
        """Stop retrying, watching (its thread waited for, briefly) and the connection."""
        self.link.shutdown()
        self.watching.shutdown()
        if self.state.transport is not None:
            self.state.transport.close()

    def on_unmount(self) -> None:
        """However the app ends, stop the watcher (its follower on the box would stay)."""
        self.shutdown()

    # ------------------------------------------------------------------ results

    @on(PartMessage)
    @on(LogPane.WantsOlder)
    @on(LogPane.Searched)
    def hand_to_part(self, message: Message) -> None:
        """A part's result (or the log pane's ask) to the part's method that handles it
        (``tui.box.parts.handles``); what the handler of an action's result raises is that
        action's failure, reported as the worker's own errors are, never raised."""
        message.stop()
        route = self.routes[type(message)]
        if route.action is None:
            route(message)
            return
        try:
            route(message)
        except Exception as exc:  # noqa: BLE001 - every failure reaches the screen
            self.report_failure(route.action, exc)
            return
        if route.news:
            self.outcomes.succeeded(route.action)

    @handles(Connected, action="connect")
    def connected(self, message: Connected) -> None:
        """Actions may run, the box is checked; listed runs (a resume) choose the run."""
        state = self.state
        first = self.link.connected(message)
        chosen = state.run_dir
        if message.runs is not None:
            chosen = state.choose_run(message.runs, message.run)
            self.watching.show_runs(message.runs)
            if chosen is None:
                self.panes.conn_badge.show_progress(
                    f"connected; no runs in {message.project} yet (l: launch)")
        if self.watching.watcher is None or (chosen is not None and chosen != state.run_dir):
            self.watching.watch(chosen)  # None: the box chooses (after a failed start)
        if first:
            self.link.link_up()
        self.weights.refresh()
        self.instance.connected()
        self.link.install_needs()
        if state.preflight is None and self.spec.kind == "ssh":
            self.launching.check_box()
        if not first:
            self.launching.link_back()
            if self._reconnecting:
                self._reconnecting = False
                self.outcomes.done("reconnected: the control connection is open again")
            else:
                self.outcomes.ports.record("control connection open again")

    @handles(Watch)
    def watched(self, message: Watch) -> None:
        """A watcher event to the part it belongs to."""
        if message.gen != self.state.gen:
            return
        ev = message.event
        if isinstance(ev, GuardEvent):
            self.guard.show(ev.state)
        elif isinstance(ev, WeightsEvent | HubEvent):
            self.weights.files_changed(ev)
        elif isinstance(ev, ConnectionEvent):
            if ev.state == "limited":  # a cap on the box's stream tripped (said once)
                self.app.notify(ev.detail, title=self.spec.title, severity="warning")
            if self.link.on_event(ev):
                self._title_changed()
        elif isinstance(ev, StatusEvent):
            self.watching.status(ev)
            self.header.show_money(self.money_text())
        else:
            self.watching.show(ev)

    def on_runs_list_chosen(self, message: RunsList.Chosen) -> None:
        """Switch to the chosen run."""
        if message.run.run_dir != self.state.run_dir:
            self.watching.watch(message.run.run_dir)

    def on_runs_list_left(self, _message: RunsList.Left) -> None:
        """Esc in the runs list, with no filter to clear: back to the log."""
        self.log_pane.log_view.focus()

    @handles(InstanceDestroyed)
    def destroyed(self, _message: InstanceDestroyed) -> None:
        """The destroy is confirmed: nothing watches, connects or asks about it any more."""
        self.watching.stop()
        self.link.gone()
        self.header.show_money(self.money_text())
        self.weights.refresh()  # the copies of what the box last listed
        self._title_changed()

    @handles(ResumeDone, action="resume")
    def resumed(self, message: ResumeDone) -> None:
        """The run was relaunched: the new connection is the control connection and the
        run is watched (a watcher on it reconnects at once, off the old address)."""
        resumed = message.resumed
        name = resumed.run_dir.rstrip("/").rsplit("/", 1)[-1]
        watching = self.watching.watcher if self.state.run_dir == resumed.run_dir else None
        self.connected(Connected(resumed.transport, message.project, message.runs, name, []))
        if watching is not None and watching is self.watching.watcher:
            watching.reconnect_now()
        self.instance.refresh()

    @handles(Launched, action="start_launch")
    def launched(self, message: Launched) -> None:
        """A run was started: watch it."""
        self.watching.watch(self.launching.launched(message))
        self.watching.refresh_runs()
