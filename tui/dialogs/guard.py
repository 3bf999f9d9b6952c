"""Arm the guard: when (done, dead, idle=MINUTES) then (stop or destroy the instance)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Input, Select, Static

from tui.dialogs.base import Dialog


class GuardDialog(Dialog[tuple[str, str, float | None] | None]):
    """Dismisses ``(when, then, max_hours)`` or ``None``."""

    def compose_body(self) -> ComposeResult:
        """The condition, the action and an optional hard limit."""
        yield Static(Text("The guard runs on the box, detached: it acts even when this "
                          "laptop is closed. It pushes best.pt first where a Hub repo is "
                          "set, and never destroys unsafe weights."), classes="body")
        yield Select([("the run is done (completed, failed or stopped)", "done"),
                      ("the run dies (pid gone while 'running')", "dead"),
                      ("the GPUs idle for 30 minutes", "idle=30")],
                     value="done", allow_blank=False, id="when")
        yield Select([("stop the instance (disk kept, cheap)", "stop"),
                      ("destroy the instance (nothing kept)", "destroy")],
                     value="stop", allow_blank=False, id="then")
        yield Input(placeholder="hard limit in hours (empty: none)", id="max-hours")

    def compose_buttons(self) -> ComposeResult:
        """Arm."""
        yield Button("Arm guard", id="arm", variant="warning")

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
