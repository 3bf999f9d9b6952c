"""Push best.pt to the Hugging Face Hub from the box: choose the repo."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.widgets import Button, Checkbox, Input, Static

from tui.dialogs.base import Dialog


class PushDialog(Dialog[tuple[str, bool] | None]):
    """Asks for the repo id (``user/name``); dismisses ``(repo, public)`` or ``None``."""

    def __init__(self, repo: str, has_token: bool) -> None:
        super().__init__("Push best.pt to the Hugging Face Hub")
        self.repo = repo
        self.has_token = has_token

    def compose_body(self) -> ComposeResult:
        """Repo box, visibility and where the token comes from."""
        note = Text("The box uploads the file itself (not through this laptop). The token "
                    "travels over the command's stdin, never in argv or a file.\n")
        if not self.has_token:
            note.append("No Hugging Face token found: set HF_TOKEN or run "
                        "`hf auth login` first.", style="bold red")
        yield Static(note, classes="body")
        yield Input(value=self.repo, placeholder="user/repo", id="repo")
        yield Checkbox("public repo (default: private)", id="public")

    def compose_buttons(self) -> ComposeResult:
        """Push."""
        yield Button("Push", id="push", variant="primary", disabled=not self.has_token)

    def button_pressed(self, button_id: str) -> None:
        """Push with the typed repo."""
        repo = self.query_one("#repo", Input).value.strip()
        if button_id == "push" and repo:
            self.dismiss((repo, self.query_one("#public", Checkbox).value))
