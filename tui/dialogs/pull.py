"""Pull a run's weights to this laptop: the run and the files, the folder to pull into
(typed, focused; Enter pulls) and the folder the files will land in."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.message import Message
from textual.widgets import Button, Input, Static

from tui.dialogs.base import Dialog
from tui.fmt import safe
from tui.widgets.field import Field


class PullDialog(Dialog[str | None]):
    """Asks for the folder to pull into; dismisses it (as typed) or ``None``. ``where``
    tells, for a folder and the run's absolute path on the box, the directory the files
    will land in; that path comes from the box (``Found``, posted by a worker), and
    until then the dialog says it is being looked for."""

    @dataclass
    class Found(Message):
        """The run's absolute path on the box."""

        abs_run: str

    def __init__(self, run: str, files: str, folder: str,
                 where: Callable[[str, str], str]) -> None:
        super().__init__(f"Pull run {run}'s weights to this laptop")
        self.run = run
        self.files = files
        self.folder = folder
        self.where = where
        self.abs_run: str | None = None

    def compose_body(self) -> ComposeResult:
        """What is pulled, the folder box, and where the files land."""
        what = Text("Copies ")
        what.append_text(safe(self.files, 120, "bold"))
        what.append(" over SSH, each checked against the box's sha256, into:")
        yield Static(what, classes="body")
        yield Field(value=self.folder, placeholder="a folder on this laptop (Enter: pull)",
                    id="folder")
        yield Static(id="lands", classes="body")

    def compose_buttons(self) -> ComposeResult:
        """Pull."""
        yield Button("Pull", id="pull", variant="primary")

    def on_mount(self) -> None:
        """Say where the default folder puts the files."""
        self._show_where(self.folder)

    def _show_where(self, folder: str) -> None:
        lands = Text("lands in ", style="dim")
        if self.abs_run is None:
            lands.append("… (finding the run on the box)", style="dim")
        else:
            lands.append_text(safe(self.where(folder, self.abs_run) if folder.strip()
                                   else "?", 300))
        self.query_one("#lands", Static).update(lands)

    def on_pull_dialog_found(self, message: Found) -> None:
        """The run is found on the box: say where the files land."""
        self.abs_run = message.abs_run
        self._show_where(self.query_one("#folder", Input).value)

    def on_input_changed(self, event: Input.Changed) -> None:
        """The landing directory follows the folder typed."""
        self._show_where(event.value)

    def outcome(self, result: str | None) -> str:
        """Cancelled, or where to."""
        return "cancelled" if result is None else f"confirmed: pull into {result}"

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in the folder box pulls."""
        event.stop()
        self.action_pull()

    def action_pull(self) -> None:
        """Pull into the typed folder (or say it is missing)."""
        folder = self.query_one("#folder", Input).value.strip()
        if not folder:
            self.notify("type the folder to pull into", severity="warning")
            return
        self.dismiss(folder)

    def button_pressed(self, button_id: str) -> None:
        """Pull."""
        if button_id == "pull":
            self.action_pull()
