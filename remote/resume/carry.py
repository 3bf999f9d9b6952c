"""The guard and the lease move with a run to its new box (``gpurent resume ... --on``).

The old box is found in this laptop's intents (``remote.billing.intents``): the
instance the run (its Hub repository and name) was launched on from here. Its lease
(``STATE/leases.json``) moves to the new instance with the time it had left and the same
ending, and is written on the new box for its guard; the guard armed on the old box from
here is armed again on the new one with the same ``--when``/``--then`` (and the same
key choice, poll and stall options), the webhooks from the config file. What cannot be
moved is said with the command that would do it.
"""

from __future__ import annotations

import posixpath
import time

from remote.billing.intents import RunIntent, intents, move_intent, want_running
from remote.billing.providers import ConfigError, resolve_api_key
from remote.fleet.arming import GuardOrder, arm
from remote.fleet.leases import change_lease, lease_for
from remote.runs.guard import GuardError
from remote.transport.base import Transport, TransportError
from trainer.text import clean_text, one_line


def old_instance(repo: str, name: str, new: str) -> str | None:
    """The instance (other than ``new``) this laptop last launched run ``repo``:``name``
    on: of several (the same name and repo used again on another box), the one still
    wanted running, the latest first."""
    found = [i for t, i in intents().items() if t != new and i.run(repo, name)]
    return max(found, key=lambda i: (i.want == "running", i.since)).target if found else None


def carry_over(transport: Transport, run_dir: str, repo: str, name: str,
               new: str, instance: tuple[str, str] | None) -> list[str]:
    """Move the lease and the guard of run ``repo``:``name`` to box ``new`` (reached by
    ``transport``; ``instance``: its ``(provider, id)`` when it is a rented instance);
    what was done or is left to do, one line each."""
    old = old_instance(repo, name, new)
    arm_hint = f"`gpurent guard {new}:{run_dir} arm --when done --then stop`"
    project = posixpath.dirname(run_dir.rstrip("/"))
    if old is None and instance is not None:
        want_running(new, RunIntent(name, project, repo))
    if old is None:
        return [f"this laptop knows no guard or lease of the run's old box: arm one here "
                f"with {arm_hint} and `gpurent lease {new} DURATION`"]
    if instance is None:
        return [f"{new} is not a rented instance: the lease and the guard of {old} do not "
                f"move to it; arm its guard with {arm_hint}"]
    before = move_intent(old, new, name, project)
    said = [_move_lease(transport, old, new)]
    guard = before.guard if before is not None else None
    if guard is None:
        said.append(f"no guard was armed on {old} from here: arm one with {arm_hint}")
        return said
    order = GuardOrder.kept(guard)
    when, then = order.when, order.then
    provider, iid = instance
    try:
        state = arm(transport, run_dir, order, provider=provider, instance=iid,
                    key=resolve_api_key(provider) if order.send_account_key else None).guard
    except (GuardError, ConfigError, TransportError) as exc:
        said.append(f"the guard of {old} (--when {when} --then {then}) was not armed "
                    f"here: {one_line(clean_text(str(exc)), 200)}; arm it with "
                    f"`gpurent guard {new}:{run_dir} arm --when {when} --then {then}`")
        return said
    said.append(f"guard armed here as on {old}: --when {when} --then {then} "
                f"({state.state})")
    return said


def _move_lease(transport: Transport, old: str, new: str) -> str:
    lease = lease_for(old)
    if lease is None:
        return f"{old} had no lease here: none to move"
    change_lease(old, None)
    left = lease.left(time.time())
    if left <= 0:
        return f"the lease of {old} had run out: not moved (give {new} one: gpurent lease)"
    moved, why = change_lease(new, left, lease.then, transport)
    told = f"not on the box ({one_line(why, 120)})" if why else "and on the box"
    return (f"lease moved from {old} to {new}: until {moved.until_at}, then {moved.then}, "
            f"kept on this laptop {told}")
