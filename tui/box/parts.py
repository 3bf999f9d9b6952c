"""What a part of the box view declares about itself, so that the view and the app read it
instead of wiring it by hand (as lazygit's controllers do):

- the results it handles: a worker posts a ``PartMessage``; the part's method marked
  ``@handles(ThatMessage)`` gets it on the UI thread (``BoxView`` has one handler for
  every ``PartMessage``, which finds the part's method in ``routes``);
- its keys: ``KEYS``, a tuple of ``BoxKey`` on the part's class; the app binds them,
  the footer ranks them (``rank``), the help screen and the command palette list them.

Adding a box action is then the part's method, its ``BoxKey`` and its ``@handles``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from textual.message import Message

from trainer.health import GOING
from tui.box.state import BoxState


class PartMessage(Message, bubble=False, namespace="box"):
    """A result for a part of the box view, posted from any thread; the view hands it to
    the method of the part marked ``@handles`` for its class (on the UI thread)."""


#: A method that handles a part's message, marked by ``handles``.
Marked = Callable[..., Any]


@dataclass(frozen=True)
class Route:
    """How one message class reaches its part: ``call`` (the part's bound method),
    ``take`` (``None``: the message itself; else the message's fields, in order, as the
    method's arguments), ``action`` (the worker whose result it is: what ``call`` raises
    is reported as that action's failure; ``None``: raised as any bug is), ``news`` (a
    success makes that background check's next failure news again)."""

    call: Callable[..., Any]
    take: tuple[str, ...] | None = None
    action: str | None = None
    news: bool = False

    def __call__(self, message: Message) -> None:
        """Hand ``message`` to the part."""
        if self.take is None:
            self.call(message)
        else:
            self.call(*(getattr(message, name) for name in self.take))


def handles(message: type[Message], *, take: tuple[str, ...] | None = None,
            action: str | None = None, news: bool = False) -> Callable[[Marked], Marked]:
    """Mark a part's method as the handler of ``message`` (see ``Route`` for ``take``,
    ``action`` and ``news``); a method may be marked for several messages."""

    def mark(method: Marked) -> Marked:
        marks = getattr(method, "_handles", ())
        method._handles = (*marks, (message, take, action, news))  # type: ignore[attr-defined]
        return method

    return mark


def routes(parts: Iterable[object]) -> dict[type[Message], Route]:
    """Message class -> the route to the one part method marked for it."""
    found: dict[type[Message], Route] = {}
    for part in parts:
        names = {name: value for cls in reversed(type(part).__mro__)
                 for name, value in vars(cls).items()}
        for name, value in names.items():
            for message, take, action, news in getattr(value, "_handles", ()):
                if message in found:
                    raise TypeError(f"{message.__name__} has two handlers")
                found[message] = Route(getattr(part, name), take, action, news)
    return found


def keys_of(*parts: type) -> tuple[BoxKey, ...]:
    """The keys the part classes declare (their ``KEYS``), in order."""
    return tuple(key for part in parts for key in getattr(part, "KEYS", ()))


class Key(NamedTuple):
    """One key of the app, as bound, shown in the footer and help, and run by the palette:
    ``key`` (``a,b`` for two), ``action`` (Textual's), ``label`` (the footer's word),
    ``desc`` (the help's and the palette's line)."""

    key: str
    action: str
    label: str
    desc: str


@dataclass(frozen=True)
class BoxKey:
    """A part's key: it calls the part's method ``method`` on the shown box (the
    command ``name``: also the name its refusal is reported under). ``place``: where it
    sits among the app's keys (``tui.app.APP_KEYS``' places) in the footer, the help and
    the palette; ``rank``: its footer rank on a connected box in that state (``None``:
    not shown now; 0 is kept on the narrowest footer); ``quiet``: left out of Textual's
    own key lists."""

    key: str
    name: str
    method: str
    label: str
    desc: str
    place: int
    rank: Callable[[BoxState], int | None]
    quiet: bool = True

    def as_key(self) -> Key:
        """The app's row for it (its action is ``box('NAME')``)."""
        return Key(self.key, f"box('{self.name}')", self.label, self.desc)


def verdict(state: BoxState) -> str | None:
    """The watched run's health verdict (``None``: no status yet)."""
    return state.status.health.verdict if state.status is not None else None


def training(state: BoxState) -> bool:
    """Whether the watched run is training."""
    return verdict(state) in GOING


def instance_stopped(state: BoxState) -> bool:
    """Whether the provider's instance is known and not running."""
    return getattr(state.instance, "state", None) not in (None, "running")
