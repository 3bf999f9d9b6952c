"""Yes/no questions: confirmations of stop, quit, and the unknown host key."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Static
from textual.widgets.button import ButtonVariant

from tui.dialogs.base import Dialog
from tui.fmt import safe


class ConfirmDialog(Dialog[bool]):
    """Ask to confirm an action; dismisses ``True`` only on the confirm button."""

    cancel_value = False

    def __init__(self, title: str, body: Text | str, confirm_label: str,
                 variant: ButtonVariant = "error") -> None:
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


def forget_key_dialog(name: str, known_hosts: str) -> ConfirmDialog:
    """A host key changed: forget the old one (what the confirm button runs is shown
    whole), after which the new key is shown to check as an unknown one."""
    from remote.transport import forget_command

    body = Text()
    body.append("The box answering as ")
    body.append_text(safe(name, 80, "bold"))
    body.append(" shows another host key than the one on file, so nothing connects to "
                "it. If the box was re-created (a new instance, a reinstalled image), "
                "forget the old key; this runs\n\n    ")
    body.append_text(safe(forget_command(name, known_hosts), 4000, "bold cyan"))
    body.append("\n\nand connects again, showing you the new key to check. If nothing "
                "was re-created, Cancel: someone may be in between.")
    return ConfirmDialog("Host key changed", body, "Forget the old key", variant="warning")
