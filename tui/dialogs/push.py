"""Push a run's weights to the Hugging Face Hub from the box: the run and the files it
sends, the repo to type (focused), public or private; Enter pushes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Button, Input, Static

from tui.dialogs.base import Choice, Dialog
from tui.fmt import safe
from tui.widgets.field import Field


class PushDialog(Dialog[tuple[str, bool] | None]):
    """Asks for the repo id (``user/name``); dismisses ``(repo, public)`` or ``None``.
    ``run``/``run_dir``: the run pushed; ``files``: what the push sends; ``present``:
    the weight files the box has streamed (name -> bytes; ``None``: not known)."""

    BINDINGS = [Binding("enter", "push", "Push", show=False)]

    def __init__(self, repo: str, has_token: bool, run: str = "", run_dir: str = "",
                 files: Sequence[str] = (), present: dict[str, int] | None = None) -> None:
        super().__init__(f"Push run {run} to the Hugging Face Hub" if run else
                         "Push to the Hugging Face Hub")
        self.repo = repo
        self.has_token = has_token
        self.run = run
        self.run_dir = run_dir
        self.files = tuple(files)
        self.present = present

    def compose_body(self) -> ComposeResult:
        """What is pushed, the repo box, visibility and where the token comes from."""
        what = Text("Sends ")
        for n, name in enumerate(self.files):
            what.append(", " if n else "")
            what.append_text(safe(name, 60, "bold"))
            if name.endswith(".pt") and self.present is not None:
                size = self.present.get(name)
                what.append(f" ({size / 1e6:.1f} MB)" if size is not None else
                            " (not on the box yet)", style="dim")
        if self.run_dir:
            what.append(" from ")
            what.append_text(safe(self.run_dir, 120, "bold"))
        what.append(" (a file the run lacks is skipped). The box uploads them itself, not "
                    "through this laptop; the token travels over the command's stdin, never "
                    "in argv or a file.")
        if not self.has_token:
            what.append("\nNo Hugging Face token found: set HF_TOKEN or run "
                        "`hf auth login` first.", style="bold red")
        yield Static(what, classes="body", id="what")
        yield Field(value=self.repo, placeholder="user/repo (Enter: push)", id="repo")
        yield Choice("public repo (default: private; Space ticks)", id="public")

    def compose_buttons(self) -> ComposeResult:
        """Push."""
        yield Button("Push", id="push", variant="primary", disabled=not self.has_token)

    def outcome(self, result: tuple[str, bool] | None) -> str:
        """Cancelled, or where it pushes."""
        if result is None:
            return "cancelled"
        repo, public = result
        return f"confirmed: push to {repo} ({'public' if public else 'private'})"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the repo box pushes."""
        event.stop()
        self.action_push()

    def action_push(self) -> None:
        """Push with the typed repo (or say why not)."""
        repo = self.query_one("#repo", Input).value.strip()
        if not self.has_token:
            self.notify("no Hugging Face token: set HF_TOKEN or run `hf auth login`",
                        severity="error")
        elif not repo:
            self.notify("type the repo to push to (user/name)", severity="warning")
        else:
            self.dismiss((repo, self.query_one("#public", Choice).value))

    def button_pressed(self, button_id: str) -> None:
        """Push with the typed repo."""
        if button_id == "push":
            self.action_push()
