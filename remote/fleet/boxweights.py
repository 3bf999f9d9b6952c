"""Whether the weights of a fleet box are safe off it: the destroy check's own verdict
(``remote.weights.safety``: a Hub copy counts only in the user's own repositories, asked
with the user's token; a laptop copy only while the pull ledger still matches), asked
on the connection the fleet's probe opened, through the gate (``remote.link``: the
trainer ships on that exec's stdin when the box does not hold it yet).

The box side rides in the probe's own exec when it can (``folded_check``): a box that
holds this trainer's install (the gate's marker) and whose registry names a run prints
``trainer safe``'s report as one more section of the probe, and the laptop judges it
as the gate does. An unchanged box prints the report the tool kept on it (``trainer
safe --keep``, valid while the stamp of everything it depends on holds) from the shell,
without starting python. A box without the install (or whose python is gone) gets the
check in a second exec as before.

A check that fails, or does not end within its limit, is ``unknown`` with the reason:
never ``safe``. A box whose registry holds no run is ``unknown`` (nothing registered to
judge; files outside runs are not seen), without running the tool: the gate refuses its
destroy without the typed id and the tick, as for any weights it cannot check.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from remote import config
from remote.billing.address import connector_to
from remote.config import ConfigError, hub_repos
from remote.link import gate
from remote.link.bootstrap import CACHE_DIR, MARKER, box_id, install_name
from remote.link.tools import ToolAnswer, parse_report
from remote.runs.probe import cache_dir_expr, registry_expr, section
from remote.transport.base import RunResult, Transport, TransportError
from remote.weights.safety import (
    NAMED,
    HubVerify,
    Safety,
    inventory,
    inventory_words,
    judge,
    laptop_verify,
    weights_safety,
)
from trainer.hub.safe import KEPT_FILE, STAMP_LINES
from trainer.text import clean_text, one_line

#: Seconds a box's weights check may take in a listing (hashing is cached on the box).
WEIGHTS_TIMEOUT = 30.0
#: The folded check's sections in the probe's reply: the tool's stdout, the tail of its
#: stderr, its exit code.
SAFE_OUT, SAFE_ERR, SAFE_RC = "safe", "safe err", "safe rc"
#: Why an empty box's weights are unknown.
NO_RUN = "no run registered on the box (files outside runs are not checked)"
#: What the folded check's report may hold (a longer one is checked in its own exec).
MAX_SAFE_BYTES = 2 << 20


@dataclass(frozen=True)
class WeightsVerdict:
    """``state``: ``safe``, ``unsafe`` (the destroy check would refuse a destroy) or ``unknown``
    (not checked: ``reason`` says why); ``where``: ``hub``, ``laptop``, ``hub+laptop``."""

    state: str
    reason: str
    where: str | None = None

    @property
    def safe(self) -> bool:
        """Whether the destroy check would let a destroy go ahead."""
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
    """The destroy check's ``Safety`` as a listing's verdict."""
    if safety.safe:
        return WeightsVerdict("safe", one_line(safety.reason, 200), safety.where)
    unsafe = safety.unsafe
    shown = "; ".join(f"{f.short} ({f.detail})" for f in unsafe[:NAMED]) + \
        (f"; and {len(unsafe) - NAMED} more" if len(unsafe) > NAMED else "") + \
        "".join(f"; {failure}" for failure in safety.failures)
    return WeightsVerdict("unsafe", one_line(shown or safety.reason.removeprefix(
        "not safe: "), 300))


def hub_verify() -> HubVerify | str:
    """The Hub check for a whole listing (the user's repositories, the user's token,
    read once), or why there is none (a malformed ``[hub] repos``)."""
    try:
        return laptop_verify(tuple(hub_repos()))
    except ConfigError as exc:
        return str(exc)


def folded_check(transport: Transport, target: str,
                 timeout: float = WEIGHTS_TIMEOUT) -> Callable[[str], str]:
    """The probe's ``extra`` (``remote.runs.probe.script``) for the box ``target``
    (``vast:4242``): when the box holds this trainer's install and its registry is not
    empty, its stdout, the tail of its stderr and its exit code are printed as sections
    of ``trainer safe --json --registry``: the answer the tool kept on the box (``--keep``,
    ``trainer.hub.safe``) when its stamp still holds, printed by the shell; else the tool,
    run through the gate (which never ships the package here: it prints its boot probe
    instead) within ``timeout`` seconds, keeping its new answer."""
    name = install_name()
    known = config.remembered(box_id(transport))
    python = config.host_python(target) or known.get("python")
    tool = gate.script(["-m", "trainer", *inventory_words(keep=name)],
                       python if isinstance(python, str) else None, ship=False, name=name)
    # The stamp is computed by the same snippet, with the same sh, as the tool's own: the
    # kept answer is printed (read once, after its first line) only when the box's inputs
    # are those it was made from.
    stamp = f"s=$(sh -c {shlex.quote(STAMP_LINES)} 2>/dev/null | cksum)"

    def shell(boundary: str) -> str:
        def sections(out: str, err: str, rc: str) -> str:
            return "; ".join([section(boundary, SAFE_OUT, f"head -c {MAX_SAFE_BYTES + 1} {out}"),
                              section(boundary, SAFE_ERR, err),
                              section(boundary, SAFE_RC, f'echo "{rc}"')])

        return (f'if [ -s {registry_expr()} ] && [ -f "$HOME"/{CACHE_DIR}/{name}/{MARKER} ] '
                f"&& command -v timeout >/dev/null 2>&1; then {stamp}; "
                f'k={cache_dir_expr()}/{KEPT_FILE}; h=; if [ -f "$k" ]; then '
                f'{{ IFS= read -r l && [ "$l" = "$s {name}" ] && h=1 && '
                f'{sections("", ":", "0")}; }} <"$k" 2>/dev/null; fi; '
                'if [ -z "$h" ] && o=$(mktemp -d 2>/dev/null); then '
                f"timeout -k 2 {timeout:g} sh -c {shlex.quote(tool)} </dev/null "
                '>"$o/out" 2>"$o/err"; rc=$?; '
                + sections('"$o/out"', 'tail -c 2048 "$o/err"', "$rc")
                + '; rm -rf "$o"; fi; fi')

    return shell


def folded_answer(sections: Mapping[str, bytes]) -> ToolAnswer | None:
    """What the folded check's tool said, or ``None`` when it did not run there (no
    install, an empty registry, the gate would have to boot the box, a report too long
    for the probe's reply)."""
    out, rc = sections.get(SAFE_OUT), sections.get(SAFE_RC, b"").split()
    if out is None or not rc or not rc[0].isdigit() or len(out) > MAX_SAFE_BYTES or \
            gate.booting(out) is not None:
        return None
    return ToolAnswer(RunResult(int(rc[0]), out, sections.get(SAFE_ERR, b"")),
                      parse_report(out))


def box_weights(transport: Transport, target: str, has_runs: bool, verify: HubVerify,
                *, timeout: float = WEIGHTS_TIMEOUT, accept_new: bool = False,
                ssh_options: Mapping[str, Any] | None = None,
                folded: Mapping[str, bytes] | None = None) -> WeightsVerdict:
    """The destroy check's verdict on every run of the box's registry, asked on ``transport``
    (the box ``target``, ``vast:4242``) within ``timeout`` seconds; ``has_runs``: the
    probe found runs in the registry (else nothing runs on the box). ``folded``: the
    probe's sections, whose ``folded_check`` answer is judged when there is one (else
    the box is asked in an exec of its own)."""
    if not has_runs:  # nothing to judge: not "NOT safe", and never safe
        return unknown(NO_RUN)
    answer = folded_answer(folded or {})
    if answer is not None and answer.rc in (124, 137):  # timeout's: the tool ran past it
        return unknown(f"not checked: trainer safe did not end within {timeout:g} s")
    if answer is not None:
        try:
            return verdict_of(judge(inventory(answer, transport.label), transport.label,
                                    verify))
        except TransportError as exc:
            return unknown(f"not checked: {exc}")
    try:
        connector = connector_to(target, accept_new=accept_new, ssh_options=ssh_options,
                                 timeout=timeout)
        return verdict_of(weights_safety(transport, None, registry=True, verify=verify,
                                         connector=connector, timeout=timeout))
    except (TransportError, OSError, ValueError) as exc:
        return unknown(f"not checked: {exc}")

