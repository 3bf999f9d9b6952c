"""The estimate of a Modal run before it is launched: a probe app (``APP-probe``) that runs
the same checks and a few real training steps on the GPU asked for (``trainer profile``),
and a timeout proposed from what it measured.

A probe bills too: it is launched detached with its own short timeout (``PROBE_TIMEOUT``)
and stopped by the laptop when it gives up waiting, so that a laptop that sleeps during
a probe leaves at most that timeout's worth of GPU time billing. The timeout proposed for
the run is the measured epoch times the epochs, with a margin, plus what the probe took
from its launch to its report (Modal's start, the image, staging and the doctor: a run
pays those too)."""

from __future__ import annotations

import contextlib
import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from remote import fields
from remote.runs.checks import EstimateCancelled
from remote.serverless.appfile import MAX_TIMEOUT, RUNS_VOLUME, ModalSpec
from remote.serverless.client import ModalError, app_logs, find_app, last_line, stop_app
from remote.serverless.launch import spawn_app
from remote.serverless.record import gpu_price
from remote.transport.base import TransportError
from remote.transport.volume import VolumeTransport
from trainer.text import format_duration

#: A probe's own timeout on Modal: it ends there at the latest, whatever the laptop does.
PROBE_TIMEOUT = 900
#: How often the runs Volume is looked at for the probe's report.
POLL = 2.0
#: How often the wait says how long it has waited.
SAY_EVERY = 10.0
#: The run's time is the probe's estimate times this (epochs vary, validation grows).
MARGIN = 1.5
#: A proposal is rounded up to this many seconds, and is never below the first step.
ROUND = 300


@dataclass(frozen=True)
class ModalEstimate:
    """A probe's ``report`` (``trainer profile``'s JSON) and the seconds it took from
    its launch to its report (``waited``)."""

    report: dict[str, Any]
    waited: float
    app_id: str

    @property
    def epoch_seconds(self) -> float | None:
        """One epoch as the run will have it (training steps and validation)."""
        cost = fields.obj(self.report.get("cost"))
        return fields.num(cost.get("epoch_total_seconds", cost.get("epoch_seconds")))


@dataclass(frozen=True)
class Proposal:
    """A timeout for the run (``seconds``, ``None`` when none can be proposed) and how it
    was reached, in words."""

    seconds: int | None
    words: str

    @property
    def value(self) -> str:
        """The proposal as the ``timeout=`` field takes it (``95m``, ``4h``)."""
        if self.seconds is None:
            return ""
        minutes = self.seconds // 60
        return f"{minutes // 60}h" if minutes % 60 == 0 else f"{minutes}m"


def probe_spec(spec: ModalSpec) -> ModalSpec:
    """The probe of ``spec``: app ``APP-probe``, the same image, GPU, dataset and
    arguments, no Hub push, a new probe id and the probe's own timeout."""
    probe = secrets.token_hex(8)
    return replace(spec, app=f"{spec.app}-probe", run=f"probe-{probe}", hub="",
                   timeout=PROBE_TIMEOUT, probe=probe)


def estimate_bound(spec: ModalSpec) -> str:
    """What a probe of ``spec`` may cost at most, in words."""
    price = gpu_price(spec.gpu)
    return (f"a probe runs a few steps on {spec.gpu or 'a CPU'} (${price:.2f}/h): usually "
            f"a minute or two, at most {format_duration(PROBE_TIMEOUT)} "
            f"(${price * PROBE_TIMEOUT / 3600:.2f})")


def estimate_on_modal(spec: ModalSpec, *, cancelled: threading.Event | None = None,
                progress: Callable[[str], None] | None = None,
                wait: float = PROBE_TIMEOUT + 60) -> ModalEstimate:
    """Launch ``spec``'s probe and wait for its report in the runs Volume. ``ModalError``
    (one line: the app's last words) when the probe ends without one; the probe's app is
    stopped when the caller cancels (``remote.runs.EstimateCancelled``) or stops waiting."""
    probe = probe_spec(spec)
    say = progress or (lambda _line: None)
    say(f"launching a probe on Modal ({probe.gpu or 'CPU'})")
    started = time.monotonic()
    launched = spawn_app(probe)
    volume = VolumeTransport(RUNS_VOLUME, label=f"modal:{probe.app}")
    ended = False
    said = 0.0
    try:
        deadline = started + wait
        while True:
            report = _report(volume, probe.probe_report)
            if report is not None:
                ended = True
                return ModalEstimate(report, time.monotonic() - started, launched.app_id)
            if cancelled is not None and cancelled.is_set():
                raise EstimateCancelled("the probe was cancelled")
            row = find_app(launched.app_id)
            if row is not None and not row.running:
                ended = True  # a last look: the commit may land as the app stops
                report = _report(volume, probe.probe_report)
                if report is not None:
                    return ModalEstimate(report, time.monotonic() - started, launched.app_id)
                raise ModalError("the probe ended without a report: "
                                 + _last_words(launched.app_id))
            if time.monotonic() > deadline:
                raise ModalError(f"no probe report in {format_duration(wait)}")
            if time.monotonic() - said >= SAY_EVERY:
                said = time.monotonic()
                say(f"probe {launched.app_id} measuring "
                    f"({format_duration(said - started)} so far)")
            if cancelled is not None:
                cancelled.wait(POLL)
            else:
                time.sleep(POLL)
    finally:
        if not ended:
            _stop_quietly(launched.app_id)
        volume.close()


def _report(volume: VolumeTransport, path: str) -> dict[str, Any] | None:
    try:
        if volume.stat(path) is None:
            return None
        data = json.loads(volume.read(path).decode("utf-8"))
    except (TransportError, ValueError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _last_words(app_id: str) -> str:
    try:
        return last_line(app_logs(app_id, tail=40)) or "it printed nothing"
    except ModalError as exc:
        return f"its logs could not be read ({exc})"


def _stop_quietly(app_id: str) -> None:
    # Its own timeout ends it if this fails; the caller's error says what happened.
    with contextlib.suppress(ModalError):
        stop_app(app_id)


def propose_timeout(probed: ModalEstimate, epochs: str) -> Proposal:
    """The timeout to give a run of ``epochs`` epochs (the form's text) from ``probed``."""
    epoch = probed.epoch_seconds
    if epoch is None:
        return Proposal(None, "the probe measured no epoch time: give a timeout")
    if not epochs.strip().isdigit() or int(epochs) < 1:
        return Proposal(None, f"~{format_duration(epoch)} an epoch measured; give epochs= "
                        "for a proposed timeout")
    run = epoch * int(epochs)
    seconds = max(ROUND, math.ceil((run * MARGIN + probed.waited) / ROUND) * ROUND)
    how = (f"~{format_duration(epoch)} an epoch × {epochs} × {MARGIN:g} + "
           f"{format_duration(probed.waited)} to start")
    if seconds > MAX_TIMEOUT:
        return Proposal(None, f"{how} is more than Modal's 24h: fewer epochs, a faster GPU, "
                        "or a run resumed across launches")
    return Proposal(seconds, how)
