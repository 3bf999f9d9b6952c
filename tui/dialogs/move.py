"""Resume a run whose instance was taken away on another box (``gpurent resume
ORG/REPO:NAME --on TARGET``): the new box (focused), where the run goes there and its
dataset there; Enter resumes."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Button, Input, Static

from tui.dialogs.base import Dialog
from tui.fmt import safe
from tui.widgets.field import Field

#: What the dialog answers: the new box's target, the project there, the data.yaml there.
MoveAnswer = tuple[str, str, str]


class MoveDialog(Dialog[MoveAnswer | None]):
    """Asks where ``repo:name`` (taken away from ``old``, last safe ``safe``) goes on;
    dismisses ``(target, project, data)`` or ``None``."""

    BINDINGS = [Binding("enter", "move", "Resume", show=False)]

    def __init__(self, repo: str, name: str, old: str, safe_words: str) -> None:
        super().__init__(f"Resume {name} on another box")
        self.repo = repo
        self.name_ = name
        self.old = old
        self.safe_words = safe_words

    def compose_body(self) -> ComposeResult:
        """What happens, then the three fields."""
        what = Text()
        what.append_text(safe(f"{self.repo}:{self.name_}", 120, "bold"))
        what.append(" was taken away with ")
        what.append_text(safe(self.old, 60))
        what.append(" (last safe checkpoint: ")
        what.append_text(safe(self.safe_words, 200))
        what.append("). The new box is checked first (preflight), the checkpoint and the "
                    "history come from the Hub onto it, the run goes on there with "
                    "resume=True under the same name and repository, and the guard and "
                    "lease armed on the old box from here move with it.")
        yield Static(what, classes="body", id="what")
        yield Field(placeholder="the new box: runpod:POD_ID, vast:ID or a host", id="target")
        yield Field(value="runs", placeholder="the project there (default runs)",
                    id="project")
        yield Field(placeholder="the dataset's data.yaml there", id="data")

    def compose_buttons(self) -> ComposeResult:
        """Resume there."""
        yield Button("Resume there", id="move", variant="primary")

    def outcome(self, result: MoveAnswer | None) -> str:
        """Cancelled, or where it goes."""
        return "cancelled" if result is None else f"confirmed: resume on {result[0]}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in a field resumes."""
        event.stop()
        self.action_move()

    def action_move(self) -> None:
        """Resume with the typed values (or say what is missing)."""
        target, project, data = (self.query_one(f"#{k}", Input).value.strip()
                                 for k in ("target", "project", "data"))
        if not target or not data:
            self.notify("type the new box and its data.yaml", severity="warning")
        else:
            self.dismiss((target, project or "runs", data))

    def button_pressed(self, button_id: str) -> None:
        """Resume there."""
        if button_id == "move":
            self.action_move()
