"""The one door to the box tools: ``python -m trainer VERB ...`` built, run and its JSON
report read, for every caller on the laptop.

The command goes through the gate when a connector is given and says the box may not
hold the trainer yet (``remote.link.connector.Connector.run_tool``: the package rides on
the exec's stdin, or the box is bootstrapped and the tool runs again); otherwise it runs
with the transport's plain ``trainer_prefix``. Secrets travel on the tool's stdin, never
in its argv. The tools that talk to the Hub run with the plain prefix and carry this
laptop's ``HF_ENDPOINT`` on their command (:func:`trainer_command`): a private Hub or a
mirror set here is the one the box uses, whatever the box's own environment says.

A report is one JSON object on stdout, pretty-printed or on one line. Lines may come
before it (progress, a chatty login shell); when lines follow it, it must be a line by
itself (``trainer push`` ends so). Callers judge the exit code themselves: a failed
preflight still reports."""

from __future__ import annotations

import json
import os
import re
import shlex
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from remote.transport.base import RunResult, Transport
from trainer.text import clean_text

#: Seconds a tool may run when its caller names no limit.
TOOL_TIMEOUT = 120.0
#: The box tools that talk to the Hub: their commands carry this laptop's Hub address
#: (``train`` does with ``hub=``: see :func:`trainer_command`).
HUB_VERBS = ("push", "stage", "restore", "guard")
#: Where huggingface_hub reads the Hub's address, here and on the box.
ENDPOINT_ENV = "HF_ENDPOINT"
#: Characters no Hub URL holds (spaces, controls, quotes a shell or a log would mangle).
_UNSAFE = re.compile(r"[\s\x00-\x1f\x7f\"'`\\]")


class ToolGate(Protocol):
    """What the door needs of a connector (``remote.link.connector.Connector``)."""

    def run_tool(self, transport: Transport, words: list[str], *, timeout: float = ...,
                 stdin: bytes | None = None) -> RunResult:
        """Run ``python -m trainer ...`` (``words`` start with ``-m``), through the gate
        while the box may not hold the trainer yet."""
        ...


@dataclass(frozen=True)
class ToolAnswer:
    """What a box tool said: its run (exit code, stdout, stderr) and its report
    (``None`` when it printed none)."""

    result: RunResult
    report: dict[str, Any] | None

    @property
    def ok(self) -> bool:
        """Whether the tool exited 0."""
        return self.result.ok

    @property
    def rc(self) -> int:
        """The tool's exit code."""
        return self.result.rc

    @property
    def why(self) -> str:
        """The tool's last line of stderr, cleaned for people (empty when it wrote none)."""
        lines = clean_text(self.result.stderr, keep_newlines=True).strip().splitlines()
        return lines[-1] if lines else ""


class BoxToolFailed(Exception):
    """A box-side tool printed no report; the message is its last line of stderr."""

    def __init__(self, verb: str, answer: ToolAnswer) -> None:
        super().__init__(f"trainer {verb} failed (exit {answer.rc}): "
                         f"{answer.why or 'no JSON report'}")
        self.rc = answer.rc
        self.why = answer.why


def laptop_endpoint() -> str | None:
    """This laptop's ``HF_ENDPOINT`` (a private Hub or a mirror), without a trailing
    slash; ``None`` when it is not set. ``ValueError`` when it is not an ``http(s)://``
    URL, or holds a user or password, a query or a fragment: it goes to the box in a
    command line, where a credential has no place (the URL is never repeated)."""
    value = os.environ.get(ENDPOINT_ENV, "").strip()
    if not value:
        return None
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname \
            or _UNSAFE.search(value):
        raise ValueError(f"{ENDPOINT_ENV} is not an http(s) URL of a Hub (not shown)")
    if "@" in parts.netloc or parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError(f"{ENDPOINT_ENV} holds a user, password, query or fragment (not "
                         "shown): it is sent to the box, so set it to the Hub's plain URL "
                         "and keep the token in HF_TOKEN")
    return value.rstrip("/")


def trainer_command(transport: Transport, args: Sequence[str], *, hub: bool = False) -> str:
    """``PREFIX -m trainer ARGS`` with the transport's plain prefix, every word quoted:
    what a command that starts a tool detached (a launch, the guard) is built from.

    A verb that talks to the Hub (:data:`HUB_VERBS`, or any with ``hub``: a training run
    that pushes) gets this laptop's ``HF_ENDPOINT`` (:func:`laptop_endpoint`) set on its
    command, so that it wins over the box's own environment; without one here, the box's
    own setting (or the Hub) is used."""
    command = f"{transport.trainer_prefix} {shlex.join(['-m', 'trainer', *args])}"
    endpoint = laptop_endpoint() if hub or (args and args[0] in HUB_VERBS) else None
    return command if endpoint is None else \
        f"{ENDPOINT_ENV}={shlex.quote(endpoint)} {command}"


def parse_report(stdout: bytes) -> dict[str, Any] | None:
    """The report in a tool's stdout (see the module doc), or ``None``."""
    text = stdout.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    at = text.find("{")
    while at >= 0:  # the first object that runs to the end: the report after any lines
        try:
            value, end = decoder.raw_decode(text, at)
        except ValueError:
            at = text.find("{", at + 1)
            continue
        if not text[end:].strip():
            return value
        at = text.find("{", end)
    for line in reversed(text.splitlines()):  # else the last line that is one object
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def ask_tool(transport: Transport, args: Sequence[str], *,
             connector: ToolGate | None = None, timeout: float = TOOL_TIMEOUT,
             stdin: bytes | None = None) -> ToolAnswer:
    """Run ``trainer ARGS`` once on ``transport``'s box and read its report.

    Through ``connector``'s gate when given (``ValueError`` when the gate must ship the
    package and ``stdin`` is given too), else with the plain prefix. ``TransportError``
    when the box cannot be reached or the tool runs past ``timeout`` seconds."""
    if connector is not None:
        result = connector.run_tool(transport, ["-m", "trainer", *args], timeout=timeout,
                                    stdin=stdin)
    else:
        result = transport.run(trainer_command(transport, args), stdin=stdin,
                               timeout=timeout)
    return ToolAnswer(result, parse_report(result.stdout))


def tool_report(transport: Transport, args: Sequence[str], *,
                connector: ToolGate | None = None, timeout: float = TOOL_TIMEOUT,
                stdin: bytes | None = None) -> dict[str, Any]:
    """The report of ``trainer ARGS`` (see :func:`ask_tool`) whatever its exit code;
    ``BoxToolFailed`` when it printed none."""
    answer = ask_tool(transport, args, connector=connector, timeout=timeout, stdin=stdin)
    if answer.report is None:
        raise BoxToolFailed(args[0], answer)
    return answer.report
