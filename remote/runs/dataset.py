"""A dataset on a box, from the laptop: ``trainer stage`` (a tar from a Hub dataset
repository, downloaded by the box itself and extracted safely once, its progress
streamed here) and ``trainer shapes`` (a generated set, for a first try).

Both answer with the data.yaml to launch with, as an absolute path on the box."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from remote.link.tools import tool_report, trainer_command
from remote.transport.base import Transport, TransportError
from trainer.hub.client import check_repo_id
from trainer.text import clean_text

#: Seconds the box may say nothing while it stages (hashing or extracting a large
#: archive is silent): past that the laptop stops waiting, the box goes on.
STAGE_SILENCE = 1800.0
SHAPES_TIMEOUT = 600.0
#: Longest line the stream accepts from the box (the report is one line).
MAX_LINE = 1 << 20


class StageFailed(Exception):
    """``trainer stage`` ran and failed; the message is its one line, ``kind`` which way:
    ``hub`` (the Hub refused or lacks it, or the download failed), ``archive`` (refused
    or unreadable), ``disk`` (no room, or a write failed), ``""`` (unknown)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


def check_stage_args(repo: str, filename: str, dest: str) -> None:
    """``ValueError`` (one line) for a malformed repository id or an empty FILE or DIR:
    what can be refused before reaching the box."""
    check_repo_id(repo)
    if not filename or not dest:
        raise ValueError("FILE and --dest DIR must not be empty")


def stage_dataset(transport: Transport, repo: str, filename: str, dest: str, *,
                  token: str | None = None, revision: str | None = None,
                  progress: Callable[[str], None] = lambda _text: None) -> dict[str, Any]:
    """Stage ``repo``'s ``filename`` into ``dest`` on the box (``token``, when given, on
    the tool's stdin) and return ``trainer stage``'s report, its ``data_yaml`` absolute;
    ``progress`` is told each step as the box says it. ``ValueError`` for a malformed
    repository id, ``StageFailed`` when the box could not stage it, ``TransportError``
    when the box could not be reached or fell silent for :data:`STAGE_SILENCE`."""
    check_stage_args(repo, filename, dest)
    words = ["stage", repo, filename, "--dest", dest, "--json", "--events"]
    if revision:
        words += ["--revision", revision]
    if token:
        words.append("--token-stdin")
    # The tool's one-line error and anything it did not plan to say come on stderr.
    stream = transport.stream(f"{{ {trainer_command(transport, words)}; }} 2>&1",
                              stdin=(token.strip() + "\n").encode() if token else None)
    report, last = None, ""
    try:
        for raw in stream.lines(STAGE_SILENCE, MAX_LINE):
            line = raw.decode("utf-8", errors="replace").strip()
            value = _object(line)
            if value is None:
                last = line or last
            elif value.get("event") == "progress":
                progress(clean_text(str(value.get("text"))))
            else:
                report = value
    except TimeoutError as exc:
        raise TransportError(f"trainer stage said nothing for {STAGE_SILENCE:g}s; it may "
                             "still be running on the box") from exc
    finally:
        stream.close()
    if report is None:
        raise StageFailed(clean_text(last) or "trainer stage ended without a report")
    if report.get("ok") is not True:
        kind = report.get("kind")
        raise StageFailed(clean_text(str(report.get("error") or "trainer stage failed")),
                          kind if kind in ("hub", "archive", "disk") else "")
    if isinstance(report.get("data_yaml"), str):
        report["data_yaml"] = transport.absolute(report["data_yaml"])
    return report


def shapes_dataset(transport: Transport, directory: str, *, train: int | None = None,
                   val: int | None = None, imgsz: int | None = None) -> dict[str, Any]:
    """Write the synthetic shapes dataset into ``directory`` on the box (``trainer
    shapes``) and return its report: ``data`` (the data.yaml, absolute), ``train``,
    ``val``, ``imgsz``, ``names``. ``BoxToolFailed`` with the tool's line when it
    could not."""
    words = ["shapes", directory, "--json"]
    for flag, value in (("--train", train), ("--val", val), ("--imgsz", imgsz)):
        if value is not None:
            words += [flag, str(value)]
    return tool_report(transport, words, timeout=SHAPES_TIMEOUT)


def _object(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None
