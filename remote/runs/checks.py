"""The box-side checks, run from the laptop: ``trainer preflight``, ``doctor`` and
``profile`` with ``--json``, their documented reports (docs/SCHEMAS.md) read by the door
to the box tools (``remote.link.tools``), whose ``BoxToolFailed`` says why a tool gave
no report.

The TUI's launch form and profiler card and the headless ``gpurent preflight|doctor|
profile`` commands both call these functions."""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from typing import Any

from remote.link.tools import BoxToolFailed, tool_report
from remote.transport.base import Transport

__all__ = ["BoxToolFailed", "EstimateCancelled", "cancel_estimate", "doctor", "new_estimate_id",
           "preflight", "profile"]

PREFLIGHT_TIMEOUT = 300.0
DOCTOR_TIMEOUT = 600.0
PROFILE_TIMEOUT = 900.0
CANCEL_TIMEOUT = 30.0
#: ``trainer profile``'s exit code when ``--cancel`` ended it (``trainer.profiler.probes``).
ESTIMATE_CANCELLED = 3


def preflight(transport: Transport, project: str | None = None, data: str | None = None,
              require_gpu: bool = False) -> dict[str, Any]:
    """The box's preflight report (``gpurent.preflight/1``)."""
    words = ["preflight"]
    if project:
        words += ["--project", project]
    if data:
        words += ["--data", data]
    if require_gpu:
        words.append("--require-gpu")
    return tool_report(transport, [*words, "--json"], timeout=PREFLIGHT_TIMEOUT)


def doctor(transport: Transport, data_yaml: str) -> dict[str, Any]:
    """The dataset doctor's report (``gpurent.doctor/1``) for ``data_yaml`` on the box."""
    return tool_report(transport, ["doctor", data_yaml, "--json"], timeout=DOCTOR_TIMEOUT)


def profile(transport: Transport, train_args: Mapping[str, str],
            out: str | None = None, estimate: str | None = None) -> dict[str, Any]:
    """The step profiler's report (``gpurent.profile/1``) for ``key=value`` train
    arguments (``steps=``, ``warmup=`` and ``price=`` included); ``out``: where the box
    writes profile.json (default: the run directory the arguments name). ``estimate``: an
    id from :func:`new_estimate_id`; the box then writes into its private directory for
    estimates (``trainer profile --probe``) and :func:`cancel_estimate` ends the profile
    (``EstimateCancelled``)."""
    words = ["profile", *(f"{key}={value}" for key, value in train_args.items())]
    if out:
        words += ["--out", out]
    if estimate:
        words += ["--probe", estimate]
    try:
        return tool_report(transport, [*words, "--json"], timeout=PROFILE_TIMEOUT)
    except BoxToolFailed as exc:
        if estimate and exc.rc == ESTIMATE_CANCELLED:
            raise EstimateCancelled(estimate) from None
        raise


class EstimateCancelled(Exception):
    """The profile ended because :func:`cancel_estimate` asked it to."""


def new_estimate_id() -> str:
    """An unpredictable estimate id (the box's files of the estimate are named after it)."""
    return secrets.token_hex(16)


def cancel_estimate(transport: Transport, estimate: str) -> bool:
    """End the profile started with ``estimate`` (at once: it looks twice a second);
    whether it was still running."""
    report = tool_report(transport, ["profile", "--cancel", estimate, "--json"],
                         timeout=CANCEL_TIMEOUT)
    return bool(report.get("was_running"))
