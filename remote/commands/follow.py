"""``gpurent follow [HOST:]RUN``: stream a run's status, metrics, log and GPU stats."""

from __future__ import annotations

import argparse
import base64
import codecs
import json
import queue
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remote.commands.errors import fail
from remote.commands.target import add_connection_options, connector, parse_target
from remote.transport.base import Transport
from remote.watch import LOG_TAIL_BYTES, SILENCE_TIMEOUT, FollowOptions, Watcher
from remote.watch.events import (
    ConnectionEvent,
    GpuEvent,
    GuardEvent,
    HostEvent,
    HubEvent,
    LogEvent,
    MetricsEvent,
    StatusEvent,
    WatchEvent,
    WeightsEvent,
)
from trainer.text import clean_text

#: Health verdicts after which the run will not write more.
FINAL = ("completed", "failed", "stopped", "dead")
#: After the run ended, stop once no log or metrics arrived for this long.
DRAIN_SECONDS = 1.0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``follow`` subcommand."""
    p = sub.add_parser(
        "follow",
        help="stream a run's status, metrics rows, log and GPU/CPU stats until it ends",
        description="Follow a run live (through drops, resuming without gap or duplicate) "
        "until it completes, fails, stops or dies. The log goes to stdout (its exact bytes "
        "when stdout is not a terminal), status and metrics lines to stderr; --json prints "
        "every event as one JSON object per line instead. RUN is a local run directory or "
        "HOST:RUN_DIR. Exit 0 completed or stopped, 1 failed or dead, 2 bad input.",
    )
    p.add_argument("run", metavar="[HOST:]RUN")
    p.add_argument("--json", action="store_true", help="one JSON object per event")
    p.add_argument("--keep", action="store_true", help="keep following after the run ends")
    p.add_argument("--gpu", action="store_true",
                   help="also print GPU samples and the box's CPU and RAM")
    p.add_argument("--silence", type=float, default=SILENCE_TIMEOUT,
                   help="seconds without data before reconnecting (default "
                        f"{SILENCE_TIMEOUT:g})")
    p.add_argument("--from-start", action="store_true",
                   help=f"the whole log (default: its last {LOG_TAIL_BYTES >> 10} KiB, from a "
                   "line start, then what it gains)")
    add_connection_options(p)
    p.set_defaults(func=run)


def event_json(event: WatchEvent) -> dict[str, Any]:
    """An event as a JSON-ready object with an ``event`` key."""
    if isinstance(event, StatusEvent):
        return {"event": "status", "health": event.health.verdict,
                "reason": event.health.reason, "pid_alive": event.pid_alive,
                "status": event.read.fields, "received_at": event.received_at,
                "console": event.console}
    if isinstance(event, MetricsEvent):
        return {"event": "metrics", "rows": event.rows, "next_offset": event.next_offset,
                "skipped": event.skipped, "reset": event.reset}
    if isinstance(event, LogEvent):
        try:
            body = {"text": event.data.decode("utf-8")}
        except UnicodeDecodeError:
            body = {"b64": base64.b64encode(event.data).decode("ascii")}
        return {"event": "log", "offset": event.offset, "reset": event.reset, **body}
    if isinstance(event, GpuEvent):
        return {"event": "gpu", "gpus": [vars(g) for g in event.gpus]}
    if isinstance(event, HostEvent):
        return {"event": "host", "cpu_percent": event.cpu_percent, "cpus": event.cpus,
                "mem_used_mib": event.mem_used_mib, "mem_total_mib": event.mem_total_mib}
    if isinstance(event, GuardEvent):
        return {"event": "guard", "guard": None if event.state is None
                else {**event.state.to_dict(), "summary": event.state.summary()}}
    if isinstance(event, WeightsEvent):
        return {"event": "weights", "files": [vars(f) for f in event.files]}
    if isinstance(event, HubEvent):
        return {"event": "hub", "hub": event.ledger, "error": event.error}
    if isinstance(event, ConnectionEvent):
        return {"event": "connection", "state": event.state, "detail": event.detail,
                "attempt": event.attempt, "silent_for": event.silent_for}
    return {"event": type(event).__name__.removesuffix("Event").lower()}


class Printer:
    """Writes events for a person: log to stdout, the rest to stderr."""

    def __init__(self, gpu: bool) -> None:
        self.gpu = gpu
        self.raw = not sys.stdout.isatty()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")

    def show(self, event: WatchEvent) -> None:
        """Print one event."""
        if isinstance(event, LogEvent):
            if event.reset:
                self.note("the log was truncated or rotated; following the new file")
            if self.raw:
                sys.stdout.buffer.write(event.data)
                sys.stdout.buffer.flush()
            else:
                text = self.decoder.decode(event.data)
                sys.stdout.write(clean_text(text.replace("\r", "\n"), keep_newlines=True))
                sys.stdout.flush()
        elif isinstance(event, StatusEvent):
            s = event.read
            parts = [f"state {s.get('state')}", f"health {event.health.verdict}",
                     event.health.reason]
            if s.get("total_epochs"):
                parts.insert(2, f"epoch {s.get('completed_epochs') or 0}/"
                                f"{s.get('total_epochs')}")
            self.note(" · ".join(str(p) for p in parts))
            if event.health.verdict == "failed" and event.console:
                for line in event.console.splitlines():
                    self.note(f"console.log: {line}")
        elif isinstance(event, MetricsEvent):
            for row in event.rows:
                shown = " ".join(f"{k} {v:.4g}" for k, v in row.items()
                                 if isinstance(v, float) and k != "time")
                self.note(f"epoch {row.get('epoch')}: {shown}")
        elif isinstance(event, GpuEvent):
            if self.gpu:
                for g in event.gpus:
                    self.note(f"gpu{g.index} {g.name} util {g.util_percent}% mem "
                              f"{g.mem_used_mib}/{g.mem_total_mib} MiB "
                              f"{g.temperature_c}°C {g.power_w} W")
        elif isinstance(event, HostEvent):
            if self.gpu and event.cpu_percent is not None and event.mem_used_mib is not None \
                    and event.mem_total_mib is not None:
                self.note(f"host cpu {event.cpu_percent:.0f}% of {event.cpus} CPUs, ram "
                          f"{event.mem_used_mib:.0f}/{event.mem_total_mib:.0f} MiB")
        elif isinstance(event, ConnectionEvent):
            self.note(f"[{event.state}] {event.detail}".rstrip())
        elif isinstance(event, GuardEvent) and event.state is not None:
            self.note(event.state.summary())

    @staticmethod
    def note(text: str) -> None:
        """One line on stderr."""
        print(f"» {clean_text(text)}", file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    """Follow until the run ends (or forever with --keep)."""
    try:
        target = parse_target(args.run)
    except ValueError as exc:
        return fail("follow", exc, 2)
    if args.silence <= 0:
        return fail("follow", "--silence must be positive", 2)
    if target.modal is not None:
        from remote.commands import serverless

        connect_modal, run_dir = serverless.follow_target(target)
        return follow(connect_modal, run_dir, as_json=args.json, keep=args.keep, gpu=False,
                      silence=args.silence, poll_files="a Modal app: its Volume is read",
                      log_tail=0 if args.from_start else LOG_TAIL_BYTES)
    if target.host is None and not Path(target.path).is_dir():
        return fail("follow", f"{target.path} is not a directory", 2)
    connect = connector(target, args, bootstrap=True, strict=False, note=Printer.note)
    connect.lazy = True  # the follower starts through the gate: one exec
    return follow(connect, target.path, as_json=args.json, keep=args.keep, gpu=args.gpu,
                  silence=args.silence, log_tail=0 if args.from_start else LOG_TAIL_BYTES,
                  gate=connect)


def follow(connect: Callable[[], Transport], run_dir: str, *, as_json: bool = False,
           keep: bool = False, gpu: bool = False, silence: float = SILENCE_TIMEOUT,
           log_tail: int = 0, gate: Any = None, poll_files: str = "") -> int:
    """Stream ``run_dir`` on the box ``connect()`` reaches until the run ends (or for
    ever with ``keep``); the exit code: 0 completed or stopped, else 1. ``log_tail``: start
    with only the log's last bytes; ``gate``: a ``Connector`` to start the follower with
    (``remote.link.gate``); ``poll_files``: read the run's files from the start, saying
    why (a Modal Volume, which runs no follower)."""
    events: queue.Queue[WatchEvent] = queue.Queue()
    printer = Printer(gpu)
    watcher = Watcher(connect, run_dir, events.put, silence_timeout=silence,
                      log_tail=log_tail, gate=gate,
                      poll_interval=2.0 if poll_files else FollowOptions.poll_interval)
    if poll_files:
        watcher.poll_files(poll_files)
    watcher.start()
    verdict, last_data = None, time.monotonic()
    try:
        while True:
            try:
                event = events.get(timeout=0.1)
            except queue.Empty:
                if verdict in FINAL and not keep and \
                        time.monotonic() - last_data >= DRAIN_SECONDS:
                    break
                if not watcher.running and events.empty():
                    break
                continue
            if as_json:
                print(json.dumps(event_json(event)), flush=True)  # ensure_ascii: inert
            else:
                printer.show(event)
            if isinstance(event, LogEvent | MetricsEvent):
                last_data = time.monotonic()
            elif isinstance(event, StatusEvent):
                verdict = event.health.verdict
                last_data = time.monotonic()
            elif isinstance(event, ConnectionEvent) and event.state == "blocked":
                break  # trying again cannot work until a person acts: the line says how
    finally:
        watcher.stop()
    return 0 if verdict in ("completed", "stopped") else 1
