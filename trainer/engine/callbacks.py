"""Callbacks: user code the engine calls at fixed points of a run.

The events, in the order a run meets them:

``on_train_start``
    after the model, data and device are ready, before the first epoch;
``on_val_end``
    after each validation, with ``metrics``;
``on_train_epoch_end``
    after each epoch's checkpoint and history row, with ``row`` (the ``metrics.jsonl`` row);
``on_train_exception``
    when training fails, with ``error`` (the exception), before ``on_train_end``;
``on_train_end``
    once at the very end, with ``state`` (``completed``, ``stopped`` or ``failed``).

A callback takes one argument, a :class:`CallbackContext`. Callbacks run in every worker
process of a multi-device run (``ctx.rank``, ``ctx.is_main`` say which). A callback that
raises is logged with its traceback and training goes on.

On the command line, ``callbacks=module:attr[,module:attr...]`` names a dict
``{event: callable}``, an object or module with methods named after the events, or a
single callable (registered for ``on_train_epoch_end``); ``callbacks=module`` takes the
module's functions named after the events.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

EVENTS = ("on_train_start", "on_val_end", "on_train_epoch_end", "on_train_exception",
          "on_train_end")

Callback = Callable[["CallbackContext"], Any]


class CallbackError(ValueError):
    """A ``callbacks=`` value or registration that cannot be used (one line)."""


@dataclass
class CallbackContext:
    """What a callback sees. ``model`` is the raw model (not the distributed wrapper) and
    ``ema`` the averaged copy that is validated and saved as ``best.pt``; both are ``None``
    when training failed before they existed."""

    event: str
    run_dir: Path
    args: Any  # trainer.engine.plan.TrainArgs
    rank: int = 0
    world_size: int = 1
    epoch: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    row: dict[str, Any] | None = None
    state: str | None = None
    error: BaseException | None = None
    model: Any = None
    ema: Any = None

    @property
    def is_main(self) -> bool:
        """Whether this is the process that writes the run directory (rank 0)."""
        return self.rank == 0


class Callbacks:
    """A registry of callbacks per event."""

    def __init__(self) -> None:
        self.registered: dict[str, list[Callback]] = {event: [] for event in EVENTS}

    def add(self, event: str, callback: Callback) -> None:
        """Register ``callback`` for ``event``."""
        if event not in self.registered:
            raise CallbackError(f"unknown callback event {event!r}; events: "
                                f"{', '.join(EVENTS)}")
        if not callable(callback):
            raise CallbackError(f"the callback for {event} is not callable: {callback!r}")
        self.registered[event].append(callback)

    def add_mapping(self, mapping: dict[str, Callback | Iterable[Callback]]) -> None:
        """Register ``{event: callable or list of callables}``."""
        for event, value in mapping.items():
            for callback in (value if isinstance(value, (list, tuple)) else [value]):
                self.add(event, callback)

    def __bool__(self) -> bool:
        return any(self.registered.values())

    def run(self, ctx: CallbackContext, log: logging.Logger) -> None:
        """Call every callback of ``ctx.event``; one that raises is logged, not fatal."""
        for callback in self.registered[ctx.event]:
            try:
                callback(ctx)
            except (Exception, SystemExit):
                log.exception("callback %s for %s raised; training goes on",
                              _name(callback), ctx.event)


def _name(callback: Callback) -> str:
    module = getattr(callback, "__module__", None) or "?"
    return f"{module}:{getattr(callback, '__qualname__', repr(callback))}"


def load_spec(spec: str) -> Callbacks:
    """Resolve ``module:attr[,module:attr...]`` (see the module docstring)."""
    callbacks = Callbacks()
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        module_name, _, attr = part.partition(":")
        try:
            target: Any = importlib.import_module(module_name)
        except Exception as exc:  # the module's own code may raise anything
            raise CallbackError(f"callbacks={part}: cannot import {module_name!r} "
                                f"({type(exc).__name__}: {exc})") from None
        if attr:
            try:
                for name in attr.split("."):
                    target = getattr(target, name)
            except AttributeError:
                raise CallbackError(f"callbacks={part}: {module_name} has no {attr!r}") \
                    from None
        found = _register(callbacks, target, is_module=not attr)
        if not found:
            raise CallbackError(f"callbacks={part}: found none of {', '.join(EVENTS)}")
    return callbacks


def _register(callbacks: Callbacks, target: Any, *, is_module: bool) -> int:
    if isinstance(target, dict):
        callbacks.add_mapping(target)
        return len(target)
    found = 0
    for event in EVENTS:
        method = getattr(target, event, None)
        if method is not None:
            callbacks.add(event, method)
            found += 1
    if not found and callable(target) and not is_module:
        callbacks.add("on_train_epoch_end", target)
        found = 1
    return found
