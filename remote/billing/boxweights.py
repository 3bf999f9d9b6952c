"""Whether the weights of a fleet box are safe off it: the teardown gate's own verdict
(``remote.weights.safety``: a Hub copy counts only in the user's own repositories, asked
with the user's token; a laptop copy only while the pull ledger still matches), asked
on the connection the fleet's probe opened, through the gate (``remote.link``: the
trainer ships on that exec's stdin when the box does not hold it yet).

A check that fails, or does not end within its limit, is ``unknown`` with the reason:
never ``safe``. A box whose registry holds no run is judged as the gate judges it (no
run to check: not safe) without running the tool.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remote.config import ConfigError, hub_repos
from remote.link.connector import Connector
from remote.transport.base import Transport, TransportError
from remote.weights.safety import (
    NAMED,
    HubVerify,
    Safety,
    judge,
    laptop_verify,
    weights_safety,
)
from trainer.text import clean_text, one_line

#: Seconds a box's weights check may take in a listing (hashing is cached on the box).
WEIGHTS_TIMEOUT = 30.0


@dataclass(frozen=True)
class WeightsVerdict:
    """``state``: ``safe``, ``unsafe`` (the gate would refuse a destroy) or ``unknown``
    (not checked: ``reason`` says why); ``where``: ``hub``, ``laptop``, ``hub+laptop``."""

    state: str
    reason: str
    where: str | None = None

    @property
    def safe(self) -> bool:
        """Whether the gate would let a destroy go ahead."""
        return self.state == "safe"

    def words(self) -> str:
        """``weights safe (hub)``, ``weights NOT safe: ...``, ``weights: ? ...``."""
        if self.state == "safe":
            return f"weights safe ({self.where})" if self.where else \
                f"weights safe: {self.reason}"
        if self.state == "unsafe":
            return f"weights NOT safe: {self.reason}"
        return f"weights: ? {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"state": self.state, "safe": self.safe, "where": self.where,
                "reason": self.reason}


def unknown(why: str) -> WeightsVerdict:
    """A verdict for a check that could not run (never safe)."""
    return WeightsVerdict("unknown", one_line(clean_text(why), 200))


def verdict_of(safety: Safety) -> WeightsVerdict:
    """The gate's ``Safety`` as a listing's verdict."""
    if safety.safe:
        return WeightsVerdict("safe", one_line(safety.reason, 200), safety.where)
    unsafe = safety.unsafe
    shown = "; ".join(f"{f.short} ({f.detail})" for f in unsafe[:NAMED]) + \
        (f"; and {len(unsafe) - NAMED} more" if len(unsafe) > NAMED else "")
    return WeightsVerdict("unsafe", one_line(shown or safety.reason.removeprefix(
        "not safe: "), 300))


def hub_verify() -> HubVerify | str:
    """The Hub check for a whole listing (the user's repositories, the user's token,
    read once), or why there is none (a malformed ``[hub] repos``)."""
    try:
        return laptop_verify(tuple(hub_repos()))
    except ConfigError as exc:
        return str(exc)


def box_weights(transport: Transport, target: str, has_runs: bool, verify: HubVerify,
                *, timeout: float = WEIGHTS_TIMEOUT, accept_new: bool = False,
                ssh_options: Mapping[str, Any] | None = None) -> WeightsVerdict:
    """The gate's verdict on every run of the box's registry, asked on ``transport``
    (the box ``target``, ``vast:4242``) within ``timeout`` seconds; ``has_runs``: the
    probe found runs in the registry (else nothing runs on the box)."""
    if not has_runs:
        return verdict_of(judge({"runs": []}, transport.label, verify))
    connector = Connector(target, accept_new=accept_new, ask_unknown=None,
                          ssh_options=dict(ssh_options or {}), timeout=timeout)
    try:
        return verdict_of(weights_safety(transport, None, registry=True, verify=verify,
                                         connector=connector, timeout=timeout))
    except (TransportError, OSError, ValueError) as exc:
        return unknown(f"not checked: {exc}")

