"""Webhook notifications from the guard, so that a closed laptop still learns what
happened: the run ended (completed, failed, dead), the guard acted, an alarm.

A target is a URL and a shape: plain JSON (our own object), ntfy (JSON publishing: POST
to the server root with the topic), Slack incoming webhooks (``{"text"}``) or Discord
webhooks (``{"content"}``). The shape is picked from the URL unless given. A webhook URL
is a secret (whoever has it can post): it reaches the guard on stdin and is never
logged, written or shown; targets are named by their number and shape only.

Each message is delivered from its own thread, retried a few times with backoff, so
delivery never blocks the guard's action. Standard library only (Python 3.9).
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainer.guard.state import NOTIFY_FORMATS, GuardError
from trainer.text import one_line

#: Delivery attempts per message and target, the first wait between them, and the
#: timeout of each request (seconds).
ATTEMPTS, BACKOFF, TIMEOUT = 4, 2.0, 10.0
#: Discord refuses content over 2000 characters.
DISCORD_LIMIT = 2000

#: ntfy priorities (1 min .. 5 max) and tags (shown as emoji) per event.
_NTFY = {"alarm": (5, ["rotating_light"]), "run-ended": (4, ["warning"]),
         "acted": (3, ["money_with_wings"])}


@dataclass(frozen=True)
class Target:
    """One webhook: ``url`` (a secret) and its ``format``. Its repr never shows the URL."""

    url: str = field(repr=False)
    format: str


def detect_format(url: str) -> str:
    """The shape a URL's service accepts: ``slack`` (hooks.slack.com), ``discord``
    (discord.com/api/webhooks), ``ntfy`` (ntfy.sh or a host named ntfy*), else ``json``."""
    parts = urllib.parse.urlsplit(url)
    host = (parts.hostname or "").lower()
    if host == "hooks.slack.com":
        return "slack"
    if host in ("discord.com", "discordapp.com", "ptb.discord.com", "canary.discord.com") \
            and parts.path.startswith("/api/webhooks/"):
        return "discord"
    if host == "ntfy.sh" or host.startswith("ntfy."):
        return "ntfy"
    return "json"


def parse_target(line: str, default_format: str | None = None) -> Target:
    """``URL`` or ``FORMAT URL`` (one line of the guard's stdin) as a ``Target``; a
    ``GuardError`` that never repeats the URL when it is not an http(s) URL."""
    words = line.split()
    fmt = default_format
    if len(words) == 2 and words[0].lower() in NOTIFY_FORMATS:
        fmt, words = words[0].lower(), words[1:]
    if len(words) != 1:
        raise GuardError("a notify line is URL or FORMAT URL (formats: "
                         f"{', '.join(NOTIFY_FORMATS)})")
    url = words[0]
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise GuardError("a notify URL must start with http:// or https:// and name a host")
    if fmt is not None and fmt not in NOTIFY_FORMATS:
        raise GuardError(f"--notify-format {one_line(fmt, 20)!r}: use one of "
                         f"{', '.join(NOTIFY_FORMATS)}")
    return Target(url, fmt or detect_format(url))


def parse_targets(text: str, default_format: str | None = None) -> list[Target]:
    """Every non-empty line of ``text`` as a target."""
    return [parse_target(line, default_format) for line in text.splitlines() if line.strip()]


def _slack_escape(text: str) -> str:
    # Slack reads <...> as links and mentions (<!channel>): escape them, as Slack asks.
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def request_for(target: Target, message: dict[str, Any]) -> tuple[str, bytes]:
    """``(url, JSON body)`` of ``message`` in ``target``'s shape. ``message`` holds
    ``event``, ``title`` and ``text`` besides the facts (see ``Guard.message``)."""
    title, text = str(message.get("title") or ""), str(message.get("text") or "")
    if target.format == "slack":
        body: dict[str, Any] = {"text": _slack_escape(f"*{title}*\n{text}")}
        return target.url, json.dumps(body).encode("utf-8")
    if target.format == "discord":
        content = f"**{title}**\n{text}"[:DISCORD_LIMIT]
        body = {"content": content, "username": "gpurent guard",
                "allowed_mentions": {"parse": []}}  # no @everyone from a run's text
        return target.url, json.dumps(body).encode("utf-8")
    if target.format == "ntfy":
        parts = urllib.parse.urlsplit(target.url)
        root, _, topic = parts.path.rstrip("/").rpartition("/")
        priority, tags = _NTFY.get(str(message.get("event")), (3, []))
        body = {"topic": topic, "title": title, "message": text, "priority": priority,
                "tags": tags}
        url = urllib.parse.urlunsplit((parts.scheme, parts.netloc, root + "/", "", ""))
        return url, json.dumps(body).encode("utf-8")
    return target.url, json.dumps(message).encode("utf-8")


def _post(url: str, body: bytes, timeout: float) -> None:
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "gpurent-guard/1"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        resp.read(1 << 16)


def _why(exc: BaseException) -> str:
    """A failure in words that never contain the URL."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    reason = getattr(exc, "reason", exc)
    return one_line(getattr(reason, "strerror", None) or type(reason).__name__, 80)


def _retryable(exc: BaseException) -> bool:
    if isinstance(exc, urllib.error.HTTPError):
        return exc.code == 429 or exc.code >= 500
    return True  # network errors and timeouts


#: ``report(index, target, event, delivered, detail)``: told after each delivery.
Report = Callable[[int, Target, str, bool, str], None]


class Notifier:
    """Sends each message to every target from background threads."""

    def __init__(self, targets: list[Target], report: Report, *, attempts: int = ATTEMPTS,
                 backoff: float = BACKOFF, timeout: float = TIMEOUT,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.targets = list(targets)
        self.report = report
        self.attempts = max(1, attempts)
        self.backoff = backoff
        self.timeout = timeout
        self.sleep = sleep
        self._threads: list[threading.Thread] = []

    def send(self, message: dict[str, Any]) -> None:
        """Deliver ``message`` to every target; returns at once."""
        for index, target in enumerate(self.targets, 1):
            url, body = request_for(target, message)
            thread = threading.Thread(target=self._deliver, daemon=True,
                                      args=(index, target, str(message.get("event")), url,
                                            body), name=f"notify-{index}")
            self._threads.append(thread)
            thread.start()

    def _deliver(self, index: int, target: Target, event: str, url: str,
                 body: bytes) -> None:
        why = ""
        for attempt in range(1, self.attempts + 1):
            try:
                _post(url, body, self.timeout)
            except Exception as exc:  # noqa: BLE001 - any failure is reported, none raised
                why = _why(exc)
                if not _retryable(exc) or attempt == self.attempts:
                    break
                self.sleep(self.backoff * 2 ** (attempt - 1))
                continue
            self.report(index, target, event, True, f"delivered (try {attempt})")
            return
        self.report(index, target, event, False, f"not delivered after {attempt} "
                    f"tr{'y' if attempt == 1 else 'ies'}: {why}")

    def flush(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the deliveries under way (before exiting)."""
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
