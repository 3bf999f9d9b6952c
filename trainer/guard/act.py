"""Ending an instance's billing without giving up: the guard's action after a trigger.

Each step is one request confirmed by polling the API (``trainer.providers.confirm``).
What happens next depends on how the step failed:

* the API failed (5xx, 429, timeout, no connection): the same step again, after a backoff
  that doubles up to a cap (``Retry-After`` honoured), until the hard deadline;
* the provider accepted the step but the instance did not change (or refused it with
  another answer): the next step of the ladder. A destroy is re-sent once, then the
  instance is stopped (the disk is kept: a stop cannot lose the weights); the last step
  repeats until the deadline;
* the key or the request is wrong (401/403, bad input, unsupported): nothing a retry
  can fix: an alarm at once.

A stop where a destroy was asked, and any end without a confirmed outcome, is an alarm:
the person must look. Standard library only.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainer.providers.base import NotFoundError, Provider, ProviderError
from trainer.providers.confirm import (
    ActionOutcome,
    StillBilling,
    destroy_and_confirm,
    stop_and_confirm,
)
from trainer.text import format_duration, rate

#: Provider failures that a later try may not meet: retried, same step.
TRANSIENT = ("server", "timeout", "network", "rate_limited")
#: Failures no retry can fix: an alarm at once.
FATAL = ("auth", "bad_input", "unsupported", "manual")

#: ``record(step, text, level)``: one step's result, logged with its time.
Record = Callable[[str, str, int], None]


@dataclass(frozen=True)
class Policy:
    """How hard the guard tries (seconds)."""

    confirm_timeout: float = 180.0
    interval: float = 5.0
    backoff: float = 5.0
    max_backoff: float = 60.0
    give_up_after: float = 86400.0


@dataclass(frozen=True)
class Ending:
    """How it ended: ``state`` ``done`` (billing ended as asked) or ``alarm``."""

    state: str
    message: str
    outcome: dict[str, Any]

    @property
    def alarm(self) -> bool:
        """Whether a person must look."""
        return self.state == "alarm"


def ladder(action: str, can_stop: bool) -> tuple[str, ...]:
    """The steps for ``action``; the last one repeats until the deadline."""
    if action == "destroy":
        return ("destroy", "destroy", "stop") if can_stop else ("destroy",)
    return ("stop",)


def _outcome(action: str, step: str, iid: str, confirmed: bool, state: str,
             billing: float | None, tries: int, message: str) -> dict[str, Any]:
    return {"action": step, "wanted": action, "instance_id": iid, "confirmed": confirmed,
            "state": state, "billing_per_hour": billing, "tries": tries,
            "message": message, "alarm": not confirmed or step != action}


def end_billing(provider: Provider, iid: str, action: str, policy: Policy, record: Record,
                *, sleep: Callable[[float], None] = time.sleep,
                clock: Callable[[], float] = time.monotonic) -> Ending:
    """Stop or destroy ``iid`` (``action``) until the API confirms a billing end or the
    deadline passes; every step goes to ``record``."""
    title = provider.title
    steps = ladder(action, provider.can_stop)
    start = clock()
    deadline = start + policy.give_up_after
    index = tries = failures = 0

    def ending(state: str, step: str, message: str, level: int, *, confirmed: bool,
               at: str, billing: float | None) -> Ending:
        record(step, message, level)
        return Ending(state, message, _outcome(action, step, iid, confirmed, at, billing,
                                               tries, message))

    def give_up(step: str, why: str, at: str = "unknown",
                billing: float | None = None) -> Ending:
        return ending("alarm", step, f"ALARM: {why}; the instance may still be billing: "
                      f"{provider.console_hint(action, iid)}", logging.CRITICAL,
                      confirmed=False, at=at, billing=billing)

    while True:
        step = steps[min(index, len(steps) - 1)]
        tries += 1
        run = destroy_and_confirm if step == "destroy" else stop_and_confirm
        retry_after = None
        got: ActionOutcome | None = None
        try:
            got = run(provider, iid, timeout=policy.confirm_timeout, interval=policy.interval)
        except StillBilling as exc:
            got = exc.outcome
        except NotFoundError:
            return ending("done", action, f"{title} instance {iid} no longer exists: "
                          "nothing bills", logging.INFO, confirmed=True, at="destroyed",
                          billing=0.0)
        except ProviderError as exc:
            if exc.kind in FATAL:
                return give_up(step, f"{step} of {title} instance {iid} failed: {exc}")
            if exc.kind not in TRANSIENT:
                index += 1  # refused in a way a retry will not change: the next step
            failures += 1
            retry_after, why, at, billing = exc.retry_after, f"{step} failed: {exc}", \
                "unknown", None
        if got is not None:
            if got.confirmed and step == action:
                return ending("done", step, got.message, logging.INFO, confirmed=True,
                              at=got.state, billing=got.billing_per_hour)
            if got.confirmed:  # stopped because the destroy did not take
                return ending(
                    "alarm", step, f"ALARM: the destroy of {title} instance {iid} did not "
                    f"take after {steps.count('destroy')} tries; it is stopped instead and "
                    f"its disk keeps billing {rate(got.billing_per_hour)}: destroy it by "
                    f"hand: {provider.console_hint('destroy', iid)}", logging.CRITICAL,
                    confirmed=True, at=got.state, billing=got.billing_per_hour)
            if got.state == "destroyed":  # it vanished while stopping
                return ending("done", action, f"{title} instance {iid} is gone: nothing "
                              "bills", logging.INFO, confirmed=True, at="destroyed",
                              billing=0.0)
            at, billing = got.state, got.billing_per_hour
            if got.poll_error:  # the API failed while confirming: the same step again
                failures += 1
                why = got.message
            else:  # accepted, and nothing happened: the next step at once
                failures = 0
                index += 1
                after = steps[min(index, len(steps) - 1)]
                then = "re-sending it" if after == step else f"trying {after} instead"
                why = (f"{step} accepted, but the instance is still {got.state} after "
                       f"{policy.confirm_timeout:g} s (billing {rate(billing)}); {then}")
        left = deadline - clock()
        if left <= 0:
            return give_up(step, f"gave up after {tries} tries over "
                                 f"{format_duration(clock() - start)}; last: {why}", at,
                           billing)
        if not failures:
            record(step, why, logging.ERROR)
            continue
        delay = min(policy.max_backoff, left, retry_after if retry_after is not None
                    else policy.backoff * 2 ** (failures - 1))
        record(step, f"{why} (try {tries}); trying again in {format_duration(delay)}",
               logging.WARNING)
        sleep(delay)
