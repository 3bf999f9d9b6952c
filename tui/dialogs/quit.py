"""Quitting: what stays running and what it costs, in the words of each box's state, with
what the state suggests doing first (arm the guard, stop an idle instance, stop the demo)."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Static

from tui.dialogs.base import Dialog


class QuitDialog(Dialog[str | None]):
    """Dismisses ``"quit"``, the id of an offer, or ``None`` (Cancel). The focus starts
    on the quit button, so that Enter quits (``q``, Enter), as the help says: quitting
    only detaches, and what keeps running and billing is said above it."""

    AUTO_FOCUS = "#quit"

    def __init__(self, title: str, body: Text, offers: list[tuple[str, str]]) -> None:
        super().__init__(title)
        self.body = body
        self.offers = offers

    def compose_body(self) -> ComposeResult:
        """What each box leaves behind."""
        yield Static(self.body, classes="body", id="body")

    def compose_buttons(self) -> ComposeResult:
        """The offers, then quit."""
        for offer_id, label in self.offers:
            yield Button(label, id=offer_id, variant="primary")
        yield Button(self.title_text, id="quit", variant="warning")

    def outcome(self, result: str | None) -> str:
        """Cancelled, quit, or the offer taken."""
        labels = dict(self.offers)
        return "cancelled" if result is None else f"chose {labels.get(result, result)}"

    def button_pressed(self, button_id: str) -> None:
        """Quit or take an offer."""
        self.dismiss(button_id)
