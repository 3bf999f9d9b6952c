"""Destroy the instance: type its id (the focus starts there) and Enter; refused while the
weights are not safe, or unknown (a box that cannot be reached), unless the user
explicitly accepts losing them (Tab, Space). The body scrolls; the buttons stay in view
(an 80x24 terminal)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.widgets import Button, Input, Static

from tui.dialogs.base import Choice, Dialog
from tui.fmt import safe
from tui.widgets.field import Field


def consequences(instance_id: str, detail: Text) -> Text:
    """The dialog's first words: the disk is deleted (said once, here), then ``detail``
    (what the instance bills now, a run still training on it)."""
    body = Text()
    body.append("Destroying instance ")
    body.append_text(safe(instance_id, 60, "bold"))
    body.append(" deletes its disk for good: the run directory, checkpoints, the dataset, "
                "everything not copied off the box.\n")
    body.append_text(detail)
    return body


class DestroyDialog(Dialog[tuple[bool, str] | None]):
    """Destroying deletes the disk and everything on it. The Destroy button is enabled
    only when the typed id matches and the weights are safe (or the override is ticked).
    Dismisses ``(override, typed id)`` for ``remote.billing.teardown``'s gate, or ``None``.
    The id box comes first and has the focus; the override follows it (Tab, Space); Enter
    there or in the id box destroys when allowed, and says why not otherwise."""

    BINDINGS = [Binding("enter", "destroy", "Destroy", show=False)]

    DEFAULT_CSS = """
    DestroyDialog #said { height: auto; max-height: 12; }
    DestroyDialog.-short #said { max-height: 5; }
    """

    def __init__(self, instance_id: str, weights_safe: bool, detail: Text,
                 unsafe: str = "", unknown: str = "") -> None:
        super().__init__("Destroy instance")
        self.instance_id = instance_id
        #: Why the weights could not be checked at all (the box not reached): the gate
        #: is then "weights unknown", passed only with the typed id and the tick.
        self.unknown = unknown
        self.weights_safe = weights_safe and not unknown
        self.detail = detail
        #: What is not safe (file names from the box, or why nothing could be checked).
        self.unsafe = unsafe

    def compose_body(self) -> ComposeResult:
        """The consequences, the weights verdict (scrolling), the id box and the
        override."""
        with VerticalScroll(id="said"):
            yield from self.said()
        yield Static(Text("Type the instance id to confirm:"))
        yield Field(placeholder=self.instance_id, id="typed")
        if not self.weights_safe:
            yield Choice("destroy without knowing: whatever is on its disk is lost"
                         if self.unknown else "destroy anyway and lose the weights",
                         id="override")

    def said(self) -> ComposeResult:
        """The weights verdict when unknown (first: what a short terminal must show),
        the consequences, and the verdict when not safe."""
        if self.unknown:
            warning = Text("Weights UNKNOWN: ", style="bold red")
            warning.append_text(safe(self.unknown, 300, "bold red"))
            warning.append(", so what its disk holds cannot be checked: weights not pushed "
                           "or pulled are lost.", style="bold red")
            yield Static(warning, classes="body")
        yield Static(consequences(self.instance_id, self.detail), classes="body")
        if self.unknown:
            return
        if not self.weights_safe:
            if self.unsafe:
                warning = Text("The weights are NOT safe off the box: ", style="bold red")
                warning.append_text(safe(self.unsafe, 200, "bold red"))
                warning.append(". Push (u) or pull (w) first.", style="bold red")
            else:
                warning = Text("The weights are NOT safe: no copy of best.pt is on the Hub "
                               "or this laptop. Push (u) or pull (w) first.", style="bold red")
            yield Static(warning, classes="body")

    def compose_buttons(self) -> ComposeResult:
        """Destroy starts disabled."""
        yield Button("Destroy", id="destroy", variant="error", disabled=True)

    def allowed(self) -> bool:
        """Whether Destroy may be pressed now."""
        typed = self.query_one("#typed", Input).value.strip() == self.instance_id
        if self.weights_safe:
            return typed
        return typed and self.query_one("#override", Choice).value

    def on_input_changed(self, _event: Input.Changed) -> None:
        """Re-check after each key."""
        self.query_one("#destroy", Button).disabled = not self.allowed()

    def on_checkbox_changed(self, _event: Choice.Changed) -> None:
        """Re-check after the override changes."""
        self.query_one("#destroy", Button).disabled = not self.allowed()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the id box destroys only when allowed."""
        event.stop()
        self.action_destroy()

    def action_destroy(self) -> None:
        """Enter: destroy when allowed, else say what is missing."""
        if self.allowed():
            self.dismiss(self.answer())
        elif self.query_one("#typed", Input).value.strip() != self.instance_id:
            self.notify(f"type the instance id {self.instance_id} to confirm",
                        severity="warning")
        else:
            self.notify("the weights are unknown: tick 'destroy without knowing' (Tab, "
                        "Space)" if self.unknown else
                        "the weights are not safe: tick 'destroy anyway' (Tab, Space) "
                        "or push (u) / pull (w) first", severity="warning")

    def outcome(self, result: tuple[bool, str] | None) -> str:
        """Cancelled, or confirmed (and whether the weights were given up)."""
        if result is None:
            return "cancelled"
        if result[0]:
            return "confirmed, weights UNKNOWN (destroy without knowing)" if self.unknown \
                else "confirmed, weights NOT safe (destroy anyway)"
        return "confirmed"

    def answer(self) -> tuple[bool, str]:
        """What the gate needs: the override and the typed id."""
        override = not self.weights_safe and self.query_one("#override", Choice).value
        return override, self.query_one("#typed", Input).value.strip()

    def button_pressed(self, button_id: str) -> None:
        """Destroy (only reachable when enabled)."""
        if button_id == "destroy" and self.allowed():
            self.dismiss(self.answer())
