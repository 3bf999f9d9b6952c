"""The metrics pane: train loss and a metric over epochs (the main one, or the one the
user cycled to), with the latest values: metric columns first, LibreYOLO's ``-1.0``
placeholders (COCO's "no object of that size") and ``speed/``/``lr/`` columns left out."""

from __future__ import annotations

import math
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.renderables.sparkline import Sparkline as SparklineRenderable
from textual.widgets import Sparkline, Static

from remote.events import MetricsEvent
from tui.fmt import number, safe

#: Epoch rows kept for the charts; a run has far fewer epochs than this.
MAX_ROWS = 5000


def main_metric_key(row: dict[str, Any]) -> str | None:
    """The row's main metric column: the one named by ``best_metric_name`` when the row
    holds it, else the first ``metrics/...`` column."""
    name = row.get("best_metric_name")
    if isinstance(name, str):
        for key in (name, f"metrics/{name}"):
            if _finite(row.get(key)):
                return key
    for key, value in row.items():
        if key.startswith("metrics/") and _finite(value):
            return key
    return None


def _finite(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) \
        and math.isfinite(value)


def is_placeholder(key: str, value: Any) -> bool:
    """Whether ``value`` stands for "no value" (COCO's ``-1.0`` in a metrics column)."""
    return key.startswith("metrics/") and value == -1.0


def latest_columns(row: dict[str, Any]) -> list[str]:
    """The columns of ``row`` to show, in order: the main metric, the other metrics, then
    the train losses; placeholders and non-numbers left out."""
    main = main_metric_key(row)
    metrics = [k for k, v in row.items() if k.startswith("metrics/") and _finite(v)
               and not is_placeholder(k, v) and k != main]
    losses = [k for k, v in row.items() if k.startswith("train/") and _finite(v)]
    return ([main] if main else []) + metrics + losses


def metric_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Every metric column with a real value in some row, main metric first (the keys
    the user cycles through)."""
    seen: dict[str, None] = {}
    for row in rows:
        for key in latest_columns(row):
            if key.startswith("metrics/"):
                seen.setdefault(key)
    main = next((k for k in map(main_metric_key, reversed(rows)) if k), None)
    return ([main] if main else []) + [k for k in seen if k != main]


def next_column(columns: list[str], current: str | None) -> str | None:
    """The column after ``current`` (the first when ``current`` is not among them)."""
    if not columns:
        return None
    if current not in columns:
        return columns[0]
    return columns[(columns.index(current) + 1) % len(columns)]


class EpochChart(Sparkline):
    """A sparkline with one bar per epoch: with fewer epochs than columns each epoch
    gets an equal share of the width instead of the data being repeated."""

    def render(self) -> SparklineRenderable:
        """Stretch the data to the widget's width, then draw it as a sparkline."""
        data = list(self.data or [])
        width = self.size.width
        if data and len(data) < width:
            data = [data[i * len(data) // width] for i in range(width)]
        _, base = self.background_colors
        low = base + self.get_component_styles("sparkline--min-color").color
        high = base + self.get_component_styles("sparkline--max-color").color
        return SparklineRenderable(data, width=width, height=self.size.height,
                                   min_color=low.rich_color, max_color=high.rich_color,
                                   summary_function=self.summary_function)


class MetricsPane(Vertical):
    """Two charts (loss, main metric) and a line of the latest epoch's values."""

    DEFAULT_CSS = """
    MetricsPane { border: round $primary; border-title-color: $text; padding: 0 1; }
    MetricsPane Sparkline { height: 1fr; min-height: 2; }
    MetricsPane .label { height: 1; }
    MetricsPane #loss-chart > .sparkline--max-color { color: $error; }
    MetricsPane #loss-chart > .sparkline--min-color { color: $success; }
    MetricsPane #metric-chart > .sparkline--max-color { color: $success; }
    MetricsPane #metric-chart > .sparkline--min-color { color: $warning; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[dict[str, Any]] = []
        #: The metric column charted (``None``: the main one).
        self.metric_key: str | None = None
        self.border_title = "metrics"

    def compose(self) -> ComposeResult:
        """Labels and sparklines for loss and the main metric, then the latest values."""
        yield Static("train loss", id="loss-label", classes="label")
        yield EpochChart([], id="loss-chart")
        yield Static("metric", id="metric-label", classes="label")
        yield EpochChart([], id="metric-chart")
        yield Static(Text("waiting for the first epoch…", style="dim"), id="latest",
                     classes="label")

    def clear(self) -> None:
        """Forget all rows (another run was chosen)."""
        self.rows = []
        self.metric_key = None
        self._draw()

    def cycle_metric(self) -> str | None:
        """Chart the next metric column; its name (``None``: no metric yet)."""
        columns = metric_columns(self.rows)
        self.metric_key = next_column(columns, self.metric_key or (columns or [None])[0])
        self._draw()
        return self.metric_key

    def add(self, event: MetricsEvent) -> None:
        """Take new rows (``reset`` drops the earlier ones)."""
        if event.reset:
            self.rows = []
        self.rows.extend(r for r in event.rows if isinstance(r, dict))
        del self.rows[:-MAX_ROWS]
        self._draw()

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        losses = [float(r["train/loss"]) for r in self.rows if _finite(r.get("train/loss"))]
        columns = metric_columns(self.rows)
        key = self.metric_key if self.metric_key in columns else (columns or [None])[0]
        values = [float(r[key]) for r in self.rows
                  if key and _finite(r.get(key)) and not is_placeholder(key, r[key])]
        self.query_one("#loss-chart", EpochChart).data = losses
        self.query_one("#metric-chart", EpochChart).data = values
        self.query_one("#loss-label", Static).update(_label("train loss", losses))
        self.query_one("#metric-label", Static).update(
            _label(key.removeprefix("metrics/") if key else "metric", values))
        latest = Text()
        if self.rows:
            row = self.rows[-1]
            latest.append_text(safe(f"epoch {row.get('epoch', '?')}", 30, "bold"))
            for k in latest_columns(row):
                latest.append("  ")
                latest.append_text(safe(k.split("/", 1)[1], 30, "dim"))
                latest.append(f" {number(row[k])}")
            if row.get("is_best"):
                latest.append("  ★ best", style="bold yellow")
        else:
            latest.append("waiting for the first epoch…", style="dim")
        self.query_one("#latest", Static).update(latest)


def _label(name: str, values: list[float]) -> Text:
    text = Text()
    text.append_text(safe(name, 40, "bold"))
    if values:
        text.append(f"  last {number(values[-1])}  min {number(min(values))}"
                    f"  max {number(max(values))}  ({len(values)} epochs)", style="dim")
    return text
