"""Watching through the follower (``python3 -m trainer follow`` on the box): one of the
watcher's two ways of watching, the other being file polling (``remote.watch.polling``).

Each session runs the follower through the gate when there is one (``remote.link.gate``:
one exec that installs, checks and starts it; once more after the bootstrap the gate
asks for), adopting the stream the connector started early when it is for the very same
command, and turns its JSON lines, read under caps (``remote.watch.caps``), into what
``Delivery`` and ``RunContext`` deliver.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from remote.link.gate import MARK
from remote.link.tools import trainer_command
from remote.transport.base import LineTooLong, Stream, Transport, TransportError
from remote.watch.caps import (
    MAX_JSON_DEPTH,
    MAX_LINE_BYTES,
    MAX_MESSAGES_PER_SECOND,
    RATE_WINDOW,
    TOO_DEEP,
    RateCap,
    decode_message,
)
from remote.watch.context import RunContext
from remote.watch.delivery import Delivery
from remote.watch.events import ConnectionEvent, WatchEvent
from remote.watch.start import FollowOptions, NoPython, StartFailed, follow_words
from trainer import runfiles
from trainer.health import LaunchRead
from trainer.text import clean_text, console_tail, one_line

log = logging.getLogger(__name__)
GATE_MARK = MARK.encode()


class Dropped(Exception):
    """The follow stream went silent or away; reconnect."""


class Controls(Protocol):
    """What a way of watching needs of its watcher."""

    def kicked(self) -> bool:
        """Whether stop or reconnect_now was asked for."""

    def wait(self, seconds: float) -> bool:
        """Sleep up to ``seconds``; ``True`` when a kick cut it short."""

    def hold(self, stream: Stream | None) -> None:
        """The stream to close on a stop or a kick (``None``: none now)."""

    def emit(self, event: WatchEvent) -> None:
        """Deliver ``event`` to the watcher's callback."""


class Follower:
    """The follower's sessions for one watcher; ``gate`` is the connector (or ``None``:
    the transport's plain prefix). ``went_live``: whether the last session got its
    ``hello``."""

    def __init__(self, options: FollowOptions, delivery: Delivery, context: RunContext,
                 controls: Controls, gate: Any = None) -> None:
        self.options = options
        self.delivery = delivery
        self.context = context
        self.controls = controls
        self.gate = gate
        self.went_live = False
        self._limits_said: set[str] = set()

    def words(self) -> list[str]:
        """The follower's words, resuming where delivery stands."""
        return follow_words(self.context.run_dir, self.options, self.delivery.position())

    def run(self, transport: Transport) -> None:
        """One session: follow until the stream ends (``Dropped``, ``StartFailed``)."""
        self.went_live = False
        if self.gate is None:
            # words[2:]: the door adds the ``-m trainer`` the gate's words carry
            command = trainer_command(transport, self.words()[2:]) + " 2>&1"
            self._follow_once(transport, command, None)
            return
        for _ in range(2):
            command, stdin = self.gate.command(transport, self.words(), merge_stderr=True)
            probe = self._follow_once(transport, command, stdin)
            if probe is None:
                return
            try:
                self.gate.boot(transport, probe)
            except (TransportError, ValueError) as exc:
                raise NoPython(one_line(exc)) from None
            self.controls.hold(None)
        raise StartFailed("the gate asked for a bootstrap twice")

    def _follow_once(self, transport: Transport, command: str,
                     stdin: bytes | None) -> str | None:
        """Run the follower until it ends; the gate's probe when it could not start."""
        early = self.gate.take_stream(transport, command) if self.gate is not None else None
        stream = early or transport.stream(command, stdin=stdin)
        self.controls.hold(stream)
        if self.controls.kicked():
            return None
        said_hello = False
        probe: list[str] | None = None
        noise: list[str] = []
        timeout = self.options.silence_timeout
        lines = stream.lines(timeout=timeout, max_line=MAX_LINE_BYTES)
        rate = RateCap(MAX_MESSAGES_PER_SECOND, RATE_WINDOW)
        try:
            for raw in lines:
                if self.controls.kicked():
                    return None
                if rate.over():
                    raise self._limited("rate", f"the box sent over {MAX_MESSAGES_PER_SECOND} "
                                        "messages a second; reconnecting")
                if probe is not None:
                    probe.append(raw.decode("utf-8", errors="replace"))
                    continue
                if not said_hello and raw.strip() == GATE_MARK:
                    probe = []
                    continue
                message = decode_message(raw)
                if message is None:
                    text = clean_text(raw[:1000]).strip()
                    if text:
                        noise = (noise + [text])[-5:]
                    continue
                if message is TOO_DEEP:
                    self._limited("depth", f"skipped a message nested deeper than "
                                  f"{MAX_JSON_DEPTH} levels")
                    continue
                if message.get("t") == "hello":
                    said_hello = True
                    self._on_hello(message, transport)
                    continue
                self.handle(message)
        except LineTooLong:
            raise self._limited("line", f"the box sent a line over {MAX_LINE_BYTES >> 20} "
                                "MiB without a newline; reconnecting") from None
        except TimeoutError:
            if self.controls.kicked():
                return None
            self.controls.emit(ConnectionEvent("stale", f"no data for {timeout:g}s",
                                               silent_for=timeout))
            raise Dropped(f"no data for {timeout:g}s") from None
        finally:
            close = getattr(lines, "close", None)
            if close is not None:
                close()
        if self.controls.kicked():
            return None
        if probe is not None:
            return "\n".join(probe) + "\n"
        if not said_hello:
            raise StartFailed(noise[-1] if noise else "the follower ended without output")
        raise Dropped("the follower ended")

    def _limited(self, cap: str, reason: str) -> Dropped:
        """Say ``reason`` (once per cap and watcher) and return the drop to raise."""
        if cap not in self._limits_said:
            self._limits_said.add(cap)
            log.warning("watcher of %s: %s", self.context.run_dir, reason)
            self.controls.emit(ConnectionEvent("limited", reason))
        return Dropped(reason)

    def _on_hello(self, message: dict[str, Any], transport: Transport) -> None:
        box_now = message.get("now")
        if isinstance(box_now, int | float):
            self.delivery.skew = float(box_now) - time.time()
        if self.gate is not None:
            self.gate.learned(transport, message.get("box"))
        self.context.chose(message.get("run"))
        self.went_live = True
        gpu = " with GPU stats" if message.get("gpu") else ""
        self.controls.emit(ConnectionEvent("live", f"following {self.context.run_dir}{gpu}"))

    def handle(self, message: dict[str, Any]) -> None:
        """Turn one follower message into events; a malformed one is skipped."""
        kind = message.get("t")
        handlers: dict[str, Callable[[dict[str, Any]], None]] = {
            "status": self._on_status, "pid": self._on_pid, "log": self._on_log,
            "metrics": self._on_metrics, "reset": self._on_reset, **self.context.handlers()}
        handler = handlers.get(kind) if isinstance(kind, str) else None
        try:
            if handler is not None:
                handler(message)
        except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
            log.debug("skipped a malformed %r line: %s", kind, exc)
        self.delivery.rejudge()

    def _on_status(self, message: dict[str, Any]) -> None:
        body, reason, launch = message["status"], message.get("reason"), message.get("launch")
        if isinstance(body, dict):
            read = runfiles.parse_status(json.dumps(body).encode("utf-8"))
        elif body is None and isinstance(reason, str):
            read = runfiles.StatusRead(None, clean_text(reason), missing=launch is not None)
        else:
            raise ValueError("status is neither an object nor null with a reason")
        delivery = self.delivery
        delivery.launch = None
        if isinstance(launch, dict):
            pid = launch.get("pid")
            delivery.launch = LaunchRead(
                pid if isinstance(pid, int) and not isinstance(pid, bool) else None,
                console_tail(str(launch.get("console") or "")))
        stop = message.get("stop")
        pid = stop.get("pid") if isinstance(stop, dict) else None
        delivery.stopped_pid = pid if isinstance(pid, int) and not isinstance(pid, bool) \
            else None
        delivery.disk = message.get("disk")
        alive = message.get("pid_alive")
        delivery.set_status(read, alive if isinstance(alive, bool) else None)
        key = message.get("key")
        delivery.status_key = key if isinstance(key, str) and key.isprintable() else None

    def _on_pid(self, message: dict[str, Any]) -> None:
        alive = message["alive"]
        if "disk" in message:
            self.delivery.disk = message["disk"]
        if isinstance(alive, bool):
            self.delivery.set_pid_alive(message["pid"], alive)

    def _on_log(self, message: dict[str, Any]) -> None:
        offset = _offset(message["offset"])
        if "text" in message:
            data = str(message["text"]).encode("utf-8")
        else:
            data = base64.b64decode(message["b64"], validate=True)
        ino = message.get("ino")
        self.delivery.log(data, offset, ino if isinstance(ino, int) else None)

    def _on_metrics(self, message: dict[str, Any]) -> None:
        offset, next_offset = _offset(message["offset"]), _offset(message["next"])
        rows = message["rows"]
        if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
            raise ValueError("rows is not a list of objects")
        ino = message.get("ino")
        self.delivery.metrics(rows, offset, next_offset, _offset(message.get("skipped", 0)),
                              ino if isinstance(ino, int) else None)

    def _on_reset(self, message: dict[str, Any]) -> None:
        ino = message.get("ino")
        self.delivery.reset(message["file"], ino if isinstance(ino, int) else None)


def _offset(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not an offset")
    return value
