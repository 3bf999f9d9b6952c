"""Arm the guard: when (the run ends, or the GPUs idle) then (stop or destroy the
instance; destroy only where the provider cannot stop)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Input, Select, Static

from tui.dialogs.base import Dialog


class GuardDialog(Dialog[tuple[str, str, float | None] | None]):
    """Dismisses ``(when, then, max_hours)`` or ``None``. ``can_stop``: the provider can
    stop an instance (Lambda cannot: destroy is the only choice there)."""

    def __init__(self, title: str, can_stop: bool = True) -> None:
        super().__init__(title)
        self.can_stop = can_stop

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
        yield Input(placeholder="hard limit in hours (empty: none)", id="max-hours")

    def compose_buttons(self) -> ComposeResult:
        """Arm."""
        yield Button("Arm guard", id="arm", variant="warning")

    def outcome(self, result: tuple[str, str, float | None] | None) -> str:
        """Cancelled, or what was armed."""
        if result is None:
            return "cancelled"
        when, then, hours = result
        limit = f", at most {hours:g} h" if hours is not None else ""
        return f"confirmed: when {when}, then {then}{limit}"

    def button_pressed(self, button_id: str) -> None:
        """Arm with the chosen values (a bad limit is shown, not armed)."""
        if button_id != "arm":
            return
        raw = self.query_one("#max-hours", Input).value.strip()
        try:
            hours = float(raw) if raw else None
        except ValueError:
            self.notify("the hard limit must be a number of hours", severity="error")
            return
        self.dismiss((str(self.query_one("#when", Select).value),
                      str(self.query_one("#then", Select).value), hours))
