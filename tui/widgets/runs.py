"""The runs list: every run of the project, newest first; choosing one switches to it.
A run whose alert the user has not looked at yet carries a ⚠. Focused (Tab), it has the
keys of a list: j/k and the arrows move, g/G go to the first/last, Enter watches, ``/``
filters by name or state as you type (the watched run stays in sight, marked ▶), Esc
clears the filter or goes back to the log; any other letter or digit typed into it is
kept from the app's keys (``e`` would open the events, ``x`` stop the run, a digit
switch tabs)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from tui.fmt import number, safe
from tui.widgets.header import HEALTH_STYLES

if TYPE_CHECKING:
    from remote.runs import RunInfo

#: Characters a row has in the narrow list: the best metric is left out past it.
NARROW_TEXT = 20


class RunsList(OptionList):
    """One option per run (``remote.runs.read.RunInfo``-like objects)."""

    DEFAULT_CSS = """
    RunsList { width: 30; border: round $primary; height: 1fr; }
    RunsList:focus { border: round $accent; }
    """
    BINDINGS = [
        Binding("j", "cursor_down", "down", show=False),
        Binding("k", "cursor_up", "up", show=False),
        Binding("g", "first", "first", show=False),
        Binding("G", "last", "last", show=False),
    ]
    #: The list's keys, for the help screen and the footer.
    KEYS = (("j / k, ↓ / ↑", "Next / previous run"),
            ("g / G", "First / last run"),
            ("Enter", "Watch the highlighted run"),
            ("/", "Filter by name or state as you type (Enter keeps it)"),
            ("Esc", "Clear the filter, else back to the log"),
            ("other letters", "Nothing: typing in the list never fires the app's keys"))

    class Chosen(Message):
        """The user picked a run to watch."""

        def __init__(self, run: RunInfo) -> None:
            super().__init__()
            self.run = run

    class Left(Message):
        """Esc with nothing to clear: the user is done with the list."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.border_title = "runs"
        self.runs: list[RunInfo] = []
        #: The runs shown (those the filter lets through), in the options' order.
        self.shown: list[RunInfo] = []
        self.current: str | None = None
        self.unseen: set[str] = set()
        #: The filter (name or state, any case) and whether it is being typed.
        self.filter_text = ""
        self.filtering = False

    def show_runs(self, runs: list[RunInfo], current: str | None,
                  unseen: set[str] | None = None) -> None:
        """Replace the list; ``current`` is the run dir being watched, ``unseen`` the
        run dirs with an alert not looked at yet."""
        self.runs = list(runs)
        self.current = current
        self.unseen = set(unseen or ())
        self._rebuild()

    def _rebuild(self) -> None:
        """The options for the runs the filter lets through; the highlight stays on its
        run where it is still shown."""
        highlighted = self.highlighted
        was = self.shown[highlighted].run_dir if highlighted is not None and \
            highlighted < len(self.shown) else None
        self.shown = [info for info in self.runs if self._passes(info)]
        self.clear_options()
        self._draw_title()
        if not self.shown:
            empty = "no runs yet (l: launch)" if not self.runs else \
                "no run matches (Esc: all)"
            self.add_option(Option(Text(empty, style="dim"), disabled=True))
            return
        self.add_options([Option(_run_label(info, info.run_dir == self.current,  # one layout
                                            info.run_dir in self.unseen))
                          for info in self.shown])
        dirs = [info.run_dir for info in self.shown]
        if was in dirs and (was != self.current or not self.filter_text
                            or self._matches(self.shown[dirs.index(was)])):
            self.highlighted = dirs.index(was)
        elif self.filter_text:  # Enter watches the first run that matches
            self.highlighted = next((n for n, info in enumerate(self.shown)
                                     if self._matches(info)), 0)
        elif highlighted is not None:
            self.highlighted = min(highlighted, len(dirs) - 1)

    def _passes(self, info: RunInfo) -> bool:
        """Whether the filter shows ``info``: the watched run always stays in sight."""
        return info.run_dir == self.current or self._matches(info)

    def _matches(self, info: RunInfo) -> bool:
        """Whether ``info``'s name or state holds the filter's text (any case)."""
        needle = self.filter_text.lower()
        if not needle:
            return True
        verdict = getattr(info, "health", None) or getattr(info, "state", None) or ""
        label = HEALTH_STYLES.get(verdict, (verdict, ""))[0]
        words = (info.name, verdict, getattr(info, "state", None) or "", label,
                 str(getattr(info, "reason", "") or ""))
        return any(needle in str(word).lower() for word in words)

    def _draw_title(self, focused: bool | None = None) -> None:
        # ``has_focus`` changes only after the Focus and Blur handlers.
        focused = self.has_focus if focused is None else focused
        title = "runs"
        if self.filtering:
            title += f" /{self.filter_text}▏"
        elif self.filter_text:
            title += f" /{self.filter_text} (Esc: all)"
        elif focused:
            title += " · / filter"
        self.border_title = safe(title, 26)  # a Text: never read as markup

    def update_run(self, run_dir: str, **changes: Any) -> None:
        """Change one run's row in place (the watched run, live from the watcher)."""
        for n, info in enumerate(self.runs):
            if info.run_dir == run_dir:
                fresh = dataclasses.replace(info, **changes)
                if fresh != info:
                    self.runs[n] = fresh
                    shown = [i for i, s in enumerate(self.shown) if s.run_dir == run_dir]
                    if shown and self._passes(fresh):
                        self.shown[shown[0]] = fresh
                        self.replace_option_prompt_at_index(
                            shown[0], _run_label(fresh, run_dir == self.current,
                                                 run_dir in self.unseen))
                    elif shown or self._passes(fresh):  # it left or joined the filter
                        self._rebuild()
                return

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        """Enter on a run asks the box view to watch it."""
        event.stop()
        if 0 <= event.option_index < len(self.shown):
            self.post_message(self.Chosen(self.shown[event.option_index]))

    # ------------------------------------------------------------------ keys

    def set_filter(self, text: str, typing: bool = False) -> None:
        """Show only the runs whose name or state holds ``text`` (any case)."""
        self.filter_text, self.filtering = text, typing
        self._rebuild()

    def on_key(self, event: events.Key) -> None:
        """While the filter is typed, keys edit it; otherwise ``/`` starts it, Esc clears
        it (or leaves the list), and other characters never reach the app's keys: the
        list's own (j/k/g/G) are bindings, which run after this."""
        key, char = event.key, event.character
        if self.filtering:
            if key == "escape":
                self.set_filter("")
            elif key == "enter":
                self.set_filter(self.filter_text)
            elif key == "backspace":
                self.set_filter(self.filter_text[:-1], typing=True)
            elif char is not None and char.isprintable():
                self.set_filter(self.filter_text + char, typing=True)
            else:
                return  # the arrows move, Tab leaves, ctrl keys as anywhere
        elif key == "escape":
            if self.filter_text:
                self.set_filter("")
            else:
                self.post_message(self.Left())
        elif key == "slash":
            self.set_filter(self.filter_text, typing=True)
        elif key in ("j", "k", "g", "G") or char is None or not char.isprintable() \
                or key == "question_mark":
            return  # the list's bindings, Enter, Tab, the arrows, help
        event.stop()
        event.prevent_default()

    def on_focus(self) -> None:
        """Say that ``/`` filters."""
        self._draw_title(focused=True)

    def on_blur(self) -> None:
        """Typing the filter ends when the focus goes."""
        self.filtering = False
        self._draw_title(focused=False)


def _run_label(info: RunInfo, current: bool, unseen: bool = False) -> Text:
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
