"""What a part of the box view is given, instead of the view itself: ``Ports`` (the box's
facts, a thread-safe way to post a message to the view, a way to start a worker thread,
the app for dialogs and notifications) and ``Panes`` (the view's widgets). Also the
messages any part may post: a worker says what it found by posting one, and the method
marked for it (``tui.box.parts.handles``) runs on the UI thread. Nothing here blocks a
worker on the UI loop."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol, cast

from textual.message import Message
from textual.notifications import SeverityLevel
from textual.widget import Widget

from tui.box.parts import PartMessage
from tui.box.state import BoxState
from tui.widgets.badges import ConnectionBadge, WeightsBadge
from tui.widgets.gpu import GpuPane
from tui.widgets.header import RunHeader
from tui.widgets.logpane import LogPane
from tui.widgets.metrics import MetricsPane
from tui.widgets.runs import RunsList
from tui.widgets.textline import TextLine


class Work(Protocol):
    """Starts ``fn`` in a worker thread named ``name`` (the name its failure is reported
    under); ``label``: shown in the status row while it runs; ``exclusive``: cancels
    the group's other workers."""

    def __call__(self, name: str, fn: Callable[[], object], *, group: str,
                 label: str | None = None, exclusive: bool = True) -> None: ...


class Screen(Protocol):
    """What the parts use of the app: notifications, the events history, dialogs."""

    def notify(self, message: str, *, title: str = "",
               severity: SeverityLevel = "information",
               timeout: float | None = None) -> None: ...

    def record(self, message: str, title: str = "", severity: str = "note") -> None: ...

    def alert(self, message: str, title: str = "", severity: SeverityLevel = "error"
              ) -> None: ...

    def push_screen(self, screen: Any, callback: Any = None) -> Any: ...


def host(widget: Widget) -> Screen:
    """The app ``widget`` runs in, as the parts use it: ``tui.app.GpurentApp``, which
    this package cannot import (it imports this package), so the type is told here."""
    return cast(Screen, widget.app)


@dataclass(frozen=True)
class Ports:
    """The box's ``state``; ``post`` (any thread: ``False`` once the view is gone);
    ``work``; ``app`` (the UI thread only), reached through the methods below, which
    title every line with the box."""

    state: BoxState
    post: Callable[[Message], bool]
    work: Work
    app: Callable[[], Screen]

    def notify(self, line: str, severity: SeverityLevel = "information",
               timeout: float | None = None) -> None:
        """A notification about this box (kept in the events history)."""
        self.app().notify(line, title=self.state.spec.title, severity=severity,
                          timeout=timeout)

    def record(self, line: str, severity: str = "note") -> None:
        """A line for the events history only."""
        self.app().record(line, self.state.spec.title, severity)

    def alert(self, line: str, severity: SeverityLevel = "error") -> None:
        """A notification with the bell."""
        self.app().alert(line, self.state.spec.title, severity=severity)

    def ask(self, screen: Any, answered: Callable[[Any], None] | None = None) -> None:
        """Show a dialog (its outcome goes into the events under this box's title);
        ``answered`` gets its result."""
        if hasattr(screen, "about"):
            screen.about = self.state.spec.title
        self.app().push_screen(screen, answered)


class Panes:
    """The widgets of one box view, each found on first use (they exist once the view
    is composed, and are never replaced), so that a worker thread never queries the DOM."""

    def __init__(self, view: Widget) -> None:
        self._view = view

    @cached_property
    def header(self) -> RunHeader:
        """The run header."""
        return self._view.query_one(RunHeader)

    @cached_property
    def conn_badge(self) -> ConnectionBadge:
        """The connection badge."""
        return self._view.query_one(ConnectionBadge)

    @cached_property
    def weights_badge(self) -> WeightsBadge:
        """The weights badge."""
        return self._view.query_one(WeightsBadge)

    @cached_property
    def guard_badge(self) -> TextLine:
        """The guard badge."""
        return self._view.query_one("#guard-badge", TextLine)

    @cached_property
    def status_row(self) -> TextLine:
        """The status row under the badges."""
        return self._view.query_one("#status-row", TextLine)

    @cached_property
    def runs(self) -> RunsList:
        """The runs list."""
        return self._view.query_one(RunsList)

    @cached_property
    def metrics(self) -> MetricsPane:
        """The metrics charts."""
        return self._view.query_one(MetricsPane)

    @cached_property
    def gpu(self) -> GpuPane:
        """The GPU and host pane."""
        return self._view.query_one(GpuPane)

    @cached_property
    def log(self) -> LogPane:
        """The log pane."""
        return self._view.query_one(LogPane)

    def data_panes(self) -> list[Widget]:
        """The panes that show data from the box (dimmed while the link is down)."""
        return list(self._view.query(".data-pane"))

    def set_offline(self, offline: bool) -> None:
        """Dim the data panes (the link is down) or light them again."""
        self._view.set_class(offline, "-offline")


@dataclass
class Progress(PartMessage, bubble=False, namespace="box"):
    """A connecting, bootstrap or resume step, for the connection badge."""

    line: str


@dataclass
class Done(PartMessage, bubble=False, namespace="box"):
    """An action succeeded: said in a notification, the status row and the history."""

    line: str


@dataclass
class Notice(PartMessage, bubble=False, namespace="box"):
    """A line for a notification from a worker; ``bell``: with the terminal bell."""

    line: str
    severity: SeverityLevel = "information"
    timeout: float | None = None
    bell: bool = False


@dataclass
class RunsStale(PartMessage, bubble=False, namespace="box"):
    """The project's runs changed (a stop): list them again."""


@dataclass
class SafetyStale(PartMessage, bubble=False, namespace="box"):
    """The weights may have left the box (a push, a pull): judge them again."""


@dataclass
class InstanceStale(PartMessage, bubble=False, namespace="box"):
    """The instance changed (a stop, a destroy, a start): ask the provider again."""


@dataclass
class PauseWatching(PartMessage, bubble=False, namespace="box"):
    """Stop the watcher, whose own retries would contradict the badge: the first
    connection failed (it starts again once connected), or the instance was taken away
    (its address is dead; R starts it again)."""
