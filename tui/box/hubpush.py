"""Hub pushes that fail while a run trains: our trainer keeps the last push's outcome in
``status.json``'s ``hub`` key (``{"epoch", "commit", ...}`` after a push, ``{"error",
"epoch", ...}`` after a failure) and tries again each epoch. A failure is said once (one
toast, kept in the events) and stays as a badge until a push succeeds again, which is
said in the events: the weights on the box are then the only copy, and a user must not
learn it only when a destroy is refused."""

from __future__ import annotations

from typing import Any

from remote.watch import StatusEvent
from trainer.text import one_line
from tui.box.ports import Panes, Ports


def push_outcome(hub: Any) -> tuple[str | None, bool]:
    """``(error, pushed)`` from a status's ``hub`` key: the failure's line (``None``
    when the last push did not fail) and whether the last push committed."""
    if not isinstance(hub, dict):
        return None, False
    error = hub.get("error")
    if error:
        return one_line(error, 4000), False
    return None, bool(hub.get("commit"))


class HubPushes:
    """Whether the watched run's pushes to the Hub fail, shown on the weights badge."""

    def __init__(self, ports: Ports, panes: Panes) -> None:
        self.ports = ports
        self.panes = panes

    def status(self, ev: StatusEvent) -> None:
        """A new status of the watched run: a push that started or stopped failing."""
        state = self.ports.state
        hub = ev.read.get("hub")
        error, pushed = push_outcome(hub)
        epoch = hub.get("epoch") if isinstance(hub, dict) else None
        at = f" (epoch {epoch})" if isinstance(epoch, int) else ""
        if error is not None:
            if state.push_failing is None:
                self.ports.notify(f"Hub push failed{at}: {error} — the trainer tries "
                                  "again each epoch; until one works the weights are only "
                                  "on the box", severity="warning", timeout=20)
            state.push_failing = error
        elif pushed and state.push_failing is not None:
            state.push_failing = None
            commit = str(hub.get("commit"))[:10]
            self.ports.record(f"Hub push works again{at}: commit {commit}", "information")
        self.panes.weights_badge.show_push(state.push_failing)
