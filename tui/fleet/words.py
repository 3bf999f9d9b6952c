"""The fleet's words outside its table: whether a watchdog was seen enforcing leases
(its last pass, as ``gpurent watchdog`` records it on this laptop), and what the quit
dialog says of the instances the fleet listed (quitting ends none of their billing)."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from trainer.text import clock_time
from tui.fmt import safe


def watchdog_words(watchdog: Any, fleet: Any, now: float) -> Text:
    """One line: the leases here and whether a watchdog holds to them (``watchdog``: a
    ``remote.billing.WatchdogPass``, or ``None`` for none recorded)."""
    from remote.fleet import NO_WATCHDOG

    leased = 0 if fleet is None else sum(1 for r in fleet.rows if r.lease is not None)
    head = f"{leased} lease{'s' * (leased != 1)} here; " if fleet is not None else ""
    if watchdog is None:
        return safe(head + NO_WATCHDOG, 300, "yellow" if leased else "dim")
    seen = watchdog.seen(now)
    return safe(head + watchdog.words(now), 300,
                "dim" if seen else "bold yellow" if leased else "yellow")


def lease_enforcers(guard: Any, now: float | None = None) -> str:
    """Who ends an instance's billing when its lease runs out, as things stand: the
    watchdog when one was seen passing (``gpurent watchdog``), and the box's guard when
    it is armed (``guard``: ``remote.runs.GuardState`` or ``None``); neither is said."""
    import time

    from remote.fleet import last_pass

    now = time.time() if now is None else now
    try:
        seen = last_pass()
    except OSError:
        seen = None
    watchdog = "a watchdog ends it (seen " + \
        f"{max(0, int((now - seen.at) // 60))} min ago)" if seen is not None and \
        seen.seen(now) else "NO watchdog seen (gpurent watchdog)"
    armed = guard is not None and getattr(guard, "watching", False)
    return watchdog + ("; the box's guard too (armed)" if armed else
                       "; the box's guard is NOT armed (a arms it)")


def quit_words(fleet: Any) -> tuple[Text, bool] | None:
    """The quit dialog's paragraph about the fleet (``None``: nothing listed yet):
    quitting stops none of them, with the total as last listed; and whether any of them
    bills its full price."""
    if fleet is None or not fleet.rows:
        return None
    billing = [r for r in fleet.rows if r.instance is not None and r.full_price]
    text = Text()
    text.append("The fleet", style="bold")
    text.append_text(safe(f" (as of {clock_time(fleet.now, True)}): "
                          f"{fleet.billing_words()}. ", 400))
    if billing:
        text.append("Quitting stops none of them: they keep billing.", style="bold yellow")
    else:
        text.append("Quitting changes nothing there.")
    return text, bool(billing)
