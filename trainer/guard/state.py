"""The guard's state on disk (``RUN/guard.json``), its file names and its trigger
syntax: what the laptop reads and checks before arming. Standard library only."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from trainer import procid, runfiles
from trainer.text import one_line

GUARD_FILE = "guard.json"
GUARD_LOG = "guard.log"
#: Where ``arm_guard`` sends the guard's stdout/stderr (crash tracebacks only).
GUARD_OUT = "guard.out"
#: Written by the laptop when a person acknowledged the guard's alarm (``guard.json``
#: has one writer, the guard): ``{"alarm_at": <the alarm's "at">, "acknowledged_at"}``.
GUARD_ACK = "guard.ack.json"

#: The webhook shapes ``--notify`` speaks: plain JSON, ntfy, Slack and Discord.
NOTIFY_FORMATS = ("json", "ntfy", "slack", "discord")

#: States in which a guard process is (or should be) watching.
ACTIVE_STATES = ("armed", "waiting-for-push", "acting")


class GuardError(Exception):
    """The guard cannot start; one line for the user."""


class AlreadyArmed(GuardError):
    """Another guard watches this run; its ``guard.json`` must be left alone."""


def parse_when(text: str) -> tuple[str, float | None]:
    """``("done", None)`` or ``("idle", minutes)``. ``done`` is any end of the run:
    completed, failed, stopped or dead (its process gone, or stalled past the limit);
    ``dead`` is accepted as another name for it."""
    value = (text or "").strip().lower()
    if value in ("done", "dead"):
        return "done", None
    if value.startswith("idle="):
        try:
            minutes = float(value[5:])
        except ValueError:
            minutes = -1.0
        if minutes > 0 and minutes == minutes and minutes != float("inf"):
            return "idle", minutes
    raise GuardError(f"--when {one_line(text, 40)!r}: use done or idle=MINUTES "
                     "(MINUTES > 0)")


def read_guard(run_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """``RUN/guard.json`` with ``alive`` added (whether its pid runs here and is still the
    guard that wrote it: ``trainer.procid``), or ``None``."""
    path = Path(run_dir) / GUARD_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    pid = data.get("pid")
    started = runfiles.parse_iso(str(data.get("started_at") or ""))
    data["alive"] = isinstance(pid, int) and procid.same_process(pid, data, started)
    return data


def alarm_acknowledged(guard: dict[str, Any], ack: dict[str, Any] | None) -> bool:
    """Whether ``guard``'s alarm (``guard.json``) was acknowledged by ``ack``
    (``guard.ack.json``); a guard without an alarm has nothing to acknowledge."""
    alarm = guard.get("alarm")
    if not isinstance(alarm, dict):
        return True
    at = alarm.get("at")
    return at is not None and isinstance(ack, dict) and ack.get("alarm_at") == at
