"""Give an instance a lease from the fleet (``gpurent lease TARGET DURATION``): how long it
may still bill (focused), and what ends it (stop, or destroy where the weights are safe
off the box). Enter sets it. The lease it has is shown, with its deadline on this
laptop's clock and what is left; an empty duration on a leased instance asks before
clearing it (the question starts on Cancel: one Enter never deletes a lease)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Button, Input, Select, Static

from remote.fleet import Lease, parse_duration
from tui.dialogs.base import Dialog
from tui.dialogs.confirm import ConfirmDialog
from tui.fmt import safe
from tui.widgets.field import Field

#: What the dialog answers: seconds from now (``None``: clear the lease), and ``then``.
LeaseAnswer = tuple[float | None, str]


class LeaseDialog(Dialog[LeaseAnswer | None]):
    """Asks for ``target``'s lease; ``lease`` is the one it has (``None``: none).
    ``can_stop``: the provider can stop an instance (else only destroy ends the billing)."""

    BINDINGS = [Binding("enter", "set", "Set", show=False)]

    def __init__(self, target: str, lease: Lease | None, can_stop: bool = True) -> None:
        super().__init__(f"Lease for {target}")
        self.target = target
        self.lease = lease
        self.now = "no lease" if lease is None else f"lease {lease.deadline_words()} " \
            f"({lease.left_words()})"
        self.can_stop = can_stop

    def compose_body(self) -> ComposeResult:
        """What a lease does, the lease now, the duration and the action."""
        what = Text()
        what.append_text(safe(self.target, 60, "bold"))
        what.append(": ")
        what.append_text(safe(self.now, 200))
        what.append(". Once the lease runs out, `gpurent watchdog` ends the billing through "
                    "the provider's API (from this laptop or wherever it runs), and an armed "
                    "guard on the box does too. A destroy happens only where the weights "
                    "are safe off the box; else it stops.")
        yield Static(what, classes="body", id="what")
        yield Field(placeholder="bill for at most 6h, 90m, 1h30m, 2d from now" +
                    (" (a new lease replaces it; empty: clear it)" if self.lease else ""),
                    id="duration")
        then = [("destroy the instance where the weights are safe (else stop)", "destroy")]
        if self.can_stop:
            then.insert(0, ("stop the instance (disk kept, cheap)", "stop"))
        now = self.lease.then if self.lease is not None and \
            self.lease.then in [v for _, v in then] else then[0][1]
        yield Select(then, value=now, allow_blank=False, id="then")

    def compose_buttons(self) -> ComposeResult:
        """Set it."""
        yield Button("Set lease", id="set", variant="primary")

    def outcome(self, result: LeaseAnswer | None) -> str:
        """Cancelled, or what was set."""
        if result is None:
            return "cancelled"
        seconds, then = result
        return "confirmed: no lease" if seconds is None else \
            f"confirmed: lease {seconds / 3600:g} h, then {then}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the field sets the lease."""
        event.stop()
        self.action_set()

    def action_set(self) -> None:
        """Set (or clear) the lease; a duration that is not one is said, not set."""
        text = self.query_one("#duration", Input).value.strip()
        try:
            seconds = parse_duration(text) if text else None
        except ValueError as exc:
            self.notify(str(exc), severity="error", markup=False)
            return
        then = str(self.query_one("#then", Select).value)
        if seconds is not None or self.lease is None:
            self.dismiss((seconds, then))
            return
        body = Text()
        body.append_text(safe(self.target, 60, "bold"))
        body.append(f": {self.now}. Clearing it leaves nothing to end its billing at that "
                    "time.")
        def cleared(yes: bool | None) -> None:
            if yes:
                self.dismiss((None, then))

        self.app.push_screen(ConfirmDialog("Clear the lease?", body, "Clear the lease"),
                             cleared)

    def button_pressed(self, button_id: str) -> None:
        """Set lease."""
        if button_id == "set":
            self.action_set()
