"""Resume a run whose instance was taken away on another box (``gpurent resume
ORG/REPO:NAME --on TARGET``): which of the instance's runs (each with its own last safe
checkpoint; none is taken for the user when there are several), the new box, where the
run goes there (by default the project a box tab opens, so the tab shows it) and its
dataset there; Enter resumes."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Button, Input, Select, Static

from tui.dialogs.base import Dialog
from tui.fmt import safe
from tui.spec import DEFAULT_PROJECT
from tui.widgets.field import Field

#: Where a moved run goes when nobody says: the project a box tab opens by default.


@dataclass(frozen=True)
class MoveChoice:
    """One run that can move: its Hub ``repo``, ``name``, ``project`` on the old box and
    its last safe checkpoint in words."""

    repo: str
    name: str
    project: str
    safe_words: str


@dataclass(frozen=True)
class MoveAnswer:
    """What the dialog answers: the run chosen, the new box's target, the project there
    and the data.yaml there."""

    run: MoveChoice
    target: str
    project: str
    data: str


class MoveDialog(Dialog[MoveAnswer | None]):
    """Asks which of ``runs`` (taken away with ``old``) goes on, and where; dismisses a
    ``MoveAnswer`` or ``None``. One line a field, so that it fits 80x24."""

    DEFAULT_CSS = """
    MoveDialog #run, MoveDialog Input { margin-bottom: 1; }
    MoveDialog #data, MoveDialog .buttons { margin-top: 0; margin-bottom: 0; }
    """

    BINDINGS = [Binding("enter", "move", "Resume", show=False)]

    def __init__(self, old: str, runs: list[MoveChoice]) -> None:
        super().__init__("Resume a run on another box" if len(runs) > 1 else
                         f"Resume {runs[0].name} on another box")
        self.old = old
        self.runs = runs

    def compose_body(self) -> ComposeResult:
        """What happens, the run to move (a choice when there are several), then the
        three fields."""
        what = Text()
        if len(self.runs) > 1:
            what.append(f"{len(self.runs)} runs pushing to the Hub were taken away with ")
            what.append_text(safe(self.old, 60))
            what.append(": choose one; each goes on from its own last safe checkpoint.")
        else:
            what.append_text(self.run_words(self.runs[0]))
            what.append(" was taken away with ")
            what.append_text(safe(self.old, 60))
            what.append(".")
        what.append(" The new box is checked (preflight), the run goes on there with "
                    "resume=True, same name and repository, its tab opens, and the old "
                    "box's guard and lease move with it.")
        yield Static(what, classes="body", id="what")
        if len(self.runs) > 1:
            yield Select([(self.run_words(r), str(n)) for n, r in enumerate(self.runs)],
                         prompt="choose the run to resume", compact=True, id="run")
        yield Field(placeholder="the new box: runpod:POD_ID, vast:ID or a host",
                    compact=True, id="target")
        yield Field(value=DEFAULT_PROJECT,
                    placeholder=f"the project there (default {DEFAULT_PROJECT})",
                    compact=True, id="project")
        yield Field(placeholder="the dataset's data.yaml there", compact=True, id="data")

    @staticmethod
    def run_words(run: MoveChoice) -> Text:
        """``org/exp:run1 (runs/train) · last safe: epoch 4 on the Hub org/exp@abc1234``."""
        text = safe(f"{run.repo}:{run.name}", 120, "bold")
        if run.project:
            text.append_text(safe(f" ({run.project})", 60))
        text.append(" · last safe: ")
        text.append_text(safe(run.safe_words, 160))
        return text

    def compose_buttons(self) -> ComposeResult:
        """Resume there."""
        yield Button("Resume there", id="move", variant="primary")

    def outcome(self, result: MoveAnswer | None) -> str:
        """Cancelled, or which run goes where."""
        return "cancelled" if result is None else \
            f"confirmed: resume {result.run.name} on {result.target}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in a field resumes."""
        event.stop()
        self.action_move()

    def chosen(self) -> MoveChoice | None:
        """The run chosen (the only one, or the one selected; ``None``: none yet)."""
        if len(self.runs) == 1:
            return self.runs[0]
        value = self.query_one("#run", Select).value
        return self.runs[int(value)] if isinstance(value, str) else None

    def action_move(self) -> None:
        """Resume with the typed values (or say what is missing)."""
        target, project, data = (self.query_one(f"#{k}", Input).value.strip()
                                 for k in ("target", "project", "data"))
        run = self.chosen()
        if run is None:
            self.notify("choose the run to resume", severity="warning")
        elif not target or not data:
            self.notify("type the new box and its data.yaml", severity="warning")
        else:
            self.dismiss(MoveAnswer(run, target, project or DEFAULT_PROJECT, data))

    def button_pressed(self, button_id: str) -> None:
        """Resume there."""
        if button_id == "move":
            self.action_move()
