"""Arming and disarming the guard of an instance's run, one way for ``gpurent guard``,
the TUI's guard key and a run moved to another box (``remote.resume.carry``): the
lease first when one is asked for (``remote.fleet.leases.change_lease``), the guard
on the box (``remote.runs.guard``, the webhooks of the config file's ``[notify]`` added
to those given), then the order kept in this laptop's intents
(``remote.billing.intents.set_guard``), to arm it again where the run moves."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from remote.billing.intents import set_guard
from remote.billing.providers import notify_config
from remote.fleet.leases import Lease, change_lease
from remote.runs.guard import DISARM_WAIT, GuardState, arm_guard, disarm_guard
from remote.transport.base import Transport


@dataclass(frozen=True)
class GuardOrder:
    """What the guard is armed with, as ``gpurent guard arm`` takes it (and as the
    intents keep it): the trigger, the ending, the hard lifetime in hours, whether the
    laptop's account key is sent, the provider API's base URL, and the guard's tuning."""

    when: str = "done"
    then: str = "stop"
    max_hours: float | None = None
    send_account_key: bool = False
    base_url: str | None = None
    poll: float | None = None
    stall_minutes: float | None = None

    @classmethod
    def kept(cls, entry: dict[str, Any]) -> GuardOrder:
        """The order an intent kept (``set_guard``'s), its gaps the defaults."""
        return cls(str(entry.get("when") or "done"), str(entry.get("then") or "stop"),
                   entry.get("max_hours"), bool(entry.get("send_account_key")),
                   entry.get("base_url"), entry.get("poll"), entry.get("stall_minutes"))


@dataclass(frozen=True)
class Armed:
    """The guard's state once armed, and the lease given with it (``None``: none was
    asked for) and why the box was not told of it (``""``: it was)."""

    guard: GuardState
    lease: Lease | None = None
    told: str = ""


def arm(transport: Transport, run_dir: str, order: GuardOrder, *,
        provider: str | None = None, instance: str | None = None, key: str | None = None,
        url: str | None = None, notify: Sequence[str] = (),
        notify_format: str | None = None, record: str | None = None,
        lease: tuple[str, float] | None = None,
        on_lease: Callable[[Lease, str], None] | None = None) -> Armed:
    """Arm the guard of ``run_dir`` on ``transport``'s box with ``order``: first the
    lease ``(instance target, seconds)`` when given (ending in ``order.then``, on this
    laptop and the box; ``on_lease`` hears of it at once), then the guard (``provider``,
    ``instance``, the account ``key`` sent only with ``order.send_account_key``; ``url``:
    the API base URL the guard uses, default ``order.base_url``; ``notify`` and the config
    file's webhooks), then, with
    ``record`` (the instance named: ``vast:4242``), the order in the intents. Raises as
    ``arm_guard`` does (``GuardError``, ``TransportError``) and ``ConfigError`` for a
    bad ``[notify]``; nothing is recorded then."""
    given: Lease | None = None
    told = ""
    if lease is not None:
        given, told = change_lease(lease[0], lease[1], order.then, transport)
        if on_lease is not None:
            on_lease(given, told)
    urls, fmt = notify_config()
    guard = arm_guard(transport, run_dir, order.when, order.then, order.max_hours,
                      provider, instance, key, send_account_key=order.send_account_key,
                      base_url=url or order.base_url, notify=[*notify, *urls],
                      notify_format=notify_format or fmt, poll=order.poll,
                      stall_minutes=order.stall_minutes)
    if record is not None:
        set_guard(record, asdict(order))
    return Armed(guard, given, told)


def disarm(transport: Transport, run_dir: str, *, record: str | None = None,
           wait: float = DISARM_WAIT) -> GuardState | None:
    """Disarm the guard of ``run_dir`` (waiting up to ``wait`` seconds for it to stand
    down) and, with ``record`` (the instance named), forget its order in the intents."""
    guard = disarm_guard(transport, run_dir, wait=wait)
    if record is not None:
        set_guard(record, None)
    return guard
