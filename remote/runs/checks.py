"""The box-side checks, run from the laptop: ``trainer preflight``, ``doctor`` and
``profile`` with ``--json``, parsed into their documented reports (docs/SCHEMAS.md).

The TUI's launch form and profiler card and the headless ``gpurent preflight|doctor|
profile`` commands both call these functions."""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping
from typing import Any

from remote.transport.base import Transport
from trainer.text import clean_text

PREFLIGHT_TIMEOUT = 300.0
DOCTOR_TIMEOUT = 600.0
PROFILE_TIMEOUT = 900.0


class BoxToolFailed(Exception):
    """A box-side tool printed no report; the message is its last line of stderr."""


def box_report(transport: Transport, words: list[str], timeout: float) -> dict[str, Any]:
    """Run ``trainer WORDS --json`` on the box and return its JSON report.

    A report is returned whatever the exit code (a failed preflight still reports);
    ``BoxToolFailed`` when there is no JSON object on stdout."""
    command = f"{transport.trainer_prefix} -m trainer {shlex.join(words)} --json"
    result = transport.run(command, timeout=timeout)
    try:
        value = json.loads(result.stdout.decode("utf-8", errors="replace"))
    except ValueError:
        value = None
    if not isinstance(value, dict):
        tail = clean_text(result.stderr, keep_newlines=True).strip().splitlines()
        raise BoxToolFailed(f"trainer {words[0]} failed (exit {result.rc}): "
                            f"{tail[-1] if tail else 'no JSON report'}")
    return value


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
    return box_report(transport, words, PREFLIGHT_TIMEOUT)


def doctor(transport: Transport, data_yaml: str) -> dict[str, Any]:
    """The dataset doctor's report (``gpurent.doctor/1``) for ``data_yaml`` on the box."""
    return box_report(transport, ["doctor", data_yaml], DOCTOR_TIMEOUT)


def profile(transport: Transport, train_args: Mapping[str, str],
            out: str | None = None) -> dict[str, Any]:
    """The step profiler's report (``gpurent.profile/1``) for ``key=value`` train
    arguments (``steps=``, ``warmup=`` and ``price=`` included); ``out``: where the box
    writes profile.json (default: the run directory the arguments name)."""
    words = ["profile", *(f"{key}={value}" for key, value in train_args.items())]
    if out:
        words += ["--out", out]
    return box_report(transport, words, PROFILE_TIMEOUT)
