"""The dialog frame shared by every modal: a title, a body, Cancel first. The focus starts
on the first thing to type or choose, else on Cancel, never on a button that stops or
destroys (the quit dialog, which only detaches, starts on its quit button); Escape
cancels; how each dialog ended (cancelled, or what was chosen) goes into the events."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Static

T = TypeVar("T")


class Choice(Checkbox, inherit_bindings=False):
    """A checkbox that Space ticks and Enter leaves alone, so that Enter on it answers
    the dialog (a ticked box and Enter, not Tab to a button)."""

    BINDINGS = [Binding("space", "toggle_button", "Toggle", show=False)]


class Dialog(ModalScreen[T], Generic[T]):
    """A modal that opens with the focus on its first input or select, else on Cancel
    (so Enter cancels), and which Escape dismisses with ``cancel_value``."""

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
    #: The first thing to type or choose, else Cancel; never a button that acts.
    AUTO_FOCUS = "Input, Select, #cancel"

    cancel_value: T | None = None
    #: The label of the default button ("Close" where nothing is being decided).
    cancel_label = "Cancel"
    #: Whether the dialog asks for a decision, whose outcome goes into the events (a card
    #: that only shows something does not).
    decides = True

    def __init__(self, title: str) -> None:
        super().__init__()
        self.title_text = title
        #: The box the dialog is about (the events' title), set by whoever shows it.
        self.about = ""
        self._told = False

    def outcome(self, result: T | None) -> str:
        """How the dialog ended, in words for the events (override for what was chosen)."""
        return "cancelled" if result == self.cancel_value else "confirmed"

    def dismiss(self, result: T | None = None) -> Any:
        """Close with ``result``; the outcome goes into the events history once."""
        if self.decides and not self._told:
            self._told = True
            record = getattr(self.app, "record", None)
            if record is not None:
                record(f"{self.title_text}: {self.outcome(result)}", self.about)
        return super().dismiss(result)

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
