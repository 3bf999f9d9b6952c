"""A listing made again keeps what the last one knew of an account that did not answer
now (a 429, a 500, a timeout): its instances stay, each marked with the time it was last
listed (``FleetRow.stale``), so that a transient error never hides instances that bill
nor lowers the total as if they had stopped (``Fleet.billing_words`` says it is
incomplete). Rows listed now, or of accounts that answered, are never replaced."""

from __future__ import annotations

from dataclasses import replace

from remote.fleet.fleet import Fleet, FleetRow


def keep_last_known(previous: Fleet | None, fresh: Fleet) -> Fleet:
    """``fresh`` with the last-known rows of each account that failed in it and listed
    before (``previous``, itself possibly holding kept rows), each right after its
    account's failure row."""
    if previous is None:
        return fresh
    failed = {row.account for row in fresh.rows if row.instance is None}
    listed = {row.target for row in fresh.rows if row.instance is not None}
    kept: dict[str, list[FleetRow]] = {}
    for row in previous.rows:
        if row.instance is not None and row.account in failed and row.target not in listed:
            kept.setdefault(row.account, []).append(
                replace(row, stale=row.stale if row.stale is not None else previous.now))
    if not kept:
        return fresh
    rows: list[FleetRow] = []
    for row in fresh.rows:
        rows.append(row)
        if row.instance is None:
            rows.extend(kept.pop(row.account, []))
    return replace(fresh, rows=rows)
