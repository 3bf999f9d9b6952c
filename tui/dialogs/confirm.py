"""Yes/no questions: confirmations of stop, quit, and the unknown host key."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Static

from tui.dialogs.base import Dialog
from tui.fmt import safe


class ConfirmDialog(Dialog[bool]):
    """Ask to confirm an action; dismisses ``True`` only on the confirm button."""

    cancel_value = False

    def __init__(self, title: str, body: Text | str, confirm_label: str,
                 variant: str = "error") -> None:
        super().__init__(title)
        self.body = body if isinstance(body, Text) else Text(body)
        self.confirm_label = confirm_label
        self.variant = variant

    def compose_body(self) -> ComposeResult:
        """The explanation."""
        yield Static(self.body, classes="body", id="body")

    def compose_buttons(self) -> ComposeResult:
        """The confirm button."""
        yield Button(self.confirm_label, id="confirm", variant=self.variant)

    def button_pressed(self, button_id: str) -> None:
        """Confirmed."""
        if button_id == "confirm":
            self.dismiss(True)


def host_key_dialog(host: str, key_type: str, fingerprint: str) -> ConfirmDialog:
    """The question OpenSSH asks for an unknown host key, with its fingerprint."""
    body = Text()
    body.append("The authenticity of host ")
    body.append_text(safe(host, 80, "bold"))
    body.append(" can't be established.\n")
    body.append_text(safe(key_type, 40))
    body.append(" key fingerprint is\n\n    ")
    body.append_text(safe(fingerprint, 120, "bold cyan"))
    body.append("\n\nCompare it with the fingerprint your provider shows. Trusting it "
                "adds it to known_hosts.")
    return ConfirmDialog("Unknown host key", body, "Trust and connect", variant="warning")
