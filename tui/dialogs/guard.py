"""Arm the guard: when (the run ends, or the GPUs idle) then (stop or destroy the
instance; destroy only where the provider cannot stop); for an instance the user named,
optionally a lease (``gpurent lease``'s deadline, set with the arming)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Input, Select, Static

from remote.fleet import parse_duration
from tui.dialogs.base import Dialog
from tui.widgets.field import Field

#: What the dialog dismisses with: ``(when, then, max_hours, lease_seconds)``.
GuardAnswer = tuple[str, str, float | None, float | None]


class GuardDialog(Dialog[GuardAnswer | None]):
    """Dismisses ``(when, then, max_hours, lease_seconds)`` or ``None``. ``can_stop``:
    the provider can stop an instance (Lambda cannot: destroy is the only choice there);
    ``lease``: the box is an instance the user named, so a lease may be set."""

    def __init__(self, title: str, can_stop: bool = True, lease: bool = False) -> None:
        super().__init__(title)
        self.can_stop = can_stop
        self.lease = lease

    def compose_body(self) -> ComposeResult:
        """The condition, the action and an optional hard limit."""
        yield Static(Text("The guard runs on the box, detached: it acts even when this "
                          "laptop is closed. It waits for the final push where a Hub repo "
                          "is set, never destroys unsafe weights (it stops instead), and "
                          "keeps trying while the provider's API fails."), classes="body")
        yield Select([("the run ends (completed, failed, stopped, or dies / stalls)",
                       "done"),
                      ("the GPUs idle for 30 minutes", "idle=30")],
                     value="done", allow_blank=False, id="when")
        then = [("destroy the instance (nothing kept)", "destroy")]
        if self.can_stop:
            then.insert(0, ("stop the instance (disk kept, cheap)", "stop"))
        yield Select(then, value=then[0][1], allow_blank=False, id="then")
        yield Field(placeholder="hard limit in hours (empty: none)", id="max-hours")
        if self.lease:
            yield Field(placeholder="lease: end the billing after 6h, 90m, 2d (empty: none)",
                        id="lease")

    def compose_buttons(self) -> ComposeResult:
        """Arm."""
        yield Button("Arm guard", id="arm", variant="warning")

    def outcome(self, result: GuardAnswer | None) -> str:
        """Cancelled, or what was armed."""
        if result is None:
            return "cancelled"
        when, then, hours, lease = result
        limit = f", at most {hours:g} h" if hours is not None else ""
        leased = f", lease {lease / 3600:g} h" if lease is not None else ""
        return f"confirmed: when {when}, then {then}{limit}{leased}"

    def button_pressed(self, button_id: str) -> None:
        """Arm with the chosen values (a bad limit or lease is shown, not armed)."""
        if button_id != "arm":
            return
        raw = self.query_one("#max-hours", Input).value.strip()
        try:
            hours = float(raw) if raw else None
        except ValueError:
            self.notify("the hard limit must be a number of hours", severity="error")
            return
        lease = self.query_one("#lease", Input).value.strip() if self.lease else ""
        try:
            seconds = parse_duration(lease) if lease else None
        except ValueError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        self.dismiss((str(self.query_one("#when", Select).value),
                      str(self.query_one("#then", Select).value), hours, seconds))
