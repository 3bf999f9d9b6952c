"""The one-line texts of a box, drawn from its facts (``tui.box.state.BoxState``): the
status row (actions in progress, else the link warning, else the last outcome) and the
label of its tab. Pure: no widget."""

from __future__ import annotations

from rich.text import Text

from tui.box.state import BoxState
from tui.fmt import safe
from tui.widgets.header import HEALTH_STYLES

#: Seconds a line of information (``link back after 32s``, ``launched …``) stays in the
#: status row; warnings and failures stay until the next line. The events keep them all.
INFO_SECONDS = 20.0


#: What to do once the provider took the instance away.
TAKEN_NEXT = ("R starts it again and resumes the run here; m on the fleet (F) resumes it "
              "on another box")


def status_line(state: BoxState, frame: int) -> Text:
    """Actions in progress (behind spinner ``frame``); else why connecting stopped, or
    the link warning; else the last thing that happened (information for a while,
    warnings and failures until the next); else nothing."""
    if state.activities:
        return state.activities.line(state.clock(), frame)
    if state.taken_away is not None:
        text = Text("■ ", style="bold red")
        text.append_text(safe(f"{state.taken_away}: nothing to reconnect to. {TAKEN_NEXT}",
                              600, "bold red"))
        return text
    if state.not_connected and (state.transport is None or state.down_since is not None):
        text = Text("✖ not connected: ", style="bold red")
        text.append_text(safe(state.not_connected, 4000))
        return text
    if state.down_since is not None:
        text = Text("⚠ no link to the box: ", style="bold yellow")
        text.append(f"{state.stale_words()}; reconnecting on its own (r: now)")
        return text
    if state.last_line is not None and (
            state.last_line[1] != "information"
            or state.clock() - state.last_line_at < INFO_SECONDS):
        line, severity = state.last_line
        text = Text(line, style="red" if severity == "error" else "dim")
        text.append("  (e: events)", style="dim")
        return text
    return Text("")


def tab_label(state: BoxState) -> Text:
    """The tab's title: host, the watched run's health glyph, link and alerts."""
    text = Text(state.spec.title)
    if state.taken_away is not None:  # its last status still says it trains
        text.append(" ■", style="bold red")
    elif state.status is not None:
        label, style = HEALTH_STYLES.get(state.status.health.verdict, ("?", ""))
        text.append(" " + label.split(" ", 1)[0], style=style)
    if state.down_since is not None:
        text.append(" ◌", style="bold yellow")
    if state.unseen:
        text.append(f" ⚠{len(state.unseen)}", style="bold red")
    return text
