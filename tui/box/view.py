"""One box tab, composed of parts that each own their share of the box: the facts live in
one ``tui.box.state.BoxState``; ``Link`` connects, ``Watching`` follows one run,
``Weights``, ``RunStop``, ``Instance``, ``Guard``, ``Resume`` and ``Launching`` act,
``LogPaging`` reads the log beyond the watch, ``Outcomes`` puts how actions end on screen.
Each part gets what it needs (``tui.box.ports``), never this view; threads post results
as messages, handed here (on the UI thread) to their part. Failures reach the screen from
``on_worker_state_changed``, and so does what a result's handler raises."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.worker import Worker, WorkerState

from remote.watch import ConnectionEvent, GuardEvent, HubEvent, StatusEvent, WeightsEvent
from tui.box import money
from tui.box.estimate import Estimated
from tui.box.failures import describe
from tui.box.guard import Guard, GuardRead
from tui.box.instance import Instance, InstanceDestroyed, InstanceFigures, InstanceRead
from tui.box.launching import (
    ChecksDone,
    HubChecked,
    Launched,
    Launching,
    PreflightRead,
    Profiled,
)
from tui.box.lines import status_line, tab_label
from tui.box.link import Connected, ConnectFailed, DemoStarted, HostKeyAsked, Link, PauseWatching
from tui.box.logs import LogPaging, LogSearched, OlderLog
from tui.box.outcomes import Outcomes, result_of
from tui.box.ports import (
    Done,
    InstanceStale,
    Notice,
    Panes,
    Ports,
    Progress,
    RunsStale,
    SafetyStale,
    host,
)
from tui.box.resume import Resume, ResumeDone, ResumeFigures
from tui.box.state import BoxState
from tui.box.stop import RunStop
from tui.box.watching import RunsListed, Watch, Watching
from tui.box.weights import SafetyJudged, Transferred, Weights
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
        self.instance = Instance(ports, costs=self.costs)
        self.guard = Guard(ports, self.panes)
        self.resume = Resume(ports, self.link.connector)
        self.launching = Launching(ports, self.panes, timer=self.set_timer)
        self.logs = LogPaging(ports, self.panes)
        #: The box keys of the app: action name -> what it does on this box.
        self.commands: dict[str, Callable[[], None]] = {
            "launch": self.launching.open_launch, "profile": self.launching.open_profile,
            "pull": self.weights.pull, "push": self.weights.ask_push,
            "stop_run": self.run_stop.ask, "guard": self.guard.ask, "resume": self.resume.ask,
            "stop_instance": self.instance.ask_stop, "destroy": self.instance.ask_destroy}
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

    # ------------------------------------------------------------------ results: link

    def on_box_progress(self, message: Progress) -> None:
        """A connecting step."""
        self.link.show_progress(message.line)

    def on_box_connect_failed(self, message: ConnectFailed) -> None:
        """A try to connect failed."""
        self.link.show_failure(message)

    def on_box_pause_watching(self, _message: PauseWatching) -> None:
        """The first connection failed: the watcher waits for the next."""
        self.watching.stop()

    def on_box_demo_started(self, message: DemoStarted) -> None:
        """The demo run is launched: watch it."""
        self.state.project = message.project
        self.watching.watch(message.run_dir)

    def on_box_host_key_asked(self, message: HostKeyAsked) -> None:
        """A thread waits for the user's word on a host key."""
        self.link.ask_user(message)

    @result_of("connect")
    def on_box_connected(self, message: Connected) -> None:
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

    # ------------------------------------------------------------------ results: watching

    def on_box_watch(self, message: Watch) -> None:
        """Route a watcher event to the part it belongs to."""
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

    @result_of("refresh_runs")
    def on_box_runs_listed(self, message: RunsListed) -> None:
        """Show the fresh list."""
        self.watching.show_runs(message.runs)

    def on_box_runs_stale(self, _message: RunsStale) -> None:
        """The runs changed: list them again."""
        self.watching.refresh_runs()

    def on_runs_list_chosen(self, message: RunsList.Chosen) -> None:
        """Switch to the chosen run."""
        if message.run.run_dir != self.state.run_dir:
            self.watching.watch(message.run.run_dir)

    def on_runs_list_left(self, _message: RunsList.Left) -> None:
        """Esc in the runs list, with no filter to clear: back to the log."""
        self.log_pane.log_view.focus()

    # ------------------------------------------------------------------ results: actions

    def on_box_done(self, message: Done) -> None:
        """An action succeeded."""
        self.outcomes.done(message.line)

    def on_box_notice(self, message: Notice) -> None:
        """A worker has something to say."""
        if message.bell:
            self.outcomes.ports.alert(message.line, severity=message.severity)
        else:
            self.outcomes.ports.notify(message.line, message.severity, message.timeout)

    @result_of("refresh_safety")
    def on_box_safety_judged(self, message: SafetyJudged) -> None:
        """A fresh verdict on the weights."""
        self.weights.show(message.safety)
        self.outcomes.succeeded("refresh_safety")

    def on_box_safety_stale(self, _message: SafetyStale) -> None:
        """The weights may have moved: judge them again."""
        self.weights.refresh()

    def on_box_transferred(self, message: Transferred) -> None:
        """A transfer moved on."""
        self.weights.transferred(message)

    def on_box_instance_read(self, message: InstanceRead) -> None:
        """What the provider says about the instance."""
        self.instance.read(message.instance)

    def on_box_instance_destroyed(self, _message: InstanceDestroyed) -> None:
        """The destroy is confirmed: nothing watches, connects or asks about it any more."""
        self.watching.stop()
        self.link.gone()
        self.header.show_money(self.money_text())
        self.weights.refresh()  # the copies of what the box last listed
        self._title_changed()

    def on_box_instance_stale(self, _message: InstanceStale) -> None:
        """The instance changed: ask the provider again."""
        self.instance.refresh()

    @result_of("cost_figures")
    def on_box_instance_figures(self, message: InstanceFigures) -> None:
        """Ask before stopping or destroying the instance."""
        self.instance.ask(message)

    @result_of("set_guard")
    def on_box_guard_read(self, message: GuardRead) -> None:
        """The guard's state after an action."""
        self.guard.show(message.guard)

    @result_of("resume_figures")
    def on_box_resume_figures(self, message: ResumeFigures) -> None:
        """Ask before starting the instance and resuming."""
        self.resume.confirm(message.instance)

    @result_of("resume")
    def on_box_resume_done(self, message: ResumeDone) -> None:
        """The run was relaunched: the new connection is the control connection and the
        run is watched (a watcher on it reconnects at once, off the old address)."""
        resumed = message.resumed
        name = resumed.run_dir.rstrip("/").rsplit("/", 1)[-1]
        watching = self.watching.watcher if self.state.run_dir == resumed.run_dir else None
        self.on_box_connected(Connected(resumed.transport, message.project, message.runs,
                                        name, []))
        if watching is not None and watching is self.watching.watcher:
            watching.reconnect_now()
        self.instance.refresh()

    # ------------------------------------------------------------------ results: launch

    @result_of("check_box")
    def on_box_preflight_read(self, message: PreflightRead) -> None:
        """The box's preflight, once connected."""
        self.launching.preflight_read(message.report)

    @result_of("run_checks")
    def on_box_checks_done(self, message: ChecksDone) -> None:
        """Findings for the launch form."""
        self.launching.show_checks(message)

    @result_of("run_checks")
    def on_box_hub_checked(self, message: HubChecked) -> None:
        """Whether the box reaches the Hub, for the launch form."""
        self.launching.hub_checked(message)

    @result_of("probe")
    def on_box_estimated(self, message: Estimated) -> None:
        """The time estimate, for the launch form."""
        self.launching.estimate.show(message)

    @result_of("start_launch")
    def on_box_launched(self, message: Launched) -> None:
        """A run was started: watch it."""
        self.watching.watch(self.launching.launched(message))
        self.watching.refresh_runs()

    @result_of("profile")
    def on_box_profiled(self, message: Profiled) -> None:
        """The profile's verdict card."""
        self.launching.profiled(message)

    # ------------------------------------------------------------------ results: log

    def on_log_pane_wants_older(self, message: LogPane.WantsOlder) -> None:
        """The pane was scrolled to its top: fetch what came before."""
        message.stop()
        self.logs.wants_older()

    @result_of("fetch_older")
    def on_box_older_log(self, message: OlderLog) -> None:
        """Older lines, above the others."""
        self.logs.older(message)

    def on_log_pane_searched(self, message: LogPane.Searched) -> None:
        """A search in the pane also runs over the whole log, on the box."""
        message.stop()
        self.logs.search(message.term)

    @result_of("search_whole_log")
    def on_box_log_searched(self, message: LogSearched) -> None:
        """How many lines of the whole log hold the term."""
        self.logs.searched(message)
