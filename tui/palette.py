"""The command palette's places (ctrl+p): every box and every run of every box, found by
a part of its name (``ctrl+p exp27``); choosing a box shows its tab, choosing a run shows
its box's tab and watches the run. The actions themselves are the app's system commands
(``tui.app.GpurentApp.get_system_commands``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from textual.command import DiscoveryHit, Hit, Hits, Provider

from tui.widgets.header import HEALTH_STYLES


class PlacesApp(Protocol):
    """What the palette needs of the app (``tui.app.GpurentApp``)."""

    def boxes(self) -> list[Any]:
        """Every box view, in tab order."""
        ...

    def show_box(self, index: int) -> None:
        """Show box ``index``'s tab."""
        ...

    def show_run(self, index: int, run_dir: str) -> None:
        """Show box ``index``'s tab and watch ``run_dir`` there."""
        ...


@dataclass(frozen=True)
class Place:
    """One entry: the words matched, what they lead to, and how to go there."""

    text: str
    help: str
    go: Callable[[], None]


def places(app: PlacesApp) -> list[Place]:
    """The boxes, then each box's runs (newest first), as the palette lists them."""
    boxes = app.boxes()
    found = [Place(f"box {box.spec.title}", "show this box's tab", partial(app.show_box, n))
             for n, box in enumerate(boxes)]
    for n, box in enumerate(boxes):
        where = f" on {box.spec.title}" if len(boxes) > 1 else ""
        for run in box.state.with_live_health(box.panes.runs.runs):
            verdict = getattr(run, "health", None) or getattr(run, "state", None) or "?"
            label = HEALTH_STYLES.get(verdict, (verdict, ""))[0]
            done = f" {run.epoch or 0}/{run.total_epochs}" if run.total_epochs else ""
            found.append(Place(f"run {run.name}{where}", f"watch it: {label}{done}",
                               partial(app.show_run, n, run.run_dir)))
    return found


class Places(Provider):
    """Boxes and runs in the command palette (see the module doc)."""

    async def discover(self) -> Hits:
        """With nothing typed yet: every place."""
        for place in places(self.app):  # type: ignore[arg-type]
            yield DiscoveryHit(place.text, place.go, help=place.help)

    async def search(self, query: str) -> Hits:
        """The places whose words match what is typed."""
        matcher = self.matcher(query)
        for place in places(self.app):  # type: ignore[arg-type]
            score = matcher.match(place.text)
            if score > 0:
                yield Hit(score, matcher.highlight(place.text), place.go, text=place.text,
                          help=place.help)
