"""What one box costs, as the header's money line says it: $/h, spent so far, projected
to the end of the run, and what the box bills once the run is over. Pure: read from the
box's facts (``tui.box.state.BoxState``) and the run's elapsed time."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from remote.billing import cost_report, money, rate
from remote.serverless import BILLS
from trainer.runfiles import parse_iso
from trainer.text import format_duration
from tui.box.state import BoxState
from tui.fmt import safe
from tui.widgets.header import money_line

#: Verdicts after which a box that still runs is idle, billing for nothing.
RUN_OVER = ("completed", "failed", "stopped", "dead")


def costs(state: BoxState, elapsed: float | None) -> Any:
    """The ``remote.billing.cost.CostReport`` of the run watched, ``elapsed`` seconds
    trained up to now."""
    status = dict(state.status.read.fields or {}) if state.status is not None else {}
    if elapsed is not None:
        status["elapsed_seconds"] = elapsed
    return cost_report(price_per_hour=state.spec.price, status=status,
                       instance=state.instance)


def money_text(state: BoxState, elapsed: float | None) -> Text:
    """The header's money line: $/h, spent so far, projected to finish, and what the box
    bills after the run ended. Empty for this machine when nothing said it is rented
    (no price, no instance); once the instance is destroyed, only that."""
    if state.spec.kind == "modal":
        return modal_money(state)
    if not state.bills():
        return Text("")
    if state.instance_destroyed():
        text = Text(" money: ")
        text.append(f"instance {state.spec.instance} destroyed: billing ended", style="green")
        return text
    if state.taken_away is not None:  # not the running price, nor "spent" rising
        text = Text(" money: ")
        text.append_text(safe(state.provider_said() or state.taken_away, 200, "yellow"))
        return text
    report = costs(state, elapsed)
    note = ""
    if report.per_epoch_usd is not None:
        note = f"{money(report.per_epoch_usd)}/epoch"
    if report.price_source:
        note = f"{note}  ({report.price_source})".strip()
    unpriced = f"no price from {state.spec.provider} yet" if state.has_instance() \
        else "give --price or --provider to see costs"
    return money_line(report.price_per_hour, report.spent_usd, report.projected_total_usd,
                      note, after_run_text(state), unpriced)


def modal_money(state: BoxState) -> Text:
    """A Modal app's money line: the GPU's price times the time it ran, at most how much
    more before its timeout, Modal's state of the app (as last asked), then Modal's own
    bill (last: a narrow line loses it first)."""
    text = Text(" money: ")
    view = getattr(getattr(state.spec.connector, "state", None), "last", lambda: None)()
    if view is None:
        text.append("asking Modal about the app", style="dim")
        return text
    text.append(view.money_words)
    text.append(f"  · {view.state_words}", style="yellow" if view.timed_out else "dim")
    bill = BILLS.last(view.record.launched_at)
    text.append(f"  · {bill.words(view.record.run, view.record.launched_at)}" if bill else
                "  · asking Modal for its bill", style="dim")
    return text


def after_run_text(state: BoxState) -> Text | None:
    """Once the run is over: ``idle 7 min: $0.41 and counting`` while the instance still
    runs and no other run of the box trains, or how its billing ended (``None`` while the
    run goes on)."""
    if state.status is None or state.status.health.verdict not in RUN_OVER:
        return None
    guard, instance = state.guard, state.instance
    outcome = (guard.outcome or {}) if guard is not None and guard.state == "done" else {}
    instance_state = getattr(instance, "state", None)
    if instance_state == "destroyed" or (outcome.get("confirmed") and
                                         outcome.get("action") == "destroy"):
        return Text("instance destroyed: billing ended", style="green")
    if state.instance_stopped():
        return Text(f"instance stopped: its disk bills {rate(state.storage_per_hour())}",
                    style="yellow")
    going = state.other_going()
    if going is not None:  # the box is not idle: its money is that run's
        return safe(f"run {going} trains on this box", 80, "dim")
    ended = parse_iso(state.status.read.get("updated_at") or "")
    if ended is None:
        return None
    idle = max(0.0, state.status.box_time(state.clock()) - ended)  # the box's clock
    price = state.price_per_hour()
    usd = None if price is None else idle * price / 3600
    when = f"{int(idle // 60)} min" if idle < 3600 else format_duration(idle)
    return Text(f"idle {when}: {money(usd)} and counting", style="bold red")
