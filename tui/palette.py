"""The command palette's places (ctrl+p): every box and every run of every box, found by
a part of its name (``ctrl+p exp27``), and every instance the fleet listed (by its id,
account or GPU); choosing a box shows its tab, choosing a run shows its box's tab and
watches the run, choosing an instance shows the fleet with the cursor on it. The
actions themselves are the app's system commands
(``tui.app.GpurentApp.get_system_commands``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

from textual.command import DiscoveryHit, Hit, Hits, Provider

from trainer.text import clean_text
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

    def is_screen_installed(self, screen: Any) -> bool:
        """Whether a screen is installed under that name (the fleet's: ``fleet``)."""
        ...

    def get_screen(self, screen: Any) -> Any:
        """The screen installed under that name."""
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
    return found + fleet_places(app)


def fleet_places(app: PlacesApp) -> list[Place]:
    """Every instance of the fleet's last listing (none before the fleet was shown)."""
    if not app.is_screen_installed("fleet"):
        return []
    fleet = app.get_screen("fleet")
    rows = [] if fleet.fleet is None else fleet.fleet.rows
    return [Place(clean_text(f"instance {row.target} {row.account} "
                             f"{row.instance.gpu or ''}").strip()[:120],
                  f"show it in the fleet: {row.instance.state}",
                  partial(fleet.show_target, row.target))
            for row in rows if row.instance is not None]


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
