"""The link to one box, mixed into ``tui.box.view.BoxView``: the first connection (retried
with backoff until it works, the user presses Escape or quits), the control connection
that actions use, and one truth about the link for the watcher and the actions together.

The watcher reconnects on its own; when it comes back after a drop the control connection
is opened again too, so runs list, weights badge and actions recover without ``r``. While
the link is down the panes are dimmed and say how old their data is."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from textual import work

from remote.link import retry_delay, worth_retrying
from remote.runs import box_runs
from remote.transport import Transport
from remote.watch import ConnectionEvent
from trainer.text import format_duration, one_line
from tui.dialogs.confirm import host_key_dialog

#: Watcher states that mean the data on screen is getting old.
DOWN_STATES = ("stale", "reconnecting")
#: How long the control connection waits for the follower to say where the trainer
#: runs before it bootstraps by itself (a box the follower cannot start on).
READY_TIMEOUT = 60.0


class BoxLink:
    """Connecting and the link state of a box view (a mixin: ``self`` is the ``BoxView``)."""

    def init_link(self) -> None:
        """State kept about the link."""
        self.transport: Transport | None = None
        #: When the data on screen was last known fresh, while the link is down.
        self.down_since: float | None = None
        #: Set while a connection is being retried; Escape stops, r retries now.
        self.retrying = False
        self._retry_wake = threading.Event()
        self._retry_stop = threading.Event()
        self._accepted_keys: set[str] = set()
        self._asking = threading.Lock()

    # ------------------------------------------------------------------ connecting

    @work(thread=True, exclusive=True, exit_on_error=False, group="connect", name="connect")
    def connect(self) -> None:
        """Open the control connection once the watcher's follower said where the
        trainer runs (the run is on screen first; bootstrapping here only when it could
        not say); on failure try again with backoff."""
        spec = self.spec

        def progress(line: str) -> None:
            self.tell(self.Progress(line))

        attempt = 0
        self._retry_stop.clear()
        while True:
            try:
                notes: list[str] = []
                project, run = self.project, spec.run
                if spec.demo and attempt == 0:
                    from tui.demo import start_demo

                    project, run = start_demo(progress)
                    self.project = project
                    self._app.call_from_thread(self.watch_run,
                                               f"{project.rstrip('/')}/{run}" if run else None)
                self.connector.wait_ready(READY_TIMEOUT)
                transport = self.open_transport(progress, notes, early=False)
            except Exception as exc:  # noqa: BLE001 - any failure is shown, never raised
                if attempt == 0:  # its retries would contradict the badge: it restarts
                    self._app.call_from_thread(self.stop_watcher)  # once connected
                if not self._wait_retry(exc, attempt, "cannot connect"):
                    return
                attempt += 1
                continue
            self.tell(self.Connected(transport, project, None, run, notes))
            return

    def _wait_retry(self, error: BaseException, attempt: int, what: str) -> bool:
        """Tell the UI about a failed try and wait before the next; ``False`` when not
        to try again (the error needs a person, or Escape or quitting stopped it)."""
        retry = worth_retrying(error) and not self._retry_stop.is_set()
        delay = retry_delay(attempt) if retry else None
        self.tell(self.ConnectFailed(one_line(error), what, delay, attempt + 1))
        if delay is None:
            return False
        self._retry_wake.clear()
        self._retry_wake.wait(delay)
        if self._retry_stop.is_set():  # Escape or quitting: say it is not retried
            self.tell(self.ConnectFailed(one_line(error), what, None, attempt + 1))
            return False
        return True

    def stop_retrying(self) -> bool:
        """Escape: give up retrying; ``True`` when a retry was going on."""
        if not self.retrying:
            return False
        self._retry_stop.set()
        self._retry_wake.set()
        return True

    def open_transport(self, progress: Callable[[str], None],
                       notes: list[str] | None = None, early: bool = True,
                       gate: bool = False) -> Transport:
        """A new connection to the box (worker threads only: it blocks), ready to run
        ``python3 -m trainer`` (bootstrapped unless the connector knows where the trainer
        runs; ``gate``: not at all, the watcher's follower starts through the gate).
        ``early``: the connection opened while the app started, if any (the watcher's)."""
        if self.spec.kind != "local":
            progress(f"connecting to {self.spec.title}")
            if self.connector.trainer_prefix is None and not gate:
                progress("bootstrapping the box (python, trainer upload)")
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

    def on_box_view_connect_failed(self, message: Any) -> None:
        """Show why connecting failed and when it is tried again."""
        self.retrying = message.retry_in is not None
        line = f"{message.what}: {message.error}"
        badge = self.conn_badge
        badge.show_error(message.error, message.retry_in, message.attempt)
        if message.attempt == 1:
            next_step = ("retrying every few seconds (Escape: stop, r: now)"
                         if self.retrying else "r tries again")
            self.app.notify(f"{line} — {next_step}", title=self.spec.title,
                            severity="error", timeout=10)
        else:
            self.app.record(f"{line} (try {message.attempt})", self.spec.title, "note")

    def reconnect(self) -> None:
        """r: reconnect now, the watcher and the control connection together."""
        if self.retrying:
            self._retry_wake.set()
            return
        if self.transport is None:
            self.connect()
            return
        if self.watcher is not None:
            self.watcher.reconnect_now()
        self.reconnect_control()

    @work(thread=True, exclusive=True, exit_on_error=False, group="connect",
          name="reconnect_control")
    def reconnect_control(self) -> None:
        """A fresh connection for actions and the runs list (the old one may have died
        with the link), retried with backoff while the box cannot be reached."""
        attempt = 0
        self._retry_stop.clear()
        while True:
            try:
                transport = self.open_transport(lambda line: None)
                runs = box_runs(transport, self.project, self.connector)
            except Exception as exc:  # noqa: BLE001 - shown, then retried
                if not self._wait_retry(exc, attempt, "reconnecting"):
                    return
                attempt += 1
                continue
            run = self.run_dir.rstrip("/").rsplit("/", 1)[-1] if self.run_dir else None
            self.tell(self.Connected(transport, self.project, runs, run, []))
            return

    # ------------------------------------------------------------------ link state

    def on_link_event(self, event: ConnectionEvent) -> None:
        """The watcher's view of the link: dim on a drop, recover on its return."""
        self.conn_badge.show(event)
        if event.state in DOWN_STATES:
            if self.down_since is None:
                self.link_down(event.detail, self.clock() - event.silent_for)
        elif event.state in ("live", "polling") and self.down_since is not None:
            self.link_up()
            self.reconnect_control()

    def link_down(self, detail: str, since: float) -> None:
        """The data on screen stops being fresh at ``since``."""
        self.down_since = since
        self.add_class("-offline")
        self.app.record(f"link lost: {detail or 'no data'}", self.spec.title, "warning")
        self.draw_link()
        self.draw_status_row()

    def link_up(self) -> None:
        """Data flows again."""
        if self.down_since is not None:
            gap = format_duration(self.clock() - self.down_since)
            self.app.record(f"link back after {gap}", self.spec.title, "information")
            self.last_line = (f"link back after {gap} without data", "information")
        self.down_since = None
        self.remove_class("-offline")
        self.draw_link()
        self.draw_status_row()

    def stale_words(self) -> str:
        """``last data 34s ago`` while the link is down, else empty."""
        if self.down_since is None:
            return ""
        return f"last data {format_duration(max(0.0, self.clock() - self.down_since))} ago"

    def draw_link(self) -> None:
        """Say on every pane how old its data is (empty when the link is up)."""
        words = self.stale_words()
        subtitle = f"⚠ {words}" if words else ""
        for pane in self.query(".data-pane"):
            pane.border_subtitle = subtitle
        self.header.show_stale(words)
