"""Long actions in progress (pull, push, profile, stop, launch…): what runs, for how long,
and for transfers how far and how fast. Plain state the status row draws from; no widget,
no thread (the box view updates it on the UI thread)."""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.text import Text

from trainer.text import format_duration
from tui.fmt import safe

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
#: Seconds of transfer history the rate is measured over.
RATE_WINDOW = 5.0


@dataclass
class Activity:
    """One action in progress; ``done``/``total`` bytes when it is a transfer."""

    label: str
    started: float
    done: int | None = None
    total: int | None = None
    samples: list[tuple[float, int]] = field(default_factory=list)

    def progress(self, done: int, total: int, now: float) -> None:
        """Record ``done`` of ``total`` bytes at ``now``."""
        self.done, self.total = done, total
        self.samples.append((now, done))
        while len(self.samples) > 2 and now - self.samples[0][0] > RATE_WINDOW:
            self.samples.pop(0)

    def rate(self) -> float | None:
        """Bytes per second over the last few seconds (``None`` before two samples)."""
        if len(self.samples) < 2:
            return None
        (t0, d0), (t1, d1) = self.samples[0], self.samples[-1]
        return (d1 - d0) / (t1 - t0) if t1 > t0 else None

    def describe(self, now: float) -> str:
        """``pulling best.pt 27% 12.1/45.0 MB 4.1 MB/s 0:12``-like, in words."""
        parts = [self.label]
        if self.total:
            done = self.done or 0
            parts.append(f"{100 * done / self.total:.0f}%")
            parts.append(f"{done / 1e6:.1f}/{self.total / 1e6:.1f} MB")
            rate = self.rate()
            if rate is not None:
                parts.append(f"{rate / 1e6:.1f} MB/s")
        parts.append(format_duration(max(0.0, now - self.started)))
        return " ".join(parts)


class Activities:
    """The actions in progress of one box, by key (the worker's name)."""

    def __init__(self) -> None:
        self.items: dict[str, Activity] = {}

    def start(self, key: str, label: str, now: float) -> None:
        """``key`` started now (a restart resets it)."""
        self.items[key] = Activity(label, now)

    def progress(self, key: str, done: int, total: int, now: float) -> None:
        """Transfer progress of ``key`` (ignored once it has finished)."""
        item = self.items.get(key)
        if item is not None:
            item.progress(done, total, now)

    def finish(self, key: str) -> Activity | None:
        """``key`` is over; returns what it was."""
        return self.items.pop(key, None)

    def __bool__(self) -> bool:
        return bool(self.items)

    def line(self, now: float, frame: int) -> Text:
        """Every action in progress, behind a spinner frame."""
        text = Text()
        if not self.items:
            return text
        text.append(SPINNER[frame % len(SPINNER)] + " ", style="bold cyan")
        for n, item in enumerate(self.items.values()):
            if n:
                text.append("  ·  ", style="dim")
            text.append_text(safe(item.describe(now), 120))
        return text
