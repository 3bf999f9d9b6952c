"""The footer's keys for the state of the shown box: the keys that do something now, in
the app's order, and, when the terminal is too narrow for all of them, the most
important ones (a lower rank first). Pure: the app draws them (``tui.widgets.keybar``).

What is relevant: on a connected box, the box parts' keys as each part ranks them
(``tui.box.parts.BoxKey.rank``: the instance keys only where a provider's instance is
known, stopping a run only while it trains, the guard where the box bills, pull/push
first while the weights are not safe); reconnecting while the link is down or
a connection is retried, n/N and Esc while a search or filter is on; with the runs list
focused, its own keys (letters there never reach the app's)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

#: The runs list's keys while it has the focus.
RUNS_HINTS = (("j", "j/k", "move"), ("enter", "⏎", "watch"), ("slash", "/", "filter"),
              ("escape", "Esc", "back"), ("tab", "Tab", "to the log"))
#: How keys are written in the footer.
SHOWN = {"question_mark": "?", "slash": "/", "ampersand": "&", "escape": "Esc",
         "ctrl+p": "^p"}


@dataclass(frozen=True)
class Hint:
    """One key of the footer: ``key`` (what a click presses), how it is written, what
    it does, and its rank (0: kept on the narrowest footer)."""

    key: str
    shown: str
    label: str
    rank: int

    @property
    def width(self) -> int:
        """Columns it takes, with the two spaces before the next one."""
        return len(self.shown) + 1 + len(self.label) + 2


@dataclass(frozen=True)
class Scene:
    """What the footer depends on besides the box: the log pane and the focus."""

    searching: bool = False
    filtering: bool = False
    wrapped: bool = False
    in_runs: bool = False


def hints(state: Any, labels: dict[str, str], scene: Scene,
          box_ranks: dict[str, Callable[[Any], int | None]]) -> list[Hint]:
    """The keys that act now on a box in ``state`` (``tui.box.state.BoxState``; ``None``:
    no box), in the order of ``labels`` (key -> the app's label for it); ``box_ranks``:
    the box parts' keys -> their rank on a connected box in a state (``BoxKey.rank``)."""
    if scene.in_runs:
        return [Hint("question_mark", "?", "help", 0)] + \
            [Hint(key, shown, label, 1) for key, shown, label in RUNS_HINTS]
    ranks = _ranks(state, scene, box_ranks)
    out = []
    for key, label in labels.items():
        rank = ranks.get(key)
        if rank is not None:
            words = {"r": _link_word(state), "W": "unwrap" if scene.wrapped else "wrap",
                     "escape": "stop retrying" if _retrying(state) and not
                     (scene.searching or scene.filtering) else label}
            out.append(Hint(key, SHOWN.get(key, key), words.get(key, label), rank))
    out.append(Hint("ctrl+p", "^p", "palette", 9))
    return out


def fit(chosen: list[Hint], width: int) -> list[Hint]:
    """The hints that fit in ``width`` columns: by rank (then order), shown in order."""
    keep: set[int] = set()
    used = 0
    for n in sorted(range(len(chosen)), key=lambda n: (chosen[n].rank, n)):
        if used + chosen[n].width - 2 <= width:
            keep.add(n)
            used += chosen[n].width
    return [hint for n, hint in enumerate(chosen) if n in keep]


def _retrying(state: Any) -> bool:
    return bool(state is not None and state.retrying)


def _link_word(state: Any) -> str:
    if state is None or state.retrying:
        return "retry now"
    return "reconnect" if state.transport is not None else "connect"


def _ranks(state: Any, scene: Scene,
           box_ranks: dict[str, Callable[[Any], int | None]]) -> dict[str, int]:
    """Key -> rank for the keys that do something now."""
    ranks = {"question_mark": 0, "q": 0, "e": 3, "slash": 5, "f": 6, "W": 6, "ampersand": 7,
             "m": 8}
    if scene.searching:
        ranks.update({"n": 2, "N": 2, "escape": 2, "L": 4})
    if scene.filtering:
        ranks["escape"] = 2
    if state is None:
        return ranks
    if state.retrying:
        ranks.update({"r": 1, "escape": ranks.get("escape", 1)})
    elif state.down_since is not None or state.transport is None:
        ranks["r"] = 1
    if state.transport is None:
        return ranks
    for key, rank_of in box_ranks.items():  # a box key acts once the box is connected
        if (rank := rank_of(state)) is not None:
            ranks[key] = rank
    return ranks
