"""``GpurentApp``: one tab per box, keys and the command palette, quitting that detaches,
and the one place that reports worker errors."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, TabbedContent, TabPane
from textual.worker import Worker, WorkerState

from remote.billing.cost import money
from remote.billing.providers import ProviderError
from remote.billing.teardown import GateRefused
from remote.checks import BoxToolFailed
from remote.guard import GuardError
from remote.transport.base import TransportError
from trainer.text import clean_text
from tui.box.actions import ActionRefused
from tui.box.view import ALERT_VERDICTS, BoxView
from tui.dialogs.confirm import ConfirmDialog
from tui.screens.help import HelpScreen
from tui.spec import BoxSpec

#: (key, action, footer label, palette description). Box actions run on the active tab.
KEYS: tuple[tuple[str, str, str, str], ...] = (
    ("l", "box('launch')", "launch", "Launch a training run (form, checks, exact command)"),
    ("p", "box('profile')", "profile", "Profile a short run: verdict, levers and $/epoch"),
    ("u", "box('push')", "push", "Push best.pt to the Hugging Face Hub from the box"),
    ("w", "box('pull')", "pull", "Pull the weights to this laptop (sha256-verified)"),
    ("x", "box('stop_run')", "stop run", "Stop training gracefully (asks first)"),
    ("i", "box('stop_instance')", "stop inst", "Stop the instance (shows what it still costs)"),
    ("D", "box('destroy')", "destroy", "Destroy the instance (type its id; needs safe weights)"),
    ("R", "box('resume')", "resume", "Start a stopped instance and resume its interrupted run"),
    ("g", "box('guard')", "guard", "Arm or disarm the guard; acknowledge its alarm"),
    ("m", "box('cycle_metric')", "metric", "Metrics: chart the next metric column"),
    ("r", "reconnect", "reconnect", "Reconnect to the box now"),
    ("f", "log('toggle_follow')", "follow", "Log: follow on/off"),
    ("slash", "log('search')", "search", "Log: search with highlights"),
    ("n", "log('next')", "next", "Log: next search match"),
    ("N", "log('previous')", "prev", "Log: previous search match"),
    ("ampersand", "log('filter')", "filter", "Log: show only matching lines"),
    ("question_mark,f1", "help", "help", "Show the keys"),
    ("q", "quit", "quit", "Detach and quit (the run keeps going)"),
)


class GpurentApp(App[int]):
    """The app. ``specs``: the boxes to open; ``clock``: the time source (frozen in
    snapshot tests); ``autoconnect``: connect on start (off for widget-only tests)."""

    TITLE = "gpurent-tui"
    CSS_PATH = "app.tcss"
    BINDINGS = [Binding(key, action, label, show=key not in ("n", "N", "R", "m"), tooltip=desc)
                for key, action, label, desc in KEYS]

    def __init__(self, specs: list[BoxSpec], clock: Callable[[], float] = time.time,
                 autoconnect: bool = True) -> None:
        super().__init__()
        self.specs = specs
        self.clock = clock
        self.autoconnect = autoconnect
        self.farewell = ""

    def compose(self) -> ComposeResult:
        """One tab per box, and the footer with the keys."""
        with TabbedContent(id="boxes"):
            for n, spec in enumerate(self.specs):
                with TabPane(spec.title, id=f"box-{n}"):
                    yield BoxView(spec, clock=self.clock, autoconnect=self.autoconnect,
                                  id=f"boxview-{n}")
        yield Footer()

    def on_mount(self) -> None:
        """With one box the tab bar is only noise."""
        if len(self.specs) <= 1:
            self.query_one(TabbedContent).add_class("-single")
        if self.box is not None:
            self.box.log_pane.log.focus()

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """The keys act on the shown box: give its log the focus."""
        box = event.pane.query_one(BoxView)
        if not box.log_pane.log.has_focus_within:
            box.log_pane.log.focus()

    # ------------------------------------------------------------------ helpers

    @property
    def box(self) -> BoxView | None:
        """The box view of the active tab."""
        tabs = self.query_one(TabbedContent)
        if not tabs.active:
            return None
        return tabs.get_pane(tabs.active).query_one(BoxView)

    def boxes(self) -> list[BoxView]:
        """Every box view."""
        return list(self.query(BoxView))

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Notifications carry text from the box: always shown without markup, with
        control characters stripped."""
        super().notify(clean_text(str(message)), title=clean_text(title),
                       severity=severity, timeout=timeout, markup=False)

    def alert(self, message: str, title: str = "", severity: str = "error") -> None:
        """A notification with the terminal bell (run ended badly, push failed)."""
        self.bell()
        self.notify(message, title=title, severity=severity, timeout=15)

    # ------------------------------------------------------------------ actions

    def action_box(self, name: str) -> None:
        """Run box action ``name`` on the active tab."""
        box = self.box
        if box is None:
            return
        try:
            getattr(box, f"do_{name}")()
        except (ActionRefused, GuardError, ProviderError) as exc:
            self.notify(str(exc), title=box.spec.title, severity="warning")

    def action_log(self, what: str) -> None:
        """Log pane commands on the active tab."""
        box = self.box
        if box is None:
            return
        pane = box.log_pane
        if what == "toggle_follow":
            pane.toggle_follow()
        elif what in ("search", "filter"):
            pane.open_input(what)
        elif what == "next":
            pane.find(forward=True)
        elif what == "previous":
            pane.find(forward=False)

    def action_reconnect(self) -> None:
        """Reconnect the active box now."""
        if self.box is not None:
            self.notify("reconnecting…", title=self.box.spec.title, timeout=3)
            self.box.reconnect()

    def action_help(self) -> None:
        """Show the keys."""
        keys = [(key.replace("question_mark", "?").replace("slash", "/")
                 .replace("ampersand", "&"), desc) for key, _, _, desc in KEYS]
        self.push_screen(HelpScreen(keys))

    async def action_quit(self) -> None:
        """Ask, then detach: the run keeps going on the box."""
        body = Text("Quit and detach? Training keeps running on the box", style="bold")
        body.append(" and every instance keeps billing until you stop it:\n")
        for box in self.boxes():
            body.append(f"\n  {box.spec.title}: ")
            price = box.price_per_hour()
            body.append(f"{money(price)}/h" if price is not None else "price unknown",
                        style="bold")
        self.push_screen(ConfirmDialog("Detach and quit", body, "Detach and quit",
                                       variant="warning"), self._quit_answered)

    def _quit_answered(self, yes: bool | None) -> None:
        if not yes:
            return
        lines = []
        for box in self.boxes():
            price = box.price_per_hour()
            cost = f" and costs {money(price)}/h" if price is not None else ""
            run = f" ({box.run_dir})" if box.run_dir else ""
            lines.append(f"Detached from {box.spec.title}{run}: the run keeps going{cost}.")
            box.shutdown()
        self.farewell = clean_text("\n".join(lines), keep_newlines=True)
        self.exit(0)

    # ------------------------------------------------------------------ events

    def on_box_view_health_changed(self, message: BoxView.HealthChanged) -> None:
        """A run completed, failed, died or stalled: notify with the bell."""
        severity = ALERT_VERDICTS.get(message.verdict, "warning")
        self.alert(f"run {message.verdict}: {message.reason}", message.box.spec.title,
                   severity=severity)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker failures are reported (as a notification)."""
        if event.state != WorkerState.ERROR:
            return
        error = event.worker.error
        title = (event.worker.name or "error").replace("_", " ")
        if isinstance(error, ActionRefused):
            self.notify(str(error), title=title, severity="warning")
        elif isinstance(error, GateRefused):
            self.alert(str(error), title=title)
        elif isinstance(error, TransportError | BoxToolFailed | ValueError | OSError
                        | TimeoutError):
            self.notify(" ".join(str(error).split()) or type(error).__name__, title=title,
                        severity="error", timeout=10)
        else:
            self.notify(f"{type(error).__name__}: {' '.join(str(error).split())}",
                        title=title, severity="error", timeout=10)

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every key's action in the command palette too."""
        yield from super().get_system_commands(screen)
        for _key, action, label, desc in KEYS:
            yield SystemCommand(label.capitalize(), desc,
                                lambda action=action: self.run_action(action))
