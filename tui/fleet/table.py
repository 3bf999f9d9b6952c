"""The fleet's table drawn: each row's cells and details (the rows' words, identity,
sort orders and filter are ``remote.fleet.fleetrows``'s, shared with ``gpurent
instances``). Every text a provider or a box gave is inert (``tui.fmt.safe``); a row
kept from an earlier listing (its account did not answer: ``FleetRow.stale``) says so in
its state and its figures stand at that time."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.text import Text

from remote.fleet import notes, state_words
from trainer.text import clock_time, format_duration, money, rate
from tui.fmt import safe

if TYPE_CHECKING:
    from remote.fleet import FleetRow

#: The table's columns, the short and telling first (an 80-column terminal shows the
#: first five whole, the weights verdict among them); the long notes last (the details
#: under the table say everything about the highlighted row).
COLUMNS = ("instance", "state", "$/h now", "spent", "weights", "account", "GPU", "notes")
#: How each weights verdict is drawn (``remote.fleet.boxweights``), and in short.
WEIGHTS_STYLE = {"safe": "green", "unsafe": "bold red", "unknown": "yellow"}
WEIGHTS_SHORT = {"safe": "safe", "unsafe": "NOT safe", "unknown": "?"}
#: Cells are cut at this many characters (the details hold the whole text).
CELL = 28
#: The instance and state cells are cut shorter: the weights verdict after them must fit
#: 80 columns (a Lambda instance's id is 32 characters; the details say it whole).
INSTANCE_CELL = 20
STATE_CELL = 20


def cells(row: Any, now: float) -> list[Text]:
    """One row's cells, in ``COLUMNS`` order."""
    inst = row.instance
    if inst is None:
        return [Text("-"), Text("account failed", style="red"), Text(""), Text(""),
                Text(""), safe(row.account, CELL), Text(""),
                safe(f"{row.error}; ⏎ says more", 2 * CELL, "red")]
    spent = row.spent(row.seen(now))
    verdict = row.weights
    style = "bold yellow" if row.idle is not None or row.unreachable else ""
    state = state_words(row) if row.stale is None else \
        f"{inst.state}, as of {clock_time(row.stale)}"
    state_style = "bold red" if row.interrupted is not None else \
        "yellow" if row.stale is not None else ""
    return [safe(row.target, INSTANCE_CELL), safe(state, STATE_CELL, state_style),
            Text(rate(inst.billing_per_hour)),
            Text("" if spent is None else money(spent)),
            Text("") if verdict is None else
            Text(WEIGHTS_SHORT.get(verdict.state, "?"),
                 style=WEIGHTS_STYLE.get(verdict.state, "")),
            safe(row.account, CELL), safe(inst.gpu or "?", CELL),
            safe("; ".join(notes(row, now)), 2 * CELL, style)]


def detail(row: FleetRow, now: float) -> Text:
    """Everything about one row, a line each (inert text)."""
    if row.instance is None:
        return safe(f"{row.account}: account failed: {row.error}. Its instances are not "
                    "listed; nothing can be stopped or opened from this row (r lists "
                    "again)", 700, "red")
    inst = row.instance
    head = [f"{row.target} ({row.account})", state_words(row), inst.gpu or "GPU ?",
            f"{rate(inst.price_per_hour)} running, {rate(inst.storage_per_hour)} "
            "stopped"]
    up, spent = row.uptime(row.seen(now)), row.spent(row.seen(now))
    if up is not None:
        head.append(f"up {format_duration(up)}"
                    + (f", spent {money(spent)}" if spent is not None else ""))
    if inst.ssh_host:
        head.append(f"ssh {inst.ssh_host}:{inst.ssh_port}")
    out = Text()
    out.append_text(safe(" · ".join(head), 400, "bold"))
    gpu = [] if row.box is None else row.box.gpu_words()
    lease = [] if row.lease is None else [f"lease {row.lease.deadline_words(now)}"]
    for words in (["; ".join(gpu)] if gpu else []) + \
            ([] if row.weights is None else [row.weights.words()]) + \
            [w for w in notes(row, now) if not w.startswith("lease ")] + lease:
        out.append("\n")
        out.append_text(safe(words, 600))
    return out
