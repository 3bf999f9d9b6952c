"""Small status badges: the link to the box and whether the weights are safe."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from remote.watch import ConnectionEvent
from tui.fmt import safe
from tui.widgets.steady import SteadyStatic


class ConnectionBadge(SteadyStatic):
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
        """The watcher's latest link state (the run's own health is in the header: this
        badge speaks of the connection only)."""
        self.state = event.state
        if event.state == "live":
            text = Text("⇄ connected", style="bold green")
        elif event.state == "stale":
            text = Text(f"◐ no data for {event.silent_for:.0f} s", style="bold yellow")
        elif event.state == "reconnecting":
            text = Text(f"↻ reconnecting (try {event.attempt})", style="bold dark_orange")
        elif event.state == "polling":
            text = Text("⇄ connected (reading files)", style="bold green")
        elif event.state == "closed":
            text = Text("○ closed", style="dim")
        else:
            text = safe(event.state, 30, "bold")
        if event.detail and event.state not in ("live", "polling"):
            text.append("  ")
            text.append_text(safe(event.detail, 80, "dim"))
        self.update(text)

    def show_ended(self, line: str) -> None:
        """There is no box any more (its instance was destroyed): nothing to connect to."""
        self.state = "closed"
        self.update(safe(f"■ {line}", 80, "bold"))

    def show_error(self, message: str, retry_in: float | None = None,
                   attempt: int = 1) -> None:
        """Connecting failed; ``retry_in`` seconds until the next try, or ``None`` when
        it is not tried again (r tries again)."""
        self.state = "retrying" if retry_in is not None else "error"
        text = Text("✖ ", style="bold red")
        text.append_text(safe(message, 120, "red"))
        if retry_in is not None:
            text.append(f"  try {attempt + 1} in {retry_in:.0f} s (Esc: stop, r: now)",
                        style="dim")
        else:
            text.append("  (r: try again)", style="dim")
        self.update(text)


class WeightsBadge(SteadyStatic):
    """Whether the weights on the box are safe off it (on the Hub or the laptop): "none
    yet" only when the box has no weight file at all; when not safe, which files are
    not."""

    DEFAULT_CSS = "WeightsBadge { width: auto; padding: 0 1; }"

    def __init__(self, **kwargs) -> None:
        super().__init__(Text("weights: ?", style="dim"), **kwargs)
        self.safe_now: bool | None = None

    def show(self, safe_now: bool | None, where: str | None, epoch: int | None,
             reason: str = "", *, nothing: bool = False, unsafe: str = "") -> None:
        """Show the verdict of ``remote.weights.safety.weights_safety``: ``nothing`` when there
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
            text.append_text(safe(unsafe, 48, "bold red"))  # the guard badge must fit too
        else:
            text = Text("⚠ weights not safe", style="bold red")
        if reason and not safe_now and not unsafe:  # why unknown, or unsafe unnamed
            text.append("  ")
            text.append_text(safe(reason, 80, "dim"))
        self.update(text)

    def show_destroyed(self, verdict: Any) -> None:
        """The box's instance is destroyed: no word about the box, only what became of
        its weights (``verdict``: the files it last listed, judged without it; ``None``
        when they were never listed)."""
        self.safe_now = None if verdict is None else verdict.safe
        text = Text("■ box destroyed", style="bold")
        if verdict is None or not getattr(verdict, "runs", ()):
            text.append(": its weights were never listed", style="dim")
        elif verdict.nothing:
            text.append(": it held no weights", style="dim")
        elif verdict.safe:
            text.append("; its weights are kept", style="green")
            if verdict.where:
                text.append_text(safe(f" ({verdict.where})", 20, "green"))
        else:
            text.append("; no copy here or on your Hub: ", style="bold red")
            text.append_text(safe(verdict.unsafe_names, 48, "bold red"))
        self.update(text)
