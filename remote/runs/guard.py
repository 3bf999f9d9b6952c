"""Arm and disarm the box-side guard (``python3 -m trainer guard``) from the laptop, and
read its state (``RUN/guard.json``) for ``gpurent`` and the TUI.

The guard runs detached on the box (``transport.spawn_detached``), so closing the laptop
never disarms it. It acts with the key the provider placed in the instance (Vast
``CONTAINER_API_KEY``, which manages that instance only; RunPod ``RUNPOD_API_KEY``).
The laptop's account key, which can act on every instance of the account, stays on the
laptop: it reaches the box (on the guard's stdin, kept in its memory) only when the user
asks (``send_account_key``), for an instance the user named, after the one-line
``account_key_warning``. Lambda Cloud puts no key in its instances: there the guard
refuses to arm unless sent the account key, and the billing is ended from the laptop.
The webhook URLs it notifies reach it on its stdin too. Its alarm stays in
``guard.json`` until a person acknowledges it (``acknowledge_alarm`` writes
``guard.ack.json``).
"""

from __future__ import annotations

import json
import os
import posixpath
import signal
import tempfile
import time
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any

from remote.config import ConfigError
from remote.config import hub_repos as user_hub_repos
from remote.fields import typed
from remote.link.tools import trainer_command
from remote.runs.processes import StalePid, is_ours, signal_checked, why_not
from remote.transport.base import Transport, TransportError
from trainer import runfiles
from trainer.guard.state import (
    ACTIVE_STATES,
    GUARD_ACK,
    GUARD_FILE,
    GUARD_OUT,
    NOTIFY_FORMATS,
    GuardError,
    alarm_acknowledged,
    parse_when,
)
from trainer.text import clean_text

__all__ = ["DISARM_WAIT", "NOTIFY_FORMATS", "GuardError", "GuardState",
           "account_key_warning", "acknowledge_alarm", "arm_guard", "disarm_guard",
           "guard_command", "notify_lines", "parse_when", "read_guard"]

#: Options of ``trainer guard`` that ``arm_guard`` passes on as ``--NAME VALUE`` (tests and
#: scripts tune them; the defaults are the guard's own).
TUNING = ("poll", "push_wait", "confirm_timeout", "stall_minutes", "retry_backoff",
          "retry_max", "give_up_after", "api_timeout")


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
    alarm: dict[str, Any] | None = None
    steps: list[dict[str, Any]] | None = None
    notify: list[dict[str, Any]] | None = None
    run_verdict: str | None = None
    run_ended_at: str | None = None
    price_per_hour: float | None = None
    alive: bool = False
    acknowledged: bool = True
    #: Fields of guard.json that had the wrong type (read as unset).
    unreadable: tuple[str, ...] = ()

    @classmethod
    def from_dict(cls, data: dict[str, Any], alive: bool,
                  ack: dict[str, Any] | None = None) -> GuardState:
        """From the JSON object (and ``guard.ack.json``); unknown keys ignored, a wrongly
        typed field read as unset and named in ``unreadable``, text cleaned for display."""
        values, bad = typed(data, _TYPES)
        for key in ("when", "then", "started_at", "deadline_at", "provider", "instance",
                    "decided_at", "run_verdict", "run_ended_at"):
            if key in values:
                values[key] = clean_text(str(values[key]))
        values["state"] = clean_text(values.get("state") or "unknown")
        values["last_decision"] = clean_text(values.get("last_decision") or "")
        alarm = values.get("alarm")
        if alarm is not None:
            values["alarm"] = {**alarm, "message": clean_text(str(alarm.get("message") or ""))}
        return cls(**values, alive=alive, acknowledged=alarm_acknowledged(data, ack),
                   unreadable=bad)

    @property
    def alarm_active(self) -> bool:
        """An alarm no person has acknowledged yet: shown loudly until then."""
        return self.alarm is not None and not self.acknowledged

    @property
    def watching(self) -> bool:
        """Armed and its process alive (a guard killed with the box is not watching)."""
        return self.alive and self.state in ACTIVE_STATES

    def summary(self) -> str:
        """One line for a status pane."""
        bad = f" (unreadable in guard.json: {', '.join(self.unreadable)})" \
            if self.unreadable else ""
        if self.alarm is not None:
            seen = "" if self.alarm_active else " (acknowledged)"
            return f"GUARD ALARM{seen}: {self.alarm.get('message')}{bad}"
        if self.state in ACTIVE_STATES and not self.alive:
            return f"guard gone (was {self.state}; its process is not running){bad}"
        if self.watching:
            limit = f", hard limit {self.max_hours:g} h" if self.max_hours else ""
            return f"guard {self.state}: when {self.when} then {self.then}{limit}{bad}"
        return f"guard {self.state}: {self.last_decision}{bad}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


_STR, _NUM, _INT = (str,), (int, float), (int,)
#: guard.json's fields and their JSON types.
_TYPES: dict[str, tuple[type, ...]] = {
    "state": _STR, "armed": (bool,), "when": _STR, "then": _STR, "max_hours": _NUM,
    "started_at": _STR, "deadline_at": _STR, "pid": _INT, "pgid": _INT, "provider": _STR,
    "instance": (str, int), "last_decision": _STR, "decided_at": _STR, "outcome": (dict,),
    "alarm": (dict,), "steps": (list,), "notify": (list,), "run_verdict": _STR,
    "run_ended_at": _STR, "price_per_hour": _NUM, "pid_start": _INT, "boot_id": _STR,
}


def guard_command(transport: Transport, run_dir: str, when: str, then: str,
                  max_hours: float | None = None, provider: str | None = None,
                  instance: str | None = None, *, key_stdin: bool = False,
                  notify_stdin: bool = False, base_url: str | None = None,
                  hub_repos: Sequence[str] = (), **tuning: float | None) -> str:
    """The exact shell command that starts the guard on the box (no secrets in it);
    ``hub_repos``: the user's repositories, the only ones whose copies make the weights
    safe; ``tuning`` holds options named in ``TUNING``."""
    words = ["guard", run_dir, "--when", when, "--then", then]
    for repo in hub_repos:
        words += ["--hub-repo", repo]
    if max_hours is not None:
        words += ["--max-hours", f"{max_hours:g}"]
    if provider:
        words += ["--provider", provider]
    if instance:
        words += ["--instance", str(instance)]
    if key_stdin:
        words.append("--key-stdin")
    if notify_stdin:
        words.append("--notify-stdin")
    if base_url:
        words += ["--base-url", base_url]
    for name, value in tuning.items():
        if name not in TUNING:
            raise TypeError(f"unknown guard option {name!r}")
        if value is not None:
            words += [f"--{name.replace('_', '-')}", f"{value:g}"]
    return trainer_command(transport, words)


def account_key_warning(provider: str) -> str:
    """The one line said before the account key of ``provider`` is sent to a box."""
    return (f"WARNING: sending the {clean_text(provider)} account key to the box: whoever "
            "controls the host (on a marketplace box, a stranger) can read it from the "
            "guard's memory and act on every instance of the account")


def notify_lines(urls: Sequence[str], fmt: str | None = None) -> list[str]:
    """The guard's stdin lines for webhook ``urls`` (``FORMAT URL`` when ``fmt`` is
    given or the entry names its own, ``discord https://...``; else ``URL``: the box
    picks the shape from it). A ``GuardError`` that never repeats a URL (it is a secret)
    for a bad one."""
    if fmt is not None and fmt not in NOTIFY_FORMATS:
        raise GuardError(f"--notify-format {clean_text(str(fmt))[:20]!r}: use one of "
                         f"{', '.join(NOTIFY_FORMATS)}")
    lines = []
    for n, entry in enumerate(urls, 1):
        words = str(entry).split()
        own = fmt
        if len(words) == 2 and words[0].lower() in NOTIFY_FORMATS:
            own, words = words[0].lower(), words[1:]
        url = words[0] if len(words) == 1 else ""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise GuardError(f"notify URL #{n} is not an http(s) URL (not shown: it is "
                             "a secret)")
        lines.append(f"{own} {url}" if own else url)
    return lines


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
    ack = _read_json(transport, posixpath.join(run_dir, GUARD_ACK)) \
        if isinstance(data.get("alarm"), dict) else None
    alive = is_ours(transport, data.get("pid"), data)
    return GuardState.from_dict(data, alive, ack), data


def acknowledge_alarm(transport: Transport, run_dir: str) -> GuardState | None:
    """Mark the guard's current alarm as seen (``guard.ack.json`` on the box), so that the
    TUI stops showing it in red; ``guard.json`` keeps it. Returns the state after."""
    state = read_guard(transport, run_dir)
    if state is None or state.alarm is None or state.acknowledged:
        return state
    fd, tmp = tempfile.mkstemp(prefix="gpurent-ack-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"alarm_at": state.alarm.get("at"),
                       "acknowledged_at": runfiles.utc_now_iso()}, fh)
        transport.upload(tmp, posixpath.join(run_dir, GUARD_ACK))
    finally:
        os.unlink(tmp)
    return read_guard(transport, run_dir)


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
              send_account_key: bool = False, hub_repos: Sequence[str] | None = None,
              base_url: str | None = None, notify: Sequence[str] = (),
              notify_format: str | None = None, wait: float = 20.0,
              **tuning: float | None) -> GuardState:
    """Start the guard detached on the box and wait until it reports its state: normally
    ``armed``; on a run that is already over it may be acting or done by then.

    ``key`` is the laptop's account key: it is sent (on the guard's stdin) only with
    ``send_account_key``, which needs the ``instance`` the user named (an account key
    acting on the box's own claim could end any instance of the account); otherwise it
    stays here and the guard uses the instance's own key. The caller shows
    ``account_key_warning`` first. ``hub_repos``: the Hub repositories whose copies
    count as safe (default: the user's, ``remote.config.hub_repos``; a repository the
    box's ledger names is a claim). The webhook URLs ``notify`` travel on the guard's
    stdin only; ``tuning`` holds options named in ``TUNING`` (``poll=...``). Raises
    ``GuardError`` (one line) for bad options or when the guard refuses to arm (no
    instance found, no key, bad key, another guard armed), ``TransportError`` when the
    box cannot be reached."""
    parse_when(when)
    lines = notify_lines(notify, notify_format)
    if send_account_key and not (key and instance):
        raise GuardError("sending the account key needs the key and the instance id "
                         "(--instance): the box's own claim is not enough for a key that "
                         "acts on every instance")
    sent = key if send_account_key else None
    try:
        repos = tuple(hub_repos) if hub_repos is not None else user_hub_repos()
    except ConfigError as exc:
        raise GuardError(str(exc)) from None
    if then not in ("stop", "destroy"):
        raise GuardError(f"--then {clean_text(str(then))!r}: use stop or destroy")
    if max_hours is not None and not max_hours > 0:
        raise GuardError("--max-hours must be a positive number")
    # The guard starts in the run's folder: a path from the login directory (the default
    # project, runs/train) must not be read from there.
    run_dir = transport.absolute(run_dir)
    current = read_guard(transport, run_dir)
    if current is not None and current.watching:
        raise GuardError(f"a guard is already armed on this run (pid {current.pid}): "
                         f"{current.summary()}; disarm it first")
    command = guard_command(transport, run_dir, when, then, max_hours, provider, instance,
                            key_stdin=sent is not None, notify_stdin=bool(lines),
                            base_url=base_url, hub_repos=repos, **tuning)
    secrets = ([sent.strip()] if sent is not None else []) + lines
    stdin = "".join(f"{line}\n" for line in secrets).encode("utf-8") if secrets else None
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


#: Seconds ``disarm_guard`` waits for the guard's own word (guard.json no longer armed, or
#: its process gone): it stands down at once when idle, but only after a provider call or
#: a look at the run under way, which a busy box can make slow.
DISARM_WAIT = 30.0


def disarm_guard(transport: Transport, run_dir: str,
                 wait: float = DISARM_WAIT) -> GuardState | None:
    """Signal the armed guard to stand down and wait (``wait`` s at most) until
    guard.json says it is no longer armed or its process is gone. Returns the final
    state (``None`` when no guard was ever armed there); a guard still ``watching`` then
    has not stood down in time. A guard that is already acting finishes its action. Its
    pid is signalled only while it is the process guard.json records; otherwise
    ``GuardError`` ("stale pid: not signalling")."""
    state, data = _read_guard(transport, run_dir)
    if state is None or state.state not in ACTIVE_STATES:
        return state
    try:
        signal_checked(transport, data.get("pid"), signal.SIGTERM, data, data.get("pgid"))
    except StalePid as exc:
        # Gone with its box, or ended since the look above (a guard told to stand down
        # earlier writes ``disarmed`` and exits): nothing to signal, and what guard.json
        # says now is the answer. A live process that is not the recorded guard is refused.
        if why_not(transport, data.get("pid"), data) == "no such process":
            return read_guard(transport, run_dir)
        raise GuardError(f"{exc}; the guard that wrote guard.json is not running") from None
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        state = read_guard(transport, run_dir)
        if state is None or not state.alive or state.state not in ACTIVE_STATES:
            return state
        time.sleep(0.2)
    return read_guard(transport, run_dir)
