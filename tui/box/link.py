"""The link to one box: the connector (one per box), the first connection (retried with
backoff until it works, the user presses Escape or quits), the control connection that
actions use, host-key questions, and one truth about the link for the watcher and the
actions together.

The watcher reconnects on its own; when it comes back after a drop the control connection
is opened again too, so runs list, weights badge and actions recover without ``r``. While
the link is down the panes are dimmed and say how old their data is."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote.billing import connector_to
from remote.link import changed_host_key, retry_delay, whole_line, worth_retrying
from remote.runs import box_runs
from remote.transport import Transport
from remote.watch import ConnectionEvent
from trainer.text import format_duration, one_line
from tui.box.parts import PartMessage, handles
from tui.box.ports import Notice, Panes, PauseWatching, Ports, Progress
from tui.dialogs.confirm import forget_key_dialog, host_key_dialog

#: Watcher states that mean the data on screen is getting old.
DOWN_STATES = ("stale", "reconnecting", "blocked")
#: How long the control connection waits for the follower to say where the trainer
#: runs before it bootstraps by itself (a box the follower cannot start on).
READY_TIMEOUT = 60.0
#: Seconds between questions to the provider about the instance while the link is down.
ASK_EVERY = 15.0


@dataclass
class Connected(PartMessage, bubble=False, namespace="box"):
    """The control connection is up; ``runs`` were listed in ``project`` (``None``: the
    watcher's follower lists them); ``run``: the run asked for, by name."""

    transport: Transport
    project: str
    runs: list[Any] | None
    run: str | None
    notes: list[str]


@dataclass
class ConnectFailed(PartMessage, bubble=False, namespace="box"):
    """A try to connect failed: ``error`` in one line, ``retry_in`` seconds to the next
    try (``None``: not retried), ``attempt`` the try that failed; ``declined``: the user
    did not trust the box's host key (asked again only after r)."""

    error: str
    what: str
    retry_in: float | None
    attempt: int
    declined: bool = False
    #: A host key that changed: its name and ``known_hosts`` (forgetting it is offered).
    forget: tuple[str, str] | None = None


@dataclass
class DemoStarted(PartMessage, bubble=False, namespace="box"):
    """The demo run was launched in ``project``: watch ``run_dir``."""

    project: str
    run_dir: str | None


@dataclass
class HostKeyAsked(PartMessage, bubble=False, namespace="box"):
    """A connection met an unknown host key: ask the user; ``answered`` gets the
    dialog's result (on the UI thread; the asking thread waits for it)."""

    host: str
    key_type: str
    fingerprint: str
    answered: Callable[[bool | None], None]


class Link:
    """Connecting and the link state of one box, with its ``connector``. ``redraw``
    draws the status row again; ``again`` connects again (r)."""

    def __init__(self, ports: Ports, panes: Panes, redraw: Callable[[], None],
                 again: Callable[[], None] = lambda: None) -> None:
        self.ports = ports
        self.panes = panes
        self.redraw = redraw
        self.again = again
        #: Host-key names whose "forget the old key?" dialog is open.
        self._offering: set[str] = set()
        #: When the provider was last asked about the instance while the link was down.
        self._asked_at: float | None = None
        spec = ports.state.spec
        # A box named by its instance is located anew on every (re)connection; a box
        # whose connection began before the app (tui.main.connect_early) keeps its own.
        self.connector = spec.connector or connector_to(
            None if spec.kind == "local" else spec.target, port=spec.port,
            accept_new=spec.accept_new, ssh_options=dict(spec.ssh_options),
            python=spec.python, base_url=spec.provider_url, provider=spec.client)
        self.connector.ask_unknown = self.ask_host_key
        self._retry_wake = threading.Event()
        self._retry_stop = threading.Event()
        #: Set when the app ends: no more questions, no more retries.
        self._closing = threading.Event()
        self._accepted_keys: set[str] = set()
        #: Host keys the user did not trust: not asked about again until r.
        self._declined_keys: set[str] = set()
        self._asking = threading.Lock()

    # ------------------------------------------------------------------ connecting

    def connect(self) -> None:
        """Open the control connection (in a worker, retried with backoff)."""
        self.ports.state.not_connected = None
        self.ports.work("connect", self._connect, group="connect")

    def _connect(self) -> None:
        """Open the control connection once the watcher's follower said where the
        trainer runs (the run is on screen first; bootstrapping here only when it could
        not say); on failure try again with backoff."""
        state, post = self.ports.state, self.ports.post

        def progress(line: str) -> None:
            post(Progress(line))

        attempt = 0
        self._retry_stop.clear()
        while True:
            try:
                notes: list[str] = []
                project, run = state.project, state.spec.run
                if state.spec.demo and attempt == 0:
                    from tui.demo import start_demo

                    project, run = start_demo(progress)
                    post(DemoStarted(project, state.run_path(run, project) if run else None))
                self.connector.wait_ready(READY_TIMEOUT)
                transport = self.open_transport(progress, notes, early=False)
            except Exception as exc:  # noqa: BLE001 - any failure is shown, never raised
                if attempt == 0:
                    post(PauseWatching())
                if not self._wait_retry(exc, attempt, "cannot connect"):
                    return
                attempt += 1
                continue
            post(Connected(transport, project, None, run, notes))
            return

    def _wait_retry(self, error: BaseException, attempt: int, what: str) -> bool:
        """Tell the UI about a failed try and wait before the next; ``False`` when not
        to try again (the error needs a person, or Escape or quitting stopped it)."""
        retry = worth_retrying(error) and not self._retry_stop.is_set() \
            and self.ports.state.taken_away is None  # its address is dead
        delay = retry_delay(attempt) if retry else None
        declined = not retry and bool(self._declined_keys)
        self.ports.post(ConnectFailed(whole_line(error), what, delay, attempt + 1, declined,
                                      changed_host_key(error)))
        if delay is None:
            return False
        self._retry_wake.clear()
        self._retry_wake.wait(delay)
        if self._retry_stop.is_set():  # Escape or quitting: say it is not retried
            self.ports.post(ConnectFailed(whole_line(error), what, None, attempt + 1))
            return False
        return True

    def stop_retrying(self) -> bool:
        """Escape: give up retrying; ``True`` when a retry was going on."""
        if not self.ports.state.retrying:
            return False
        self._retry_stop.set()
        self._retry_wake.set()
        return True

    def retry_now(self) -> bool:
        """r while a retry waits: try at once; ``False`` when none waits."""
        if not self.ports.state.retrying:
            return False
        self._retry_wake.set()
        return True

    def forget_declined(self) -> None:
        """r: a host key the user did not trust is asked about again (never waits for
        ``_asking``: a question may be on screen, waiting for this very thread)."""
        self._declined_keys.clear()

    def progress(self, line: str) -> None:
        """Say a step of opening the connection (any thread)."""
        self.ports.post(Progress(line))

    def open_transport(self, progress: Callable[[str], None],
                       notes: list[str] | None = None, early: bool = True,
                       gate: bool = False) -> Transport:
        """A new connection to the box (worker threads only: it blocks), ready to run
        ``python3 -m trainer`` (bootstrapped unless the connector knows where the trainer
        runs; ``gate``: not at all, the watcher's follower starts through the gate).
        ``early``: the connection opened while the app started, if any (the watcher's)."""
        spec = self.ports.state.spec
        if spec.kind != "local":
            progress(f"connecting to {spec.title}")
            if self.connector.trainer_prefix is None and not gate:
                progress("bootstrapping the box (python, trainer upload)")
        return self.connector.open(progress, notes, early=early, gate=gate)

    def watcher_transport(self) -> Transport:
        """The watcher's own connection (called again after a drop, from its thread);
        its follower starts through the gate."""
        return self.open_transport(self.progress, gate=True)

    def ask_host_key(self, host: str, key_type: str, fingerprint: str) -> bool:
        """Asked by an SSH thread about an unknown host key: the dialog is shown on the
        UI thread and this thread waits for the answer. A key trusted once in this
        session is trusted again on reconnect; the watcher's and the control
        connection's questions about the same key are asked once. A key the user did
        not trust is not asked about again until r (``forget_declined``)."""
        with self._asking:
            if fingerprint in self._accepted_keys:
                return True
            if fingerprint in self._declined_keys:
                return False
            answer = self._ask(host, key_type, fingerprint)
            if answer:
                self._accepted_keys.add(fingerprint)
            elif not self._closing.is_set():
                self._declined_keys.add(fingerprint)
            return answer

    def _ask(self, host: str, key_type: str, fingerprint: str) -> bool:
        answered = threading.Event()
        answer: list[bool] = [False]

        def done(result: bool | None) -> None:
            answer[0] = bool(result)
            answered.set()

        post = self.ports.post
        post(Progress(f"waiting for you to check {host}'s host key"))
        if not post(HostKeyAsked(host, key_type, fingerprint, done)):
            return False  # the view is gone: nobody can answer
        while not answered.wait(0.2):
            if self._closing.is_set():
                return False
        return answer[0]

    @handles(HostKeyAsked)
    def ask_user(self, asked: HostKeyAsked) -> None:
        """Show the host-key dialog; its answer goes to the thread that waits for it."""
        self.ports.ask(host_key_dialog(asked.host, asked.key_type, asked.fingerprint),
                       asked.answered)

    @handles(Progress, take=("line",))
    def show_progress(self, line: str) -> None:
        """Show a connecting step, unless the watch's link is already up: the control
        connection opens after the first status, and its steps must not make a live
        link look as if it were still connecting."""
        badge = self.panes.conn_badge
        # Nor an attempt that ends in nothing: once connecting failed for good (a host
        # key not trusted, a setting to fix), a step the stopped watcher's last try still
        # reports would hide the reason and "r tries again" (r clears it).
        if badge.state not in ("live", "polling") and self.ports.state.not_connected is None:
            badge.show_progress(line)

    @handles(ConnectFailed)
    def show_failure(self, message: ConnectFailed) -> None:
        """Show why connecting failed and when it is tried again."""
        retrying = message.retry_in is not None
        state = self.ports.state
        said = not retrying and state.not_connected == f"{message.error} (r: try again)"
        state.retrying = retrying
        state.connect_error = message.error
        if message.declined:
            state.not_connected = ("the host key was not trusted (Cancel): nothing more is "
                                   "tried; r asks again")
        elif not retrying:
            state.not_connected = f"{message.error} (r: try again)"
        line = f"{message.what}: {message.error}"
        self.panes.conn_badge.show_error(message.error, message.retry_in, message.attempt)
        if message.forget is not None:
            self.offer_forget(message.forget)
        if message.attempt == 1 and not said:  # a failure said already is not said again
            next_step = ("retrying every few seconds (Escape: stop, r: now)"
                         if retrying else "r tries again")
            self.ports.notify(f"{line} — {next_step}", severity="error", timeout=10)
        else:
            self.ports.record(f"{line} (try {message.attempt})")
        self.redraw()

    def connected(self, message: Connected) -> bool:
        """Take the new control connection (the old one is closed); ``True`` when it is
        the first."""
        state = self.ports.state
        if state.transport is not None and state.transport is not message.transport:
            self.close_transport(state.transport)
        first = state.transport is None
        state.transport = message.transport
        state.retrying = False
        state.reached = True
        state.connect_error = state.not_connected = state.taken_away = None
        state.project = message.project
        for note in message.notes:
            self.ports.notify(one_line(note), timeout=8)
        return first

    def close_transport(self, transport: Transport) -> None:
        """Close an old connection without blocking the UI."""
        self.ports.work("close_transport", transport.close, group="close", exclusive=False)

    def reconnect_control(self) -> None:
        """A fresh connection for actions and the runs list (in a worker)."""
        self.ports.work("reconnect_control", self._reconnect_control, group="connect")

    def _reconnect_control(self) -> None:
        """A fresh connection for actions and the runs list (the old one may have died
        with the link), retried with backoff while the box cannot be reached."""
        state = self.ports.state
        attempt = 0
        self._retry_stop.clear()
        while True:
            try:
                transport = self.open_transport(lambda line: None)
                runs = box_runs(transport, state.project, self.connector)
            except Exception as exc:  # noqa: BLE001 - shown, then retried
                if not self._wait_retry(exc, attempt, "reconnecting"):
                    return
                attempt += 1
                continue
            self.ports.post(Connected(transport, state.project, runs,
                                      state.run_name or None, []))
            return

    def install_needs(self) -> None:
        """Install what the follower said the box tools lack (psutil, huggingface_hub),
        in the background; what happened is one notification."""
        self.ports.work("install_needs", self._install_needs, group="needs")

    def _install_needs(self) -> None:
        box, transport = self.connector.box, self.ports.state.transport
        if not box or not box.get("missing") or transport is None:
            return
        from remote.link import install_needs

        post = self.ports.post
        notes: list[str] = []
        install_needs(transport, box, notes, self.progress)
        for note in notes:
            post(Notice(one_line(note), timeout=8))

    def shutdown(self) -> None:
        """The app ends: stop retrying and asking."""
        self._closing.set()
        self._retry_stop.set()
        self._retry_wake.set()

    def gone(self) -> None:
        """The box's instance was destroyed: no more connecting, the connection is
        closed, and the badge says so."""
        state = self.ports.state
        state.destroyed = True
        self.shutdown()
        if state.transport is not None:
            self.close_transport(state.transport)
            state.transport = None
        self.panes.conn_badge.show_ended(f"instance {state.spec.instance} destroyed")

    # ------------------------------------------------------------------ link state

    def on_event(self, event: ConnectionEvent) -> bool:
        """The watcher's view of the link: dim on a drop, recover on its return.
        ``True`` when the link went down or came back. Before the box ever answered, a
        failed try is the first connection still under way, not a link lost."""
        state = self.ports.state
        before = state.down_since
        if event.state == "blocked":  # before the box ever answered, the first
            if state.reached:           # connection's failure says it (ConnectFailed)
                self.blocked(event)
            return before != state.down_since
        if event.state in ("live", "polling"):
            state.reached = True
        elif not state.reached and event.state in DOWN_STATES:
            words = f"connecting (try {event.attempt + 1})" if event.attempt else "connecting"
            self.show_progress(f"{words}: {event.detail}" if event.detail else words)
            return False
        self.panes.conn_badge.show(event)
        if event.state in DOWN_STATES:
            if state.down_since is None:
                self.link_down(event.detail, state.clock() - event.silent_for)
        elif event.state in ("live", "polling") and state.down_since is not None:
            self.link_up()
            self.reconnect_control()
        return before != state.down_since

    def blocked(self, event: ConnectionEvent) -> None:
        """The watcher stopped trying: what is wrong needs the user (a refused login, a
        changed or untrusted host key). Said once, whole, with what to do; the panes say
        how old their data is until r."""
        state = self.ports.state
        state.retrying = False
        said = state.not_connected == f"{event.detail} (r: try again)"  # by ConnectFailed
        state.not_connected = f"{event.detail} (r: try again)"
        self.panes.conn_badge.show(event)
        if state.down_since is None:
            state.down_since = state.clock()
            self.panes.set_offline(True)
            self.draw()
        if not said:
            self.ports.notify(f"stopped reconnecting: {event.detail} — r tries again",
                              severity="error", timeout=20)
        if event.forget is not None:
            self.offer_forget(event.forget)
        self.redraw()

    def offer_forget(self, forget: tuple[str, str]) -> None:
        """A host key changed: offer to forget the old key (once while the dialog is
        open); confirmed, the old key is removed in a worker and connecting starts again,
        which then shows the new key to check."""
        name, known_hosts = forget
        if name in self._offering:
            return
        self._offering.add(name)

        def answered(yes: bool | None) -> None:
            self._offering.discard(name)
            if yes:
                self.ports.work("forget_host_key", lambda: self._forget(name, known_hosts),
                                group="forget", label=f"forgetting the old key of {name}")

        self.ports.ask(forget_key_dialog(name, known_hosts), answered)

    def _forget(self, name: str, known_hosts: str) -> None:
        from remote.transport import forget_host_key

        forget_host_key(name, known_hosts)
        self.ports.post(Notice(f"forgot the old host key of {name} in {known_hosts}; "
                               "connecting again", timeout=10))
        self.ports.app().call_from_thread(self.again)  # type: ignore[attr-defined]

    def link_down(self, detail: str, since: float) -> None:
        """The data on screen stops being fresh at ``since`` (the provider is asked about
        the instance at the next tick)."""
        self.ports.state.down_since = since
        self._asked_at = None
        self.panes.set_offline(True)
        self.ports.record(f"link lost: {detail or 'no data'}", "warning")
        self.draw()
        self.redraw()

    def link_up(self) -> None:
        """Data flows again."""
        state = self.ports.state
        if state.down_since is not None:
            gap = format_duration(state.clock() - state.down_since)
            self.ports.record(f"link back after {gap}", "information")
            state.say(f"link back after {gap} without data")
        state.down_since = None
        self.panes.set_offline(False)
        self.draw()
        self.redraw()

    def ask_provider(self) -> None:
        """While the link is down, ask the provider about the instance now and then
        (every ``ASK_EVERY`` s): an instance it took away has no box to reconnect to."""
        state = self.ports.state
        if state.down_since is None or not state.has_instance() \
                or state.taken_away is not None or state.instance_destroyed():
            return
        now = state.clock()
        if self._asked_at is None or now - self._asked_at >= ASK_EVERY:
            self._asked_at = now
            self.ports.work("ask_provider", self._ask_provider, group="ask-provider")

    def _ask_provider(self) -> None:
        """The provider's word on the instance (``InstanceRead``); a failure to ask is
        not news while the link is down (the link's words say what is known)."""
        from tui.box.instance import InstanceRead, provider

        state = self.ports.state
        try:
            instance = provider(state).get_instance(state.spec.instance)
        except Exception:  # noqa: BLE001 - asked again in ASK_EVERY s
            return
        self.ports.post(InstanceRead(instance))

    def draw(self) -> None:
        """Say on every pane how old its data is (empty when the link is up); the
        provider is asked about the instance while it is down."""
        self.ask_provider()
        if self.ports.state.taken_away is not None:
            self.panes.conn_badge.show_ended(self.ports.state.taken_away)
        words = self.ports.state.stale_words()
        subtitle = f"⚠ {words}" if words else ""
        for pane in self.panes.data_panes():
            pane.border_subtitle = subtitle
        self.panes.header.show_stale(words)
