"""The run header: host, GPUs, state and health, epoch progress, times, best metric, money."""

from __future__ import annotations

from collections.abc import Callable

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import ProgressBar, Static

from remote.billing import money
from remote.watch import StatusEvent
from trainer.runfiles import parse_iso
from trainer.text import format_duration
from tui.fmt import advance_ages, number, safe
from tui.widgets.textline import TextLine

#: Health verdict -> (badge label, style).
HEALTH_STYLES = {
    "live": ("● live", "bold green"),
    "starting": ("◔ starting", "bold blue"),
    "slow": ("◐ slow", "bold yellow"),
    "stalled": ("◌ stalled", "bold dark_orange"),
    "dead": ("✖ dead", "bold white on red"),
    "completed": ("✔ completed", "bold cyan"),
    "failed": ("✖ failed", "bold white on red"),
    "stopped": ("■ stopped", "bold magenta"),
    "unreadable": ("? unreadable", "bold red"),
}


def unrepeated(reason: str, verdict: str) -> str:
    """``reason`` without the verdict its badge already says ("stopped after 3/9
    epochs" after "■ stopped" reads "after 3/9 epochs"; "failed to start: …" stays)."""
    if reason.lower().startswith((f"{verdict} after ", f"{verdict} at ")):
        return reason[len(verdict) + 1:]
    return reason


def health_badge(verdict: str) -> Text:
    """The coloured badge for a health verdict (unknown verdicts shown as they are)."""
    label, style = HEALTH_STYLES.get(verdict, (verdict, "bold"))
    return safe(f" {label} ", 30, style)


class RunHeader(Vertical):
    """Three lines at the top of a box tab (two when the money line is empty: nothing is
    rented). Fed by ``show_*`` calls; never reads a clock of its own (``clock`` is
    injected so that snapshots are deterministic); ``money``: the first money line."""

    DEFAULT_CSS = """
    RunHeader { height: auto; padding: 0 1; background: $boost; }
    RunHeader #ident { height: 1; }
    RunHeader Horizontal { height: 1; }
    RunHeader #epoch { width: auto; padding-right: 1; }
    RunHeader ProgressBar { width: 34; }
    RunHeader ProgressBar Bar { width: 28; }
    RunHeader #times { width: 1fr; padding-left: 1; }
    """

    def __init__(self, host: str, clock: Callable[[], float], money: Text | None = None,
                 **kwargs) -> None:
        super().__init__(**kwargs)
        self._host = host
        self._clock = clock
        self._gpus: list[str] = []
        self._event: StatusEvent | None = None
        self._run = ""
        self._stale = ""
        self._money = money if money is not None else Text(
            "money: $?/h (give --price or --provider)", style="dim")

    def compose(self) -> ComposeResult:
        """Three rows: identity, progress, money."""
        yield TextLine(id="ident")
        with Horizontal():
            yield Static("epoch -/-", id="epoch")
            yield ProgressBar(total=100, show_eta=False, id="progress")
            yield TextLine(id="times")
        line = TextLine(self._money, id="money")
        line.display = bool(self._money.plain)
        yield line

    def on_mount(self) -> None:
        """Draw what is known so far."""
        self._draw()

    def show_run(self, name: str) -> None:
        """The run now being watched (clears the old run's status)."""
        self._run = name
        self._event = None
        self._draw()

    def show_gpus(self, names: list[str]) -> None:
        """The box's GPU names (from the GPU sampler or status.json's host)."""
        self._gpus = names
        self._draw()

    def show_status(self, event: StatusEvent) -> None:
        """A new status.json and health verdict."""
        self._event = event
        host = event.read.get("host")
        if isinstance(host, dict) and not self._gpus:
            gpus = host.get("gpus") or host.get("gpu_names")
            if isinstance(gpus, list):
                self._gpus = [str(g) for g in gpus]
        self._draw()

    def show_stale(self, words: str) -> None:
        """``last data 34s ago`` while the link is down (the health shown is that old),
        empty when data flows."""
        self._stale = words
        self._draw()

    def show_money(self, text: Text) -> None:
        """The money line (spent, $/h, projected), built by the box view."""
        self._money = text
        if self.is_mounted:
            line = self.query_one("#money", TextLine)
            line.display = bool(text.plain)
            line.update(text)

    def tick(self) -> None:
        """Redraw the times (elapsed grows while a run is live)."""
        self._draw()

    def elapsed(self) -> float | None:
        """Seconds the run has trained: status elapsed plus the time since its update
        while it is still live (both on the box's clock: a box whose clock is hours off
        adds no hours)."""
        if self._event is None:
            return None
        st = self._event.read
        elapsed = st.get("elapsed_seconds") or st.get("total_seconds")
        if not isinstance(elapsed, int | float):
            return None
        if self._event.health.verdict in ("live", "slow"):
            updated = parse_iso(st.get("updated_at") or "")
            if updated is not None:
                elapsed += max(0.0, self._event.box_time(self._clock()) - updated)
        return float(elapsed)

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        # Most important first: a narrow terminal cuts the end of the line.
        ident = Text()
        ident.append(" ")
        ident.append_text(safe(self._host, 60))
        if self._run:
            ident.append("  run ", style="dim")
            ident.append_text(safe(self._run, 60))
        ev = self._event
        if ev is not None:
            ident.append("  ")
            state = ev.read.get("state")
            if state and state != ev.health.verdict:  # e.g. state running, pid gone
                ident.append_text(safe(f"state {state}", 40))
                ident.append(" ")
            if self._stale:  # the verdict is as old as the data: say so, not "live"
                ident.append(" ◌ no link ", style="bold white on dark_orange")
                ident.append_text(safe(f" {self._stale} (was {ev.health.verdict})", 80,
                                       "bold"))
            else:
                ident.append_text(health_badge(ev.health.verdict))
                ident.append(" ")
                reason = advance_ages(ev.health.reason, self._clock() - ev.received_at)
                ident.append_text(safe(unrepeated(reason, ev.health.verdict), 120, "dim"))
        ident.append("  ")
        gpus = ", ".join(self._gpus) if self._gpus else "no GPU reported"
        ident.append_text(safe(gpus, 80, "dim"))
        self.query_one("#ident", TextLine).update(ident)
        self._draw_progress()

    def _draw_progress(self) -> None:
        ev = self._event
        st = ev.read if ev is not None else None
        done = st.get("completed_epochs") if st else None
        total = st.get("total_epochs") if st else None
        epoch = f"epoch {done if done is not None else '-'}/{total or '-'}"
        if str(self.query_one("#epoch", Static).content) != epoch:
            self.query_one("#epoch", Static).update(safe(epoch, 30))
        bar = self.query_one("#progress", ProgressBar)
        progress = st.get("progress") if st else None
        if progress is None and done is not None and total:
            progress = done / total
        bar.update(total=100, progress=100 * progress if progress is not None else 0)
        times = Text()
        running = ev is not None and ev.health.verdict in ("live", "slow", "stalled")
        eta = st.get("eta_seconds") if st and running else None
        times.append(f"ETA {format_duration(eta)}  elapsed {format_duration(self.elapsed())}")
        if st and st.get("best_metric") is not None:
            name = st.get("best_metric_name") or "metric"
            times.append("  best ")
            times.append_text(safe(name, 40))
            times.append(f" {number(st.get('best_metric'))}", style="bold")
            if st.get("best_epoch") is not None:
                times.append_text(safe(f" @{st.get('best_epoch')}", 20))
        self.query_one("#times", TextLine).update(times)


def money_line(price: float | None, spent: float | None, projected: float | None,
               note: str = "", after: Text | None = None,
               unpriced: str = "give --price or --provider to see costs") -> Text:
    """The money row: ``$/h``, spent so far, projected to finish, a note, and ``after``:
    what the box bills once the run is over (idle billing, or how it ended);
    ``unpriced``: why there is no price."""
    text = Text(" money: ")
    if price is None:
        text.append("$?/h", style="bold")
        text.append_text(safe(f"  ({unpriced})", 80, "dim"))
    else:
        text.append(f"{money(price)}/h", style="bold")
        text.append(f"  spent {money(spent)}")
        text.append(f"  projected {money(projected)}")
    if after is not None:
        text.append("  ")
        text.append_text(after)
    if note and price is not None:
        text.append("  ")
        text.append_text(safe(note, 80, "dim"))
    return text
