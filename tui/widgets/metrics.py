"""The metrics pane: line plots over epochs (``textual-plotext``) of the loss (train, and
validation when the run reports it) and of one metric that ``m`` cycles through, each
with axes labelled by their minimum and maximum and by the first and last epoch, and a
line of the latest epoch's values: metric columns first; LibreYOLO's ``-1.0``
placeholders (COCO's "no object of that size") and ``speed/``/``lr/`` columns left out."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical
from textual.widgets import Static
from textual_plotext import PlotextPlot

from remote.fields import num
from remote.watch import MetricsEvent
from trainer.text import clean_text
from tui.fmt import number, safe

#: Epoch rows kept for the charts; a run has far fewer epochs than this.
MAX_ROWS = 5000
#: Loss columns drawn together on the loss chart: (column, label, colour).
LOSSES = (("train/loss", "train", "orange"), ("val/loss", "val", "cyan"))
LOSS_KEYS = frozenset(key for key, _, _ in LOSSES)


def main_metric_key(row: dict[str, Any]) -> str | None:
    """The row's main metric column: the one named by ``best_metric_name`` when the row
    holds it, else the first ``metrics/...`` column."""
    name = row.get("best_metric_name")
    if isinstance(name, str):
        for key in (name, f"metrics/{name}"):
            if num(row.get(key)) is not None:
                return key
    for key, value in row.items():
        if key.startswith("metrics/") and _real(key, value):
            return key
    return None


def is_placeholder(key: str, value: Any) -> bool:
    """Whether ``value`` stands for "no value" (COCO's ``-1.0`` in a metrics column)."""
    return key.startswith("metrics/") and value == -1.0


def _real(key: str, value: Any) -> bool:
    return num(value) is not None and not is_placeholder(key, value)


def latest_columns(row: dict[str, Any]) -> list[str]:
    """The columns of ``row`` to show, in order: the main metric, the other metrics, then
    the losses; placeholders and non-numbers left out."""
    main = main_metric_key(row)
    metrics = [k for k, v in row.items() if k.startswith("metrics/") and _real(k, v)
               and k != main]
    losses = [k for k, v in row.items()
              if k.startswith(("train/", "val/")) and num(v) is not None]
    return ([main] if main else []) + metrics + losses


def metric_columns(rows: list[dict[str, Any]]) -> list[str]:
    """Columns worth a chart of their own, the ones ``m`` cycles through: the main
    metric, every other ``metrics/...`` column with a real value, then the loss parts
    (``train/box_loss``...), in the order they first appear."""
    seen: dict[str, None] = {}
    for row in rows:
        for key, value in row.items():
            wanted = key.startswith("metrics/") or (
                key.startswith(("train/", "val/")) and key not in LOSS_KEYS)
            if wanted and _real(key, value):
                seen.setdefault(key, None)
    main = next((k for k in map(main_metric_key, reversed(rows)) if k), None)
    keys = [k for k in seen if k != main]
    return ([main] if main else []) + [k for k in keys if k.startswith("metrics/")] + \
        [k for k in keys if not k.startswith("metrics/")]


def next_column(columns: list[str], current: str | None) -> str | None:
    """The column after ``current`` (the first when ``current`` is not among them)."""
    if not columns:
        return None
    if current not in columns:
        return columns[0]
    return columns[(columns.index(current) + 1) % len(columns)]


def series(rows: list[dict[str, Any]], key: str) -> tuple[list[float], list[float]]:
    """``(epochs, values)`` of column ``key`` (rows without a finite value skipped)."""
    xs, ys = [], []
    for n, row in enumerate(rows, 1):
        value, epoch = num(row.get(key)), num(row.get("epoch"))
        if value is not None and not is_placeholder(key, value):
            xs.append(float(n) if epoch is None else epoch)
            ys.append(value)
    return xs, ys


def _label(key: str) -> str:
    """A column name fit for a chart title (box text: cleaned, short)."""
    return clean_text(key.removeprefix("metrics/"))[:40]


def draw_chart(chart: PlotextPlot, title: str,
               lines: list[tuple[str, list[float], list[float], str]]) -> None:
    """Plot ``lines`` (label, epochs, values, colour) on ``chart`` with min/max and
    first/last epoch on the axes."""
    plt = chart.plt
    plt.clear_figure()
    plt.title(title)
    xs = [x for _, lx, _, _ in lines for x in lx]
    ys = [y for _, _, ly, _ in lines for y in ly]
    for label, lx, ly, colour in lines:
        if ly:
            plt.plot(lx, ly, label=label if len(lines) > 1 else None, marker="braille",
                     color=colour)
    if ys:
        lo, hi = min(ys), max(ys)
        pad = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
        plt.ylim(lo - pad, hi + pad)
        plt.yticks([lo, hi], [number(lo), number(hi)])
        first, last = min(xs), max(xs)
        plt.xlim(first - 0.5 if first == last else first, last + 0.5 if first == last else last)
        plt.xticks([first, last] if first != last else [first],
                   [f"{first:g}", f"{last:g}"] if first != last else [f"{first:g}"])
    else:
        plt.xticks([])
        plt.yticks([])
    chart.refresh()


class MetricsPane(Vertical):
    """The loss chart and the chosen metric's chart side by side, then the latest values."""

    DEFAULT_CSS = """
    MetricsPane { border: round $primary; border-title-color: $text; padding: 0 1; }
    MetricsPane #charts { height: 1fr; }
    MetricsPane PlotextPlot { width: 1fr; height: 1fr; min-height: 4; }
    MetricsPane #latest { height: 1; }
    """

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.rows: list[dict[str, Any]] = []
        self.metric: str | None = None
        self.border_title = "metrics"

    def compose(self) -> ComposeResult:
        """Two charts and a line."""
        with Horizontal(id="charts"):
            yield PlotextPlot(id="loss-chart")
            yield PlotextPlot(id="metric-chart")
        yield Static(Text("waiting for the first epoch…", style="dim"), id="latest")

    def on_mount(self) -> None:
        """Empty charts with their titles."""
        self._draw()

    def clear(self) -> None:
        """Forget all rows (another run was chosen)."""
        self.rows = []
        self._draw()

    def add(self, event: MetricsEvent) -> None:
        """Take new rows (``reset`` drops the earlier ones)."""
        if event.reset:
            self.rows = []
        self.rows.extend(r for r in event.rows if isinstance(r, dict))
        del self.rows[:-MAX_ROWS]
        self._draw()

    def chosen_metric(self) -> str | None:
        """The metric on the second chart: the user's choice, else the run's main one."""
        columns = metric_columns(self.rows)
        return self.metric if self.metric in columns else columns[0] if columns else None

    def cycle_metric(self) -> str | None:
        """``m``: chart the next metric; returns its column."""
        self.metric = next_column(metric_columns(self.rows), self.chosen_metric())
        self._draw()
        return self.metric

    def _draw(self) -> None:
        if not self.is_mounted:
            return
        losses = [(label, *series(self.rows, key), colour) for key, label, colour in LOSSES]
        losses = [line for line in losses if line[2]] or [("train", [], [], "orange")]
        title = "loss (" + " · ".join(line[0] for line in losses) + ")"
        draw_chart(self.query_one("#loss-chart", PlotextPlot), title, losses)
        key = self.chosen_metric()
        xs, ys = series(self.rows, key) if key else ([], [])
        name = _label(key) if key else "metric"
        draw_chart(self.query_one("#metric-chart", PlotextPlot), f"{name} (m: next)",
                   [(name, xs, ys, "green")])
        self.query_one("#latest", Static).update(self.latest_text())

    def latest_text(self) -> Text:
        """The latest epoch's values in one line."""
        latest = Text()
        if not self.rows:
            latest.append("waiting for the first epoch…", style="dim")
            return latest
        row = self.rows[-1]
        latest.append_text(safe(f"epoch {row.get('epoch', '?')}", 30, "bold"))
        for k in latest_columns(row):
            latest.append("  ")
            latest.append_text(safe(k.split("/", 1)[1], 30, "dim"))
            latest.append(f" {number(row[k])}")
        if row.get("is_best"):
            latest.append("  ★ best", style="bold yellow")
        return latest
