"""The runs list: every run of the project, newest first; choosing one switches to it.
A run whose alert the user has not looked at yet carries a ⚠."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.text import Text
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.fmt import number, safe
from tui.widgets.header import HEALTH_STYLES

#: Characters a row has in the narrow list: the best metric is left out past it.
NARROW_TEXT = 20


class RunsList(OptionList):
    """One option per run (``remote.runs.read.RunInfo``-like objects)."""

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
        self.unseen: set[str] = set()

    def show_runs(self, runs: list[Any], current: str | None,
                  unseen: set[str] | None = None) -> None:
        """Replace the list; ``current`` is the run dir being watched, ``unseen`` the
        run dirs with an alert not looked at yet."""
        self.runs = list(runs)
        self.current = current
        self.unseen = set(unseen or ())
        highlighted = self.highlighted
        self.clear_options()
        if not self.runs:
            self.add_option(Option(Text("no runs yet (l: launch)", style="dim"), disabled=True))
            return
        self.add_options([Option(_run_label(info, info.run_dir == current,  # one layout
                                            info.run_dir in self.unseen))
                          for info in self.runs])
        if highlighted is not None and highlighted < len(self.runs):
            self.highlighted = highlighted

    def update_run(self, run_dir: str, **changes: Any) -> None:
        """Change one run's row in place (the watched run, live from the watcher)."""
        for n, info in enumerate(self.runs):
            if info.run_dir == run_dir:
                fresh = dataclasses.replace(info, **changes)
                if fresh != info:
                    self.runs[n] = fresh
                    self.replace_option_prompt_at_index(
                        n, _run_label(fresh, run_dir == self.current, run_dir in self.unseen))
                return

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter on a run asks the box view to watch it."""
        event.stop()
        if 0 <= event.option_index < len(self.runs):
            self.post_message(self.Chosen(self.runs[event.option_index]))


def _run_label(info: Any, current: bool, unseen: bool = False) -> Text:
    text = Text("▶ " if current else "  ", style="bold")
    if unseen:
        text = Text("⚠ ", style="bold red")
    text.append_text(safe(info.name, 24, "bold" if current else ""))
    verdict = getattr(info, "health", None) or getattr(info, "state", None) or "?"
    label, style = HEALTH_STYLES.get(verdict, (verdict, ""))
    if verdict == "failed" and str(getattr(info, "reason", "")).startswith("failed to start"):
        label = "✖ failed to start"  # it died before it wrote a status.json
    text.append("\n  ")
    text.append_text(safe(label, 20, style))
    if info.total_epochs:
        text.append(f" {info.epoch or 0}/{info.total_epochs}", style="dim")
    best = f" {number(info.best_metric, 3)}" if info.best_metric is not None else ""
    if best and len(text.plain.rsplit("\n", 1)[-1]) + len(best) <= NARROW_TEXT:
        text.append(best, style="dim")
    return text
