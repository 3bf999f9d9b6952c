"""The runs list: every run of the project, newest first; choosing one switches to it."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.fmt import number, safe
from tui.widgets.header import HEALTH_STYLES


class RunsList(OptionList):
    """One option per run (``remote.runs.RunInfo``-like objects)."""

    DEFAULT_CSS = """
    RunsList { width: 30; border: round $primary; height: 1fr; }
    """

    class Chosen(Message):
        """The user picked a run to watch."""

        def __init__(self, run: Any) -> None:
            super().__init__()
            self.run = run

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "runs"
        self.runs: list[Any] = []
        self.current: str | None = None

    def show_runs(self, runs: list[Any], current: str | None) -> None:
        """Replace the list; ``current`` is the run dir being watched."""
        self.runs = list(runs)
        self.current = current
        highlighted = self.highlighted
        self.clear_options()
        if not self.runs:
            self.add_option(Option(Text("no runs yet (l: launch)", style="dim"), disabled=True))
            return
        self.add_options([Option(_run_label(info, info.run_dir == current))
                          for info in self.runs])  # one layout for hundreds of runs
        if highlighted is not None and highlighted < len(self.runs):
            self.highlighted = highlighted

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter on a run asks the box view to watch it."""
        event.stop()
        if 0 <= event.option_index < len(self.runs):
            self.post_message(self.Chosen(self.runs[event.option_index]))


def _run_label(info: Any, current: bool) -> Text:
    text = Text("▶ " if current else "  ", style="bold")
    text.append_text(safe(info.name, 24, "bold" if current else ""))
    verdict = getattr(info, "health", None) or getattr(info, "state", None) or "?"
    label, style = HEALTH_STYLES.get(verdict, (verdict, ""))
    text.append("\n   ")
    text.append_text(safe(label, 20, style))
    if info.total_epochs:
        text.append(f" {info.epoch or 0}/{info.total_epochs}", style="dim")
    if info.best_metric is not None:
        text.append(f" {number(info.best_metric, 3)}", style="dim")
    return text
