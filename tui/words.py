"""The words for leaving: what quitting leaves running and what it costs, per box and run
state. Pure functions of plain facts (``Standing``), so the quit dialog, the farewell
printed on exit and the tests say the same thing; no widget here. Only what was observed
is said: a box never reached gets no words about runs, only what its provider said of
its instance (and how long ago, once that is a while), a destroyed instance none about
money."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text

from remote.billing import money
from trainer.health import GOING
from trainer.text import format_duration
from tui.fmt import safe

#: How an ended run reads ("run exp1 completed").
ENDED = {"completed": "completed", "failed": "failed", "stopped": "was stopped",
         "dead": "died (its process is gone)",
         "unreadable": "has an unreadable status",
         "taken": "was taken away with its instance"}


@dataclass(frozen=True)
class Standing:
    """What one box tab leaves behind when the app quits."""

    title: str
    #: This machine (``--local`` / ``--demo``): nothing bills.
    local: bool
    demo: bool
    run: str | None
    verdict: str | None
    price: float | None
    weights_safe: bool | None = None
    weights_where: str | None = None
    guard_watching: bool = False
    guard_summary: str = ""
    #: A provider instance that the app can stop now (``--provider`` and ``--instance``,
    #: its API key, a connection to check that it is the box).
    can_stop_instance: bool = False
    reattach: str = ""
    #: Whether the box ever answered; ``why_not``: the last failed try, when it never did.
    reached: bool = True
    why_not: str = ""
    #: The box's instance was destroyed (``instance``: its id).
    destroyed: bool = False
    instance: str = ""
    #: The box's instance is known to be stopped (by the guard, or the provider says
    #: so): only its disk bills, ``storage_price`` per hour (``None``: unknown).
    stopped: bool = False
    storage_price: float | None = None
    #: What the provider last said of the instance, in words (``provider_words``).
    provider_said: str = ""

    @property
    def known(self) -> bool:
        """Whether anything can be said about runs and money: a box that answered and
        still exists."""
        return self.reached and not self.destroyed

    @property
    def training(self) -> bool:
        """Whether the watched run is still training."""
        return self.known and self.verdict in GOING

    @property
    def billing(self) -> bool:
        """A rented box: it bills whether or not anything trains on it."""
        return not self.local and self.known

    def rate(self) -> str:
        """``$3.00/h`` or ``$?/h``."""
        return f"{money(self.price)}/h"

    def stopped_words(self) -> str:
        """``instance 41 is stopped: its disk bills $0.0694/h``."""
        which = f"instance {self.instance}" if self.instance else "the instance"
        return f"{which} is stopped: its disk bills {money(self.storage_price)}/h"


def verdict_line(run: str, verdict: str, reason: str) -> str:
    """``run exp completed after 30/30 epochs``, ``run exp failed: ValueError: …``: a
    run's new verdict and why, the verdict said once (never "completed: completed")."""
    reason = reason.strip()
    if reason.lower() in ("", verdict.lower()):
        return f"run {run} {verdict}"
    if reason.lower().startswith((f"{verdict} after ", f"{verdict} at ")):
        return f"run {run} {reason}"
    return f"run {run} {verdict}: {reason}"


def _run_words(s: Standing) -> str:
    run = f"run {s.run}" if s.run else "no run"
    if s.verdict is None or not s.run:
        return run
    if s.training:
        return f"{run} keeps training" if s.verdict != "stalled" else f"{run} is stalled"
    return f"{run} {ENDED.get(s.verdict, 'is ' + s.verdict)}"


#: A provider's word older than this many seconds says how old it is.
FRESH_SECONDS = 60.0


def provider_words(provider: str, state: str, billing: float | None, age: float) -> str:
    """What the provider said of an instance: ``vast says it is running and bills
    $0.45/h`` (``billing``: per hour in that state), ``(asked 5m00s ago)`` after a
    while."""
    said = f"{provider} says it is {state}"
    if state == "stopped":
        said += f": its disk bills {money(billing)}/h"
    elif billing is not None:
        said += f" and bills {money(billing)}/h"
    if age > FRESH_SECONDS:
        said += f" (asked {format_duration(age)} ago)"
    return said


def _unknown_words(s: Standing) -> str:
    """A box never reached (with what its provider said), or whose instance was
    destroyed."""
    if s.destroyed:
        return f"instance {s.instance} destroyed" if s.instance else "instance destroyed"
    line = f"never reached ({s.why_not})" if s.why_not else "never reached"
    return f"{line}; {s.provider_said}" if s.provider_said else line


def _weights_words(s: Standing) -> str:
    if s.weights_safe is None:
        return "weights not checked"
    if s.weights_safe and s.weights_where:
        return f"weights safe ({s.weights_where})"
    if s.weights_safe:
        return "no weights yet"
    return "weights NOT safe (only on the box)"


def quit_text(standings: list[Standing]) -> Text:
    """The quit dialog's body: one paragraph per box, in the words of its state."""
    text = Text()
    for n, s in enumerate(standings):
        if n:
            text.append("\n\n")
        text.append_text(safe(s.title, 60, "bold"))
        text.append(": ")
        if not s.local and not s.known:
            text.append_text(safe(_unknown_words(s), 400))
            text.append("." if s.destroyed or s.provider_said
                        else ": nothing is known about it.")
            continue
        text.append_text(safe(_run_words(s), 120))
        if s.local:
            if s.demo and s.training:
                text.append(" on this machine (the demo trainer; stop it below or leave "
                            "it to finish).")
            else:
                text.append(" on this machine.")
            continue
        if s.training:
            text.append(f". The box keeps billing {s.rate()}. ")
            text.append(_weights_words(s) + ". ",
                        style="" if s.weights_safe else "bold yellow")
            if s.guard_watching:
                text.append_text(safe(s.guard_summary, 120, "dim"))
            else:
                text.append("The guard is off: arm the guard?", style="bold yellow")
        elif s.stopped:
            text.append(f"; {s.stopped_words()}.")
        else:
            text.append(f". Nothing trains, but the box is idle at {s.rate()}", style="bold")
            text.append(" — stop it?" if s.can_stop_instance
                        else " until you stop it at your provider.")
    return text


def quit_offers(standings: list[Standing]) -> list[tuple[str, str]]:
    """Extra buttons of the quit dialog, ``(id, label)``: what the state suggests
    doing before leaving (the first box that needs it)."""
    offers: list[tuple[str, str]] = []
    if any(s.billing and s.training and not s.guard_watching for s in standings):
        offers.append(("arm", "Arm the guard"))
    if any(s.billing and not s.training and s.can_stop_instance and not s.stopped
           for s in standings):
        offers.append(("stop-instance", "Stop the instance"))
    if any(s.demo and s.training for s in standings):
        offers.append(("stop-demo", "Stop the demo and quit"))
    return offers


def quit_title(standings: list[Standing]) -> str:
    """The dialog's title and its quit button's label."""
    return "Detach and quit" if any(s.billing or s.training for s in standings) else "Quit"


def farewell(s: Standing) -> str:
    """The line printed on exit for one box, with the command that reattaches."""
    if not s.local and not s.known:
        line = f"{s.title}: {_unknown_words(s)}."
        if s.reattach and not s.destroyed:
            line += f"\n  try again: {s.reattach}"
        return line
    if s.local:
        where = "on this machine"
        line = f"{s.title}: {_run_words(s)} {where}." if s.run else f"{s.title}: no run."
    elif s.training:
        line = (f"Detached from {s.title}: {_run_words(s)}; the box bills {s.rate()} "
                f"({_weights_words(s)}; {'guard armed' if s.guard_watching else 'guard off'}).")
    elif s.stopped:
        line = f"Detached from {s.title}: {_run_words(s)}; {s.stopped_words()}."
    else:
        line = (f"Detached from {s.title}: {_run_words(s)}; the box is idle and bills "
                f"{s.rate()} until you stop it.")
    if s.reattach:
        line += f"\n  reattach: {s.reattach}"
    return line


def glance_words(url: str | None) -> str:
    """What ``P`` says: the link of the glance page this laptop serves (its token after
    ``#t=``), or how to start one."""
    if url is None:
        return ("No glance page runs on this laptop: `gpurent glance` serves one (read-only, "
                "for a phone) and prints its link.")
    return (f"Glance page (read-only, for a phone): {url} — the part after #t= is its "
            "token: whoever holds the link can read the page. Copied to the clipboard "
            "where the terminal allows.")
