"""Are a run's current best weights safe somewhere off the box?

Combines the box's Hub ledger (``trainer safe --json``) with this laptop's pull ledger
(``remote.pull.pulled_hashes``): the TUI's weights badge and the teardown gate use it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any

from remote.fields import integer
from remote.pull import pulled_hashes
from remote.push import last_json_object
from remote.transport.base import Transport, TransportError
from trainer.text import clean_text

SAFE_TIMEOUT = 600.0  # hashing a multi-GB best.pt the first time takes a while


@dataclass(frozen=True)
class Safety:
    """Where the current ``best.pt`` is safe: ``where`` is ``"hub"``, ``"laptop"`` or
    ``None`` (not safe, or nothing to lose when ``safe`` and no ``best_sha256``)."""

    safe: bool
    where: str | None
    epoch: int | None
    reason: str
    best_sha256: str | None = None
    #: The box's ``trainer safe --json`` answer, as it came.
    hub: dict[str, Any] | None = None


def hub_safety(transport: Transport, run_dir: str,
               timeout: float = SAFE_TIMEOUT) -> dict[str, Any]:
    """The box's ``trainer safe RUN --json`` answer. Raises ``TransportError``."""
    command = f"{transport.trainer_prefix} -m trainer safe {shlex.quote(run_dir)} --json"
    result = transport.run(command, timeout=timeout)
    answer = last_json_object(result.stdout)
    if not result.ok or answer is None or "safe" not in answer:
        lines = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
        why = lines[-1] if lines else f"exit {result.rc}"
        raise TransportError(f"cannot ask {transport.label} about {run_dir}: "
                             f"{clean_text(why)}")
    return answer


def weights_safety(transport: Transport, run_dir: str) -> Safety:
    """Whether ``run_dir``'s current ``best.pt`` is on the Hub or on this laptop."""
    answer = hub_safety(transport, run_dir)
    sha = answer.get("best_sha256")
    reason = clean_text(str(answer.get("reason") or ""))
    best_epoch = integer(answer.get("best_epoch"))
    if not isinstance(answer.get("safe"), bool) or not isinstance(sha, str | None):
        return Safety(False, None, best_epoch, "the box's answer is unreadable (a field "
                      "has the wrong type); not counted as safe", None, answer)
    if answer["safe"]:
        if sha is None:
            return Safety(True, None, None, reason, None, answer)
        return Safety(True, "hub", integer(answer.get("epoch")), reason, sha, answer)
    if sha and sha in pulled_hashes(transport.label, run_dir):
        label = f"best.pt (epoch {best_epoch})" if best_epoch is not None else "best.pt"
        return Safety(True, "laptop", best_epoch,
                      f"{label} is on this laptop (pulled); Hub: {reason}", sha, answer)
    return Safety(False, None, best_epoch, f"{reason}; not pulled to this laptop either",
                  sha, answer)
