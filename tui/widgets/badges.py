"""Small status badges: the link to the box and whether the weights are safe."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from remote.events import ConnectionEvent
from tui.fmt import safe


class ConnectionBadge(Static):
    """``live``, ``stale N s``, ``reconnecting`` (with the attempt), ``polling`` or a
    connecting/bootstrap progress line."""

    DEFAULT_CSS = "ConnectionBadge { width: auto; padding: 0 1; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(Text("○ connecting…", style="yellow"), **kwargs)
        self.state = "connecting"

    def show_progress(self, line: str) -> None:
        """A connecting / bootstrap step."""
        self.state = "connecting"
        text = Text("○ ", style="yellow")
        text.append_text(safe(line, 80, "yellow"))
        self.update(text)

    def show(self, event: ConnectionEvent) -> None:
        """The watcher's latest link state."""
        self.state = event.state
        if event.state == "live":
            text = Text("● live", style="bold green")
        elif event.state == "stale":
            text = Text(f"◐ stale {event.silent_for:.0f} s", style="bold yellow")
        elif event.state == "reconnecting":
            text = Text(f"↻ reconnecting (try {event.attempt})", style="bold dark_orange")
        elif event.state == "polling":
            text = Text("● live (polling)", style="bold green")
        elif event.state == "closed":
            text = Text("○ closed", style="dim")
        else:
            text = safe(event.state, 30, "bold")
        if event.detail and event.state != "live":
            text.append("  ")
            text.append_text(safe(event.detail, 80, "dim"))
        self.update(text)

    def show_error(self, message: str) -> None:
        """Connecting failed (the user can press r to try again)."""
        self.state = "error"
        text = Text("✖ ", style="bold red")
        text.append_text(safe(message, 120, "red"))
        text.append("  (r: reconnect)", style="dim")
        self.update(text)


class WeightsBadge(Static):
    """Whether the weights on the box are safe off it (on the Hub or the laptop): "no
    weights yet" only when the box has no weight file at all; when not safe, which
    files are not."""

    DEFAULT_CSS = "WeightsBadge { width: auto; padding: 0 1; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(Text("weights: ?", style="dim"), **kwargs)
        self.safe_now: bool | None = None

    def show(self, safe_now: bool | None, where: str | None, epoch: int | None,
             reason: str = "", *, nothing: bool = False, unsafe: str = "") -> None:
        """Show the verdict of ``remote.safety.weights_safety``: ``nothing`` when there
        are no weight files; ``unsafe`` names the files that are not safe."""
        self.safe_now = safe_now
        if safe_now and nothing:
            text = Text("no weights yet", style="dim")
        elif safe_now:
            at = f" at epoch {epoch}" if epoch is not None else ""
            text = safe(f"⛨ weights safe{at}", 40, "bold green")
            if where:
                text.append_text(safe(f" ({where})", 20, "green"))
        elif safe_now is None:
            text = Text("weights: ?", style="dim")
            reason = reason or "not checked yet"
        elif unsafe:
            text = Text("⚠ not safe: ", style="bold red")
            text.append_text(safe(unsafe, 80, "bold red"))
        else:
            text = Text("⚠ weights not safe", style="bold red")
        if reason and not safe_now and not unsafe:  # why unknown, or unsafe unnamed
            text.append("  ")
            text.append_text(safe(reason, 80, "dim"))
        self.update(text)
