"""The destroy check: stop, start or destroy an instance, refusing to destroy unsaved
weights or to act on an instance that is not the box.

Destroy is refused while any weight file the box must not lose is not safe off it (every
run the box knows; on the Hub as confirmed by the Hub, or pulled to this laptop and still
intact: ``remote.weights.safety.weights_safety``, ``docs/WEIGHTS-SAFETY.md``), unless the user
overrides it explicitly: ``override`` *and* the instance id typed back. When the weights
cannot be checked at all (no run given, box unreachable, Hub unreachable) they count as
unsafe. The weights are checked again at the moment of acting, whatever was shown
before. Every action also checks that the provider's address for the instance is the
box's (``remote.billing.identity``); an id that came from the box must be tied to it so.
Stop warns that the GPUs are released (they may be gone at restart) and that the disk
keeps billing. Outcomes are confirmed by polling the
provider's API (``trainer.providers.confirm``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from remote.billing.cost import rate
from remote.billing.identity import BoxAddress, WrongInstance, check_instance
from remote.billing.intents import want_running, want_stopped
from remote.transport.base import Transport, TransportError
from trainer.providers import Instance, Provider
from trainer.providers.confirm import (
    DEFAULT_CONFIRM_TIMEOUT,
    DEFAULT_POLL_INTERVAL,
    ActionOutcome,
    destroy_and_confirm,
    start_and_confirm,
    stop_and_confirm,
)
from trainer.text import clean_text

ACTIONS = ("stop", "start", "destroy")


class SafetyLike(Protocol):
    """What the destroy check needs from ``remote.weights.safety.Safety`` (read only: both
    answers are frozen)."""

    @property
    def safe(self) -> bool:
        """Whether every weight file is off the box."""
        ...

    @property
    def reason(self) -> str:
        """Why, in one line."""
        ...


@dataclass(frozen=True)
class UnknownSafety:
    """Stands for weights that could not be checked: never safe."""

    reason: str
    safe: bool = False
    where: str | None = None
    epoch: int | None = None


@dataclass(frozen=True)
class DestroyDecision:
    """Whether a destroy may go ahead, and why (one line). A refusal for unsafe weights
    says more: ``details``, one line for each file that is not safe and each check that
    could not be made (said once however many files it failed), and ``fix``, what to do."""

    allowed: bool
    reason: str
    overridden: bool = False
    safe: bool = False
    details: tuple[str, ...] = ()
    fix: str = ""
    #: The run directories on the box of the files that are not safe.
    runs: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The reason and what to do, in one line (without the details)."""
        return f"{self.reason}; {self.fix}" if self.fix else self.reason

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**self.__dict__, "details": list(self.details), "runs": list(self.runs)}


class DestroyRefused(Exception):
    """The destroy check refused the destroy; ``decision`` says why."""

    def __init__(self, decision: DestroyDecision) -> None:
        super().__init__(decision.line)
        self.decision = decision


SafetySource = SafetyLike | Callable[[], SafetyLike] | None


def resolve_safety(source: SafetySource) -> SafetyLike:
    """A safety answer from an object, a callable (asked now), or nothing. Failures to
    ask become an unsafe ``UnknownSafety`` with the reason."""
    if source is None:
        return UnknownSafety("the weights were not checked (no run given)")
    if callable(source):
        try:
            return source()
        except (TransportError, OSError) as exc:
            return UnknownSafety(f"the weights could not be checked: {clean_text(str(exc))}")
    return source


def run_safety(transport: Transport, run_dir: str | None, projects: Sequence[str] = (),
               repos: Sequence[str] = (), *,
               registry: bool = True) -> Callable[[], SafetyLike]:
    """The destroy check's safety source for a box: ``remote.weights.safety.weights_safety`` of the
    run, its project, ``projects`` and (``registry``) the box's registry, asked anew at
    each call; Hub copies count in ``repos`` and the user's own repositories only."""
    from remote.weights.safety import weights_safety

    return lambda: weights_safety(transport, run_dir, projects, repos=repos,
                                  registry=registry)


def check_destroy(safety: SafetyLike, instance_id: str, *, override: bool = False,
                  typed_id: str | None = None) -> DestroyDecision:
    """Decide a destroy: allowed when the weights are safe; otherwise only with
    ``override`` and ``typed_id`` equal to ``instance_id``."""
    reason = clean_text(str(safety.reason or ""))
    if safety.safe:
        return DestroyDecision(True, f"weights safe: {reason}" if reason else "weights safe",
                            safe=True)
    if not override:
        return refusal(safety, instance_id)
    typed = (typed_id or "").strip()
    if typed != str(instance_id).strip():
        shown = clean_text(typed)[:40] or "nothing"
        return DestroyDecision(False, f"the typed id ({shown}) is not {instance_id}: nothing "
                                   "destroyed")
    return DestroyDecision(True, f"OVERRIDE: destroying instance {instance_id} although the "
                              f"weights are not safe ({reason})", overridden=True)


#: What to do about a refused destroy, in the words of every front end.
REFUSED_FIX = ("push them to the Hub or pull them to this laptop first, or override by "
               "typing the instance id")


def refusal(safety: SafetyLike, instance_id: str) -> DestroyDecision:
    """The destroy check's refusal for weights that are not safe: why in one line, then a line for
    each file that is not safe (its path and why) and for each check that could not be
    made (the Hub's failure and address, once), then what to do."""
    files = list(getattr(safety, "unsafe", None) or ())
    if not files:  # nothing was judged file by file: the weights could not be checked
        return DestroyDecision(False, f"refusing to destroy instance {instance_id}: the "
                                   "weights are not known to be safe off the box",
                            details=(clean_text(str(safety.reason or "")),), fix=REFUSED_FIX)
    count = f"{len(files)} weight file{'s are' if len(files) != 1 else ' is'}"
    details = [f"{clean_text(f.path)}: {clean_text(f.detail)}" for f in files]
    details += [f"the Hub could not be asked: {clean_text(failure)}"
                for failure in getattr(safety, "failures", ())]
    return DestroyDecision(False, f"refusing to destroy instance {instance_id}: {count} not "
                               "safe off the box", details=tuple(details), fix=REFUSED_FIX,
                        runs=tuple(dict.fromkeys(clean_text(f.run_dir) for f in files)))


@dataclass(frozen=True)
class DestroyQuestion:
    """What a person is told of the weights before a destroy: whether they are safe,
    what is not (the files' names, else why nothing could be judged), and ``unknown``:
    why they could not be checked at all (the box not reached), the destroy check then "weights
    unknown"."""

    safe: bool
    unsafe: str
    unknown: str = ""

    def source(self, checked: SafetySource) -> SafetySource:
        """What the destroy check asks at the moment of acting: ``checked`` (asked anew), or,
        for weights unknown, an unsafe answer that says why."""
        return UnknownSafety(f"the weights are unknown: {self.unknown}") if self.unknown \
            else checked


def destroy_question(safety: SafetyLike | None, unknown: str = "") -> DestroyQuestion:
    """The question before a destroy, from the weights' verdict (``None``: not asked),
    or (``unknown``: why) behind the "weights unknown" check; the same for the fleet's
    row and the box's instance."""
    unsafe = "" if safety is None else \
        getattr(safety, "unsafe_names", "") or getattr(safety, "reason", "")
    return DestroyQuestion(bool(safety is not None and safety.safe) and not unknown,
                           unsafe, unknown)


def stop_warning(provider: Provider, instance: Instance | None) -> str:
    """What stopping means, in money, for this instance."""
    if not provider.can_stop:
        return (f"{provider.title} cannot stop an instance: only destroy ends its billing "
                "(and deletes its disk)")
    storage = instance.storage_per_hour if instance else None
    return ("stopping releases the GPUs: someone else may rent them and a restart can fail "
            f"or wait; the disk is kept and keeps billing {rate(storage)} while stopped")


def start_warning(provider: Provider, instance: Instance | None) -> str:
    """What starting means, in money."""
    price = instance.price_per_hour if instance else None
    return (f"starting resumes billing at {rate(price)}; it can wait or fail if the GPUs "
            "were taken meanwhile")


def destroy_warning(provider: Provider, instance: Instance | None) -> str:
    """What destroying means."""
    now = instance.billing_per_hour if instance else None
    return ("destroying deletes the instance and its disk for good (everything not copied "
            f"off the box is lost); billing ({rate(now)} now) ends once the API confirms it")


def warning_for(action: str, provider: Provider, instance: Instance | None) -> str:
    """The warning shown before ``action``."""
    return {"stop": stop_warning, "start": start_warning,
            "destroy": destroy_warning}[action](provider, instance)


def run_teardown(provider: Provider, instance_id: str, action: str, *,
             safety: SafetySource = None, override: bool = False,
             typed_id: str | None = None, box: BoxAddress | None = None,
             from_box: bool = False,
             timeout: float = DEFAULT_CONFIRM_TIMEOUT,
             interval: float = DEFAULT_POLL_INTERVAL,
             sleep: Callable[[float], None] | None = None,
             keep_waiting: bool = False) -> ActionOutcome:
    """Run ``action`` through the destroy check and confirm it by polling. ``safety`` is asked
    now (pass a callable, so that it is the state at this moment); ``box`` is where the
    instance must be (``None``: not checked, for a box named by its instance, which is
    reached at the address its API gives); ``from_box``: the id is the box's claim, acted
    on only when the provider ties it to ``box`` (see ``remote.billing.identity``);
    ``keep_waiting``: a start that waits for GPUs is left pending, not cancelled.

    Raises ``DestroyRefused`` for an unsafe destroy without a valid override,
    ``WrongInstance`` when the instance is not the box (or a box's claim has no box to
    be checked against),
    ``trainer.providers.confirm.StillBilling`` when a destroy is not confirmed, and
    ``ProviderError`` for API failures (all with one-line messages)."""
    if action not in ACTIONS:
        raise ValueError(f"unknown action {action!r}; choose one of {', '.join(ACTIONS)}")
    if box is not None:
        check_instance(provider, provider.get_instance(instance_id), box, action,
                       from_box=from_box)
    elif from_box:
        raise WrongInstance(f"refusing to {action} instance {instance_id}: the id came "
                            "from the box and there is no box address to check it against")
    if action == "destroy":
        decision = check_destroy(resolve_safety(safety), instance_id, override=override,
                                 typed_id=typed_id)
        if not decision.allowed:
            raise DestroyRefused(decision)
    target = f"{provider.name}:{instance_id}"  # what the user wants, for the fleet
    if action == "start":
        want_running(target)
    else:
        want_stopped(target)
    actions: dict[str, Callable[..., ActionOutcome]] = {
        "stop": stop_and_confirm, "start": start_and_confirm, "destroy": destroy_and_confirm}
    run = actions[action]
    options: dict[str, Any] = {"timeout": timeout, "interval": interval}
    if action == "start":
        options["keep_waiting"] = keep_waiting
    if sleep is not None:
        options["sleep"] = sleep
    return run(provider, instance_id, **options)
