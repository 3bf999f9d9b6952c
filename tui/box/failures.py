"""Every failure of a box action as one line with the next step. The messages come from
``remote`` (the same words ``gpurent`` prints); this module names the action, adds what
to do when the message does not already say it, and decides how loud to be. Pure: no
widget, no thread."""

from __future__ import annotations

from dataclasses import dataclass

from textual.notifications import SeverityLevel

from remote.billing import DestroyRefused, ProviderError
from remote.link import link_broken
from remote.runs import BoxToolFailed, GuardError, RunIsLive
from remote.transport import TransportError
from remote.weights import PushFailed
from trainer.text import one_line


class ActionRefused(Exception):
    """An action cannot run now; the message says why and what to do, in one line."""


#: Worker (method) name -> what the user asked for, as the line starts.
ACTIONS = {
    "connect": "connecting", "reconnect_control": "reconnecting",
    "refresh_runs": "listing runs", "refresh_safety": "checking the weights",
    "refresh_instance": "asking the provider", "check_box": "preflight",
    "run_checks": "checking the box", "probe": "the time estimate",
    "start_launch": "launch", "profile": "profile", "push": "push", "pull": "pull",
    "find_run": "pull", "stop_run": "stop run", "cost_figures": "instance",
    "instance_call": "instance",
    "set_guard": "guard", "acknowledge": "guard", "resume": "resume",
    "resume_figures": "resume", "install_needs": "installing the box tools' needs",
    "fetch_older": "reading older log lines", "search_whole_log": "searching the log",
}
#: Workers the app runs on its own (every few seconds): a repeat of the same failure is
#: kept in the events list without a new notification.
BACKGROUND = frozenset({"refresh_runs", "refresh_safety", "refresh_instance", "install_needs",
                        "check_box", "run_checks", "probe", "end_probe"})
#: What to do after a failed action whose message gives no next step.
NEXT_STEP = {
    "pull": "w tries again",
    "find_run": "w tries again",
    "push": "u tries again",
    "stop_run": "x tries again, or stop it on the box",
    "profile": "p tries again with other settings",
    "start_launch": "fix the form and press ctrl+s",
    "set_guard": "a tries again",
    "acknowledge": "a tries again",
    "resume": "R tries again",
    "cost_figures": "check --provider/--instance and the API key",
    "instance_call": "check the instance at your provider",
}
_HAS_NEXT_STEP = (": set ", " or ", "pick another", "add ", " press ", " again", "first",
                  "stop it", "try ", "use ", "give ", "run `", "pass ")


@dataclass(frozen=True)
class Failure:
    """How one failure is shown: ``line`` (one line), ``severity`` for the toast,
    ``bell`` for the worst, ``link`` when the link to the box is the cause."""

    line: str
    severity: SeverityLevel
    bell: bool = False
    link: bool = False


def describe(name: str, error: BaseException, transport: object | None = None) -> Failure:
    """The line for ``error`` raised by the worker or action ``name``."""
    action = ACTIONS.get(name, name.replace("_", " ").strip() or "action")
    message = one_line(error, 400)
    if isinstance(error, ActionRefused):
        return Failure(message, "warning")
    if link_broken(error, transport):
        return Failure(f"{action} failed: {message} — the link to the box is down; "
                       "reconnecting on its own (r: now)", "error", link=True)
    if isinstance(error, DestroyRefused):
        return Failure(f"{action} refused: {message}", "error", bell=True)
    known = (ValueError, RunIsLive, GuardError, ProviderError, PushFailed, BoxToolFailed,
             TransportError, OSError, TimeoutError)
    if not isinstance(error, known):
        message = f"{type(error).__name__}: {message} (unexpected: please report it)"
    line = f"{action} failed: {message}"
    step = NEXT_STEP.get(name)
    if step and not any(word in message for word in _HAS_NEXT_STEP):
        line += f" — {step}"
    return Failure(line, "error", bell=name in ("push", "instance_call"))
