"""Arm and disarm the box-side guard (``python3 -m trainer guard``) from the laptop, and
read its state (``RUN/guard.json``) for ``gpurent`` and the TUI.

The guard runs detached on the box (``transport.spawn_detached``), so closing the laptop
never disarms it. A provider key reaches it only on its stdin; without one it uses the
key the provider placed in the instance (Vast ``CONTAINER_API_KEY``, RunPod
``RUNPOD_API_KEY``).
"""

from __future__ import annotations

import json
import posixpath
import shlex
import signal
import time
from dataclasses import dataclass, fields
from typing import Any

from remote.procs import StalePid, is_ours, signal_checked, why_not
from remote.transport.base import Transport, TransportError
from trainer.guard.state import ACTIVE_STATES, GUARD_FILE, GUARD_OUT, GuardError, parse_when
from trainer.text import clean_text

__all__ = ["GuardError", "GuardState", "arm_guard", "disarm_guard", "guard_command",
           "read_guard"]


@dataclass(frozen=True)
class GuardState:
    """``guard.json`` as the laptop sees it; ``alive``: the guard process still runs."""

    state: str
    armed: bool = False
    when: str | None = None
    then: str | None = None
    max_hours: float | None = None
    started_at: str | None = None
    deadline_at: str | None = None
    pid: int | None = None
    pid_start: int | None = None
    boot_id: str | None = None
    pgid: int | None = None
    provider: str | None = None
    instance: str | None = None
    last_decision: str = ""
    decided_at: str | None = None
    outcome: dict[str, Any] | None = None
    alive: bool = False

    @classmethod
    def from_dict(cls, data: dict[str, Any], alive: bool) -> GuardState:
        """From the JSON object; unknown keys ignored, text cleaned for display."""
        known = {f.name for f in fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["state"] = clean_text(str(values.get("state") or "unknown"))
        values["last_decision"] = clean_text(str(values.get("last_decision") or ""))
        values["alive"] = alive
        return cls(**values)

    @property
    def watching(self) -> bool:
        """Armed and its process alive (a guard killed with the box is not watching)."""
        return self.alive and self.state in ACTIVE_STATES

    def summary(self) -> str:
        """One line for a status pane."""
        if self.state in ACTIVE_STATES and not self.alive:
            return f"guard gone (was {self.state}; its process is not running)"
        if self.watching:
            limit = f", hard limit {self.max_hours:g} h" if self.max_hours else ""
            return f"guard {self.state}: when {self.when} then {self.then}{limit}"
        return f"guard {self.state}: {self.last_decision}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def guard_command(transport: Transport, run_dir: str, when: str, then: str,
                  max_hours: float | None = None, provider: str | None = None,
                  instance: str | None = None, *, key_stdin: bool = False,
                  base_url: str | None = None, poll: float | None = None,
                  push_wait: float | None = None) -> str:
    """The exact shell command that starts the guard on the box (no secrets in it)."""
    words = ["-m", "trainer", "guard", run_dir, "--when", when, "--then", then]
    if max_hours is not None:
        words += ["--max-hours", f"{max_hours:g}"]
    if provider:
        words += ["--provider", provider]
    if instance:
        words += ["--instance", str(instance)]
    if key_stdin:
        words.append("--key-stdin")
    if base_url:
        words += ["--base-url", base_url]
    if poll is not None:
        words += ["--poll", f"{poll:g}"]
    if push_wait is not None:
        words += ["--push-wait", f"{push_wait:g}"]
    return f"{transport.trainer_prefix} " + " ".join(shlex.quote(w) for w in words)


def _read_json(transport: Transport, path: str) -> dict[str, Any] | None:
    try:
        data = transport.read(path, 0, 1 << 20)
    except TransportError:
        return None
    try:
        value = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def read_guard(transport: Transport, run_dir: str) -> GuardState | None:
    """The guard's state for ``run_dir``, or ``None`` when no guard was ever armed there.
    ``alive``: its pid runs and is still the guard that wrote the file."""
    state, _data = _read_guard(transport, run_dir)
    return state


def _read_guard(transport: Transport,
                run_dir: str) -> tuple[GuardState | None, dict[str, Any]]:
    data = _read_json(transport, posixpath.join(run_dir, GUARD_FILE))
    if data is None:
        return None, {}
    return GuardState.from_dict(data, is_ours(transport, data.get("pid"), data)), data


def _tail(transport: Transport, path: str) -> str:
    try:
        stat = transport.stat(path)
        if stat is None:
            return ""
        data = transport.read(path, max(0, stat.size - 2000), 2000)
    except TransportError:
        return ""
    lines = [ln for ln in clean_text(data, keep_newlines=True).splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def arm_guard(transport: Transport, run_dir: str, when: str, then: str,
              max_hours: float | None = None, provider: str | None = None,
              instance: str | None = None, key: str | None = None, *,
              base_url: str | None = None, poll: float | None = None,
              push_wait: float | None = None, wait: float = 20.0) -> GuardState:
    """Start the guard detached on the box and wait until it reports its state: normally
    ``armed``; on a run that is already over it may be acting or done by then.

    ``key`` travels on the guard's stdin only. Raises ``GuardError`` (one line) for bad
    options or when the guard refuses to arm (no instance found, bad key, another guard
    armed), ``TransportError`` when the box cannot be reached."""
    parse_when(when)
    if then not in ("stop", "destroy"):
        raise GuardError(f"--then {clean_text(str(then))!r}: use stop or destroy")
    if max_hours is not None and not max_hours > 0:
        raise GuardError("--max-hours must be a positive number")
    current = read_guard(transport, run_dir)
    if current is not None and current.watching:
        raise GuardError(f"a guard is already armed on this run (pid {current.pid}): "
                         f"{current.summary()}; disarm it first")
    command = guard_command(transport, run_dir, when, then, max_hours, provider, instance,
                            key_stdin=key is not None, base_url=base_url, poll=poll,
                            push_wait=push_wait)
    stdin = (key.strip() + "\n").encode("utf-8") if key is not None else None
    pgid = transport.spawn_detached(command, cwd=run_dir,
                                    log_path=posixpath.join(run_dir, GUARD_OUT), stdin=stdin)
    deadline = time.monotonic() + wait
    while True:
        state = read_guard(transport, run_dir)
        ours = state is not None and pgid in (state.pgid, state.pid)
        if ours and state is not None and state.state == "error":
            raise GuardError(state.last_decision or "the guard refused to arm")
        if ours and state is not None:
            return state  # armed (or, on a run already over, acting or even done)
        if not transport.pid_alive(pgid):
            # It ended before we saw its state: it may have acted at once, or failed.
            time.sleep(0.2)
            state = read_guard(transport, run_dir)
            if state is not None and pgid in (state.pgid, state.pid):
                if state.state == "error":
                    raise GuardError(state.last_decision or "the guard refused to arm")
                return state
            why = _tail(transport, posixpath.join(run_dir, GUARD_OUT))
            raise GuardError(f"the guard exited at once: {why or 'no message'}")
        if time.monotonic() >= deadline:
            raise GuardError(f"the guard did not report within {wait:g} s; see "
                             f"{posixpath.join(run_dir, GUARD_OUT)}")
        time.sleep(0.2)


def disarm_guard(transport: Transport, run_dir: str, wait: float = 10.0) -> GuardState | None:
    """Signal the armed guard to stand down and wait until it says ``disarmed``. Returns
    the final state (``None`` when no guard was ever armed there). A guard that is
    already acting finishes its action. Its pid is signalled only while it is the
    process guard.json records; otherwise ``GuardError`` ("stale pid: not signalling")."""
    state, data = _read_guard(transport, run_dir)
    if state is None or state.state not in ACTIVE_STATES:
        return state
    if why_not(transport, data.get("pid"), data) == "no such process":
        return state  # gone with its box: nothing to disarm
    try:
        signal_checked(transport, data.get("pid"), signal.SIGTERM, data, data.get("pgid"))
    except StalePid as exc:
        raise GuardError(f"{exc}; the guard that wrote guard.json is not running") from None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        state = read_guard(transport, run_dir)
        if state is None or not state.alive or state.state not in ACTIVE_STATES:
            return state
        time.sleep(0.2)
    return read_guard(transport, run_dir)
