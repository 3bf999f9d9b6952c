"""How the actions of one box end on screen: an action in progress is in the status row
until its worker ends; a success is one line (notification, status row, history); a
failure is one line with the next step (``tui.box.failures.describe``), louder for the
worst, and a background check that fails the same way again is only kept in the events
history."""

from __future__ import annotations

from collections.abc import Callable

from tui.box.failures import BACKGROUND, Failure
from tui.box.parts import handles
from tui.box.ports import Done, Notice, Ports


class Outcomes:
    """The status row's actions and the last outcome of one box. ``redraw`` draws the
    status row again."""

    def __init__(self, ports: Ports, redraw: Callable[[], None]) -> None:
        self.ports = ports
        self.redraw = redraw
        #: Background worker -> the line of its last failure (a repeat is not notified).
        self._background: dict[str, str] = {}

    def begin(self, name: str, label: str) -> None:
        """Action ``name`` (its worker's name) starts: show it in the status row."""
        state = self.ports.state
        state.activities.start(name, label, state.clock())
        self.redraw()

    def end(self, name: str) -> None:
        """Worker ``name`` ended (well or not): it leaves the status row."""
        if self.ports.state.activities.finish(name) is not None:
            self.redraw()

    @handles(Done, take=("line",))
    def done(self, line: str) -> None:
        """An action succeeded: say so (notification, status row, history)."""
        self.ports.state.say(line)
        self.ports.notify(line)
        self.redraw()

    @handles(Notice)
    def notice(self, message: Notice) -> None:
        """A worker has something to say: a notification (with the bell: an alert)."""
        if message.bell:
            self.ports.alert(message.line, severity=message.severity)
        else:
            self.ports.notify(message.line, severity=message.severity,
                              timeout=message.timeout)

    def failed(self, name: str, failure: Failure) -> bool:
        """Put the failure of ``name`` on screen: a notification (with the bell for the
        worst), the status row and the events history. ``False`` when it only repeats
        the last failure of a background check (then it is kept in the history only)."""
        if name in BACKGROUND:
            if self._background.get(name) == failure.line:
                self.ports.record(failure.line)
                return False
            self._background[name] = failure.line
        self.ports.state.say(failure.line, failure.severity)
        if failure.bell:
            self.ports.alert(failure.line, severity=failure.severity)
        else:
            self.ports.notify(failure.line, severity=failure.severity, timeout=12)
        self.redraw()
        return True

    def succeeded(self, name: str) -> None:
        """Background check ``name`` worked: its next failure is news again."""
        self._background.pop(name, None)
