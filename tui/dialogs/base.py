"""The dialog frame shared by every modal: a title, a body, Cancel first and focused."""

from __future__ import annotations

from typing import Generic, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Static

T = TypeVar("T")


class Dialog(ModalScreen[T], Generic[T]):
    """A modal whose Cancel button has the focus when it opens (so Enter cancels) and
    which Escape dismisses with ``cancel_value``."""

    DEFAULT_CSS = """
    Dialog { align: center middle; }
    Dialog > Vertical {
        width: 84; max-width: 95%; height: auto; max-height: 95%;
        border: thick $primary; background: $surface; padding: 1 2;
    }
    Dialog .title { text-style: bold; margin-bottom: 1; }
    Dialog .body { margin-bottom: 1; height: auto; }
    Dialog .buttons { height: auto; align-horizontal: right; margin-top: 1; }
    Dialog .buttons Button { margin-left: 2; }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    #: Cancel is the default: focused as the screen opens, never after another widget.
    AUTO_FOCUS = "#cancel"

    cancel_value: T | None = None
    #: The label of the default button ("Close" where nothing is being decided).
    cancel_label = "Cancel"

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title

    def compose(self) -> ComposeResult:
        """Title, the dialog's own body, then the buttons (Cancel first)."""
        with Vertical(id="frame"):
            yield Static(Text(self.title_text), classes="title")
            yield from self.compose_body()
            with Horizontal(classes="buttons"):
                yield Button(self.cancel_label, id="cancel", variant="default")
                yield from self.compose_buttons()

    def compose_body(self) -> ComposeResult:
        """The dialog's content (override)."""
        yield from ()

    def compose_buttons(self) -> ComposeResult:
        """Buttons after Cancel (override)."""
        yield from ()

    def action_cancel(self) -> None:
        """Close without doing anything."""
        self.dismiss(self.cancel_value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        """Cancel closes; other buttons go to ``button_pressed``."""
        event.stop()
        if event.button.id == "cancel":
            self.action_cancel()
        else:
            self.button_pressed(event.button.id or "")

    def button_pressed(self, button_id: str) -> None:
        """A button other than Cancel was pressed (override)."""
