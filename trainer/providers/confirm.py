"""Stop, start and destroy, confirmed by polling the provider's API.

A provider answering "success" only means it accepted the request. "Stopped" and
"destroyed" are reported only once ``get_instance`` shows it; an instance still there
after a destroy is an alarm (``StillBilling``), never a success.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass

from trainer.providers.base import Instance, NotFoundError, Provider, ProviderError
from trainer.text import rate

#: How long to poll for the outcome of an action, in seconds.
DEFAULT_CONFIRM_TIMEOUT = 180.0
#: Seconds between polls.
DEFAULT_POLL_INTERVAL = 5.0


@dataclass(frozen=True)
class ActionOutcome:
    """What an action achieved, as seen by the API after it.

    ``confirmed``: the instance reached the wanted state (``stopped``, ``running``,
    ``destroyed``). ``state`` is the last state seen; ``billing_per_hour`` what it still
    costs then (``None`` when unknown); ``alarm`` is set when it keeps billing at the
    full price after a stop or destroy; ``poll_error`` is the last failed poll when the
    API could not be asked at the end (the outcome is then unknown rather than refused)."""

    action: str
    instance_id: str
    confirmed: bool
    state: str
    billing_per_hour: float | None
    polls: int
    message: str
    alarm: bool = False
    poll_error: str = ""

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


class StillBilling(ProviderError):
    """A destroy was accepted but the instance is still there after the confirmation
    timeout: it may still be billing. ``outcome`` holds the last state seen."""

    def __init__(self, outcome: ActionOutcome) -> None:
        super().__init__(outcome.message, kind="still_billing")
        self.outcome = outcome


def _poll(provider: Provider, iid: str, done: Callable[[Instance | None], bool], *,
          timeout: float, interval: float, sleep: Callable[[float], None],
          clock: Callable[[], float]) -> tuple[Instance | None, bool, int, str]:
    """Poll until ``done(instance)`` (``None`` = not found) or the timeout.

    Returns the last instance, whether done, the number of polls and the last transient
    error (a poll that failed after its retries does not end the wait)."""
    deadline = clock() + timeout
    polls, last, error = 0, None, ""
    while True:
        polls += 1
        try:
            last = provider.get_instance(iid)
        except NotFoundError:
            return None, done(None), polls, ""
        except ProviderError as exc:
            if exc.kind in ("auth", "bad_input", "unsupported", "manual"):
                raise
            error = str(exc)
        else:
            error = ""
            if done(last):
                return last, True, polls, ""
        if clock() >= deadline:
            return last, False, polls, error
        sleep(max(0.0, min(interval, deadline - clock())))


def destroy_and_confirm(provider: Provider, instance_id: str, *,
                        timeout: float = DEFAULT_CONFIRM_TIMEOUT,
                        interval: float = DEFAULT_POLL_INTERVAL,
                        sleep: Callable[[float], None] = time.sleep,
                        clock: Callable[[], float] = time.monotonic,
                        before: Instance | None = None) -> ActionOutcome:
    """Destroy the instance and poll until the API confirms it is gone.

    Raises ``NotFoundError`` when the id does not exist to begin with (a typo must not
    look like a success) and ``StillBilling`` when it is still there at the timeout.
    ``before``: the instance as the caller just read it (no second read)."""
    iid = provider.check_id(instance_id)
    before = before or provider.get_instance(iid)
    if before.gone:
        return ActionOutcome("destroy", iid, True, "destroyed", 0.0, 1,
                             f"{provider.title} instance {iid} was already destroyed")
    # NotFound: gone between our look and the request (or a retried request did land).
    with contextlib.suppress(NotFoundError):
        provider.destroy(iid)
    last, done, polls, error = _poll(provider, iid, lambda i: i is None or i.gone,
                                     timeout=timeout, interval=interval, sleep=sleep,
                                     clock=clock)
    if done:
        return ActionOutcome("destroy", iid, True, "destroyed", 0.0, polls,
                             f"{provider.title} instance {iid} is destroyed (confirmed by "
                             "the API); billing has ended")
    state = last.state if last else "unknown"
    billing = last.billing_per_hour if last else before.price_per_hour
    why = f"; last poll failed: {error}" if error else ""
    outcome = ActionOutcome(
        "destroy", iid, False, state, billing, polls,
        f"ALARM: {provider.title} instance {iid} still exists {timeout:g} s after the destroy "
        f"was accepted (state {state}, may be billing {rate(billing)}){why}; check it: "
        f"{provider.console_hint('destroy', iid)}",
        alarm=True, poll_error=error)
    raise StillBilling(outcome)


def stop_and_confirm(provider: Provider, instance_id: str, *,
                     timeout: float = DEFAULT_CONFIRM_TIMEOUT,
                     interval: float = DEFAULT_POLL_INTERVAL,
                     sleep: Callable[[float], None] = time.sleep,
                     clock: Callable[[], float] = time.monotonic,
                     before: Instance | None = None) -> ActionOutcome:
    """Stop the instance and poll until it is stopped. Not confirmed in time: the outcome
    says so with ``alarm`` set (it keeps billing the full price until it stops). A state
    that takes no stop (a RunPod pod in ERROR) is a ``ProviderError`` of kind
    ``unsupported`` that names the only way out. ``before``: the instance as the caller
    just read it (no second read)."""
    iid = provider.check_id(instance_id)
    if not provider.can_stop:
        raise ProviderError(f"{provider.title} cannot stop an instance; only destroy ends "
                            "its billing", kind="unsupported")
    before = before or provider.get_instance(iid)
    if before.state == "stopped":
        return ActionOutcome("stop", iid, True, "stopped", before.billing_per_hour, 1,
                             f"{provider.title} instance {iid} was already stopped")
    if before.gone:
        raise NotFoundError(f"{provider.title}: instance {iid} is destroyed; nothing to stop")
    if not provider.can_stop_now(before):
        raise ProviderError(f"{provider.title} cannot stop instance {iid} while it is "
                            f"{before.state} ({before.raw_state or '?'}): only a terminate "
                            f"ends its billing of {rate(before.price_per_hour)}: "
                            f"{provider.console_hint('destroy', iid)}", kind="unsupported")
    try:
        provider.stop(iid)
    except ProviderError as exc:
        if exc.kind != "conflict":
            raise
        now = provider.get_instance(iid)  # 409: fine only when it is on its way down
        if now.state not in ("stopped", "stopping"):
            raise
    last, done, polls, error = _poll(provider, iid, lambda i: i is not None and
                                     i.state == "stopped", timeout=timeout,
                                     interval=interval, sleep=sleep, clock=clock)
    why = f"; last poll failed: {error}" if error else ""
    if last is None and error:  # every poll failed: nothing is known
        return ActionOutcome("stop", iid, False, "unknown", before.price_per_hour, polls,
                             f"{provider.title} instance {iid}: the stop was accepted but "
                             f"its state could not be read{why}", alarm=True,
                             poll_error=error)
    if last is None:
        return ActionOutcome("stop", iid, False, "destroyed", 0.0, polls,
                             f"{provider.title} instance {iid} disappeared while stopping")
    if done:
        return ActionOutcome("stop", iid, True, "stopped", last.billing_per_hour, polls,
                             f"{provider.title} instance {iid} is stopped; its disk keeps "
                             f"billing {rate(last.billing_per_hour)}; its GPUs are "
                             "released and may be gone when you start it again")
    return ActionOutcome(
        "stop", iid, False, last.state, last.billing_per_hour, polls,
        f"{provider.title} instance {iid} is still {last.state} {timeout:g} s after the "
        f"stop was accepted (billing {rate(last.billing_per_hour)}){why}",
        alarm=True, poll_error=error)


def start_and_confirm(provider: Provider, instance_id: str, *,
                      timeout: float = DEFAULT_CONFIRM_TIMEOUT,
                      interval: float = DEFAULT_POLL_INTERVAL,
                      sleep: Callable[[float], None] = time.sleep,
                      clock: Callable[[], float] = time.monotonic,
                      keep_waiting: bool = False) -> ActionOutcome:
    """Start a stopped instance and poll until it runs. A start that does not complete is
    reported (its GPUs may have been rented by someone else meanwhile) and cancelled: a
    start that waits for GPUs (Vast's "scheduling") can fire hours later at the full
    price with nobody watching, so a stop is sent unless ``keep_waiting``."""
    iid = provider.check_id(instance_id)
    if not provider.can_stop:
        raise ProviderError(f"{provider.title} cannot start a stopped instance (it has no "
                            "stop)", kind="unsupported")
    before = provider.get_instance(iid)
    if before.state == "running":
        return ActionOutcome("start", iid, True, "running", before.billing_per_hour, 1,
                             f"{provider.title} instance {iid} was already running")
    try:
        provider.start(iid)
    except ProviderError as exc:
        if exc.kind != "conflict":
            raise
        now = provider.get_instance(iid)
        if now.state not in ("starting", "running"):
            raise
    last, done, polls, error = _poll(provider, iid, lambda i: i is not None and
                                     i.state in ("running", "error"), timeout=timeout,
                                     interval=interval, sleep=sleep, clock=clock)
    if last is None:
        raise NotFoundError(f"{provider.title}: instance {iid} disappeared while starting")
    if done and last.state == "running":
        return ActionOutcome("start", iid, True, "running", last.billing_per_hour, polls,
                             f"{provider.title} instance {iid} is running (billing "
                             f"{rate(last.billing_per_hour)})")
    why = f"; last poll failed: {error}" if error else ""
    said = (f"{provider.title} instance {iid} is {last.state}, not running, {timeout:g} s "
            f"after the start (its GPUs may have been taken){why}")
    if keep_waiting or last.state not in ("starting", "stopped"):
        kept = "; the start is left pending: it can begin billing " \
            f"{rate(last.price_per_hour)} whenever its GPUs free up" if keep_waiting else ""
        return ActionOutcome("start", iid, False, last.state, last.billing_per_hour, polls,
                             said + kept)
    try:
        provider.stop(iid)
    except ProviderError as exc:
        return ActionOutcome(
            "start", iid, False, last.state, last.billing_per_hour, polls,
            f"{said}; cancelling the pending start failed ({exc}): it can begin billing "
            f"{rate(last.price_per_hour)} later: {provider.console_hint('stop', iid)}",
            alarm=True, poll_error=error)
    return ActionOutcome("start", iid, False, last.state, last.billing_per_hour, polls,
                         f"{said}; the pending start was cancelled (a stop sent), so it "
                         f"cannot begin billing {rate(last.price_per_hour)} unseen: try "
                         "again later, rent another instance, or start it with "
                         "--keep-waiting (and a lease)")
