"""The parts of a run's ``train.log`` that a watch did not stream, and search over all of
it, answered on the box (``trainer log``, ``trainer.watch.logs``): a watch starts at the
log's tail, scrolling up asks for the bytes before the first one shown, and a search
returns the matching lines, never the file."""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from remote.link.tools import ask_tool
from remote.transport.base import Transport, TransportError
from trainer.text import clean_text

LOG_TIMEOUT = 300.0  # a search reads the whole file: some seconds for a few hundred MB


@dataclass(frozen=True)
class LogChunk:
    """Bytes ``offset``..``offset + len(data)`` of the log (inode ``ino``, ``size`` now)."""

    offset: int
    data: bytes
    ino: int | None
    size: int


@dataclass(frozen=True)
class LogMatch:
    """One line holding the term: its number (1-based), byte offset and text (cleaned)."""

    line: int
    offset: int
    text: str


@dataclass(frozen=True)
class LogMatches:
    """The lines of the whole log holding ``term``: the first ones, and how many in all."""

    term: str
    matches: tuple[LogMatch, ...]
    total: int
    truncated: bool


def _ask(transport: Transport, run_dir: str, words: list[str]) -> dict[str, Any]:
    answer = ask_tool(transport, ["log", run_dir, *words], timeout=LOG_TIMEOUT)
    if not answer.ok or answer.report is None:
        raise TransportError(f"cannot read the log on {transport.label}: "
                             f"{answer.why or f'exit {answer.rc}'}")
    return answer.report


def _count(value: object) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise TransportError("the box's log answer is malformed")


def older_log(transport: Transport, run_dir: str, before: int,
          nbytes: int = 256 * 1024) -> LogChunk:
    """Up to ``nbytes`` of the log ending at byte ``before``, from a line start."""
    doc = _ask(transport, run_dir, ["--before", str(before), "--bytes", str(nbytes)])
    try:
        data = (doc["text"].encode("utf-8") if isinstance(doc.get("text"), str)
                else base64.b64decode(str(doc.get("b64")), validate=True))
    except (binascii.Error, ValueError):
        raise TransportError("the box's log answer is malformed") from None
    ino = doc.get("ino")
    return LogChunk(_count(doc.get("offset")), data,
                    ino if isinstance(ino, int) else None, _count(doc.get("size")))


def search_log(transport: Transport, run_dir: str, term: str, limit: int = 1000) -> LogMatches:
    """The lines of the whole log holding ``term`` (case-insensitive for ASCII)."""
    doc = _ask(transport, run_dir, ["--search", term, "--max", str(limit)])
    found = []
    for item in doc.get("matches") or ():
        if isinstance(item, dict) and isinstance(item.get("text"), str):
            try:
                found.append(LogMatch(_count(item.get("line")), _count(item.get("offset")),
                                      clean_text(item["text"])))
            except TransportError:
                continue
    return LogMatches(term, tuple(found), _count(doc.get("total", len(found))),
                      doc.get("truncated") is True)
