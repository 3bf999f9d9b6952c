"""``python3 -m trainer follow RUN_DIR``: stream a run directory as JSON lines.

Standard library only: this runs on a box that may have nothing but ``python3`` (to watch
a run written by ``libreyolo train``). It polls with ``os.stat`` a few times a second,
sends only what changed and a tiny heartbeat when idle, one JSON object per line on
stdout, flushed. It ends by itself when stdout is closed (the SSH channel went away) or
its parent process is gone.

The wire protocol (one message type per ``t``) is in ``docs/SCHEMAS.md``, "follow".
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import select
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from trainer import engines, runfiles, smi
from trainer.health import disk_space, local_pid_alive
from trainer.watch.boxinfo import box_info
from trainer.watch.logs import tail_start
from trainer.watch.runs import RunScanner, choose, read_launch
from trainer.watch.side import SideFiles

PROTOCOL_VERSION = 1

#: Largest piece of a file sent in one line.
CHUNK_BYTES = 64 * 1024
#: Most bytes of one file read in one poll, so that the other files get their turn.
MAX_BYTES_PER_POLL = 1 << 20



# --------------------------------------------------------------------------- output


class Output:
    """Writes JSON lines to a binary stream, flushing each, and remembers when it last
    wrote (for heartbeats). Raises ``BrokenPipeError`` when the reader is gone."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.last_write = 0.0

    def send(self, message: dict[str, Any]) -> None:
        """Write one message as a line and flush it."""
        try:
            data = _json_line(message, ensure_ascii=False)
        except UnicodeEncodeError:  # a lone surrogate from a \ud800 escape in the input
            data = _json_line(message, ensure_ascii=True)
        self.stream.write(data)
        self.stream.flush()
        self.last_write = time.monotonic()


def _json_line(message: dict[str, Any], *, ensure_ascii: bool) -> bytes:
    text = json.dumps(message, ensure_ascii=ensure_ascii, separators=(",", ":"),
                      allow_nan=False)
    return (text + "\n").encode("utf-8")


# --------------------------------------------------------------------------- files


def encode_bytes(data: bytes) -> tuple[dict[str, str], int]:
    """Encode file bytes for a JSON line: ``{"text": ...}`` when they are UTF-8 (an
    incomplete character at the end is left out and its length returned, to go with the
    next read), else ``{"b64": ...}``. Returns the field and how many bytes it holds."""
    try:
        return {"text": data.decode("utf-8")}, len(data)
    except UnicodeDecodeError as exc:
        # Only an incomplete sequence at the very end: cut it off and send the rest.
        if exc.reason == "unexpected end of data" and exc.start >= len(data) - 3:
            with contextlib.suppress(UnicodeDecodeError):
                if exc.start > 0:
                    return {"text": data[:exc.start].decode("utf-8")}, exc.start
    return {"b64": base64.b64encode(data).decode("ascii")}, len(data)


class Tail:
    """Follows one growing file by byte offset, noticing truncation and replacement.

    The file is held open so that bytes written to it before it was rotated away are
    still read. ``poll`` yields ``("reset", reason)`` and ``("data", offset, bytes)``."""

    def __init__(self, path: Path, offset: int = 0, ino: int | None = None) -> None:
        self.path = path
        self.offset = max(0, offset)
        self.ino = ino
        self._fh: Any = None
        self._seen_size = -1

    def close(self) -> None:
        """Close the held file."""
        if self._fh is not None:
            with contextlib.suppress(OSError):
                self._fh.close()
            self._fh = None

    def poll(self, limit: int = MAX_BYTES_PER_POLL) -> Iterator[tuple]:
        """What changed since the last poll, as ``reset`` and ``data`` items."""
        try:
            st = os.stat(self.path)
        except OSError:
            st = None
        if self._fh is not None and (st is None or st.st_ino != self.ino):
            # Rotated away or deleted: finish the old file, then let go of it.
            yield from self._read(limit, os.fstat(self._fh.fileno()).st_size)
            self.close()
        if st is None:
            return
        if self._fh is None:
            try:
                self._fh = open(self.path, "rb")  # noqa: SIM115 (held across polls)
            except OSError:
                return
            fst = os.fstat(self._fh.fileno())
            replaced = self.ino is not None and fst.st_ino != self.ino
            self.ino = fst.st_ino
            if replaced:
                self.offset, self._seen_size = 0, -1
                yield ("reset", "replaced")
            size = fst.st_size
        else:
            size = st.st_size
        if size < self.offset:
            self.offset, self._seen_size = 0, -1
            yield ("reset", "truncated")
        if size != self._seen_size:
            yield from self._read(limit, size)

    def _read(self, limit: int, size: int) -> Iterator[tuple]:
        self._seen_size = size
        self._fh.seek(self.offset)
        data = self._fh.read(min(limit, max(0, size - self.offset)))
        if len(data) < size - self.offset:
            self._seen_size = -1  # more to read at the next poll
        if data:
            yield ("data", self.offset, data)


class LogFollower:
    """Turns a ``Tail`` of ``train.log`` into ``log`` and ``reset`` messages."""

    def __init__(self, tail: Tail) -> None:
        self.tail = tail

    def poll(self) -> Iterator[dict[str, Any]]:
        """Messages for what the log gained since the last poll."""
        for item in self.tail.poll():
            if item[0] == "reset":
                yield {"t": "reset", "file": "log", "ino": self.tail.ino, "reason": item[1]}
                continue
            _, offset, data = item
            pos = 0
            while pos < len(data):
                field, used = encode_bytes(data[pos:pos + CHUNK_BYTES])
                yield {"t": "log", "offset": offset + pos, "ino": self.tail.ino, **field}
                pos += used
            self.tail.offset = offset + len(data)


class MetricsFollower:
    """Turns a ``Tail`` of ``metrics.jsonl`` into ``metrics`` and ``reset`` messages.
    Only whole lines are sent; a half-written last line waits for its newline."""

    def __init__(self, tail: Tail) -> None:
        self.tail = tail

    def poll(self) -> Iterator[dict[str, Any]]:
        """Messages for the rows the file gained since the last poll."""
        for item in self.tail.poll():
            if item[0] == "reset":
                yield {"t": "reset", "file": "metrics", "ino": self.tail.ino,
                       "reason": item[1]}
                continue
            _, offset, data = item
            chunk = runfiles.parse_metrics(data, offset)
            if chunk.next_offset == offset:
                if len(data) < MAX_BYTES_PER_POLL:
                    continue  # no complete line yet; look again once the file changes
                # A "line" longer than a whole read is not a row: skip past it.
                chunk.next_offset, chunk.skipped = offset + len(data), 1
            self.tail.offset = chunk.next_offset
            yield {"t": "metrics", "offset": offset, "next": chunk.next_offset,
                   "ino": self.tail.ino, "rows": runfiles.finite_json(chunk.rows),
                   "skipped": chunk.skipped}


class StatusFollower:
    """Sends ``status.json`` when its (inode, mtime, size) changes, and the liveness of
    the pid it names whenever that changes."""

    def __init__(self, path: Path, key: str | None = None) -> None:
        self.path = path
        self.key = key
        self.pid: int | None = None
        self.alive: bool | None = None
        self._sent_once = key is not None
        self._sent_at = 0.0

    def poll(self) -> Iterator[dict[str, Any]]:
        """A ``status`` message when the file changed, a ``pid`` one when liveness did.
        Without status.json the console's growth counts as a change (once a second)."""
        try:
            st = os.stat(self.path)
            stop = engines.stop_mark_key(self.path.parent)
            key = f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}{stop}"
        except OSError:
            st, key = None, "missing"
            with contextlib.suppress(OSError):
                console = os.stat(engines.local_launch_files(self.path.parent)[1])
                if time.monotonic() - self._sent_at >= 1.0 or not self._sent_once:
                    key = f"missing:{console.st_ino}:{console.st_size}"
                elif self.key is not None:
                    key = self.key
        if key != self.key or not self._sent_once:
            self._sent_at = time.monotonic()
            self.key, self._sent_once = key, True
            yield self._status_message(st)
        elif self.pid is not None:
            alive = local_pid_alive(self.pid)
            if alive != self.alive:
                self.alive = alive
                # The disk with it: a run that died of a full disk is told as such.
                yield {"t": "pid", "pid": self.pid, "alive": alive,
                       "disk": disk_space(self.path.parent)}

    def _status_message(self, st: os.stat_result | None) -> dict[str, Any]:
        read = runfiles.read_status(self.path)
        launch = read_launch(self.path.parent) if read.missing else None
        pid = read.get("pid") if launch is None else launch.pid
        self.pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        self.alive = None if self.pid is None else local_pid_alive(self.pid)
        message: dict[str, Any] = {"t": "status", "key": self.key,
                                   "mtime": None if st is None else st.st_mtime,
                                   "status": runfiles.finite_json(read.fields),
                                   "pid_alive": self.alive,
                                   "disk": disk_space(self.path.parent)}
        if not read.ok:
            message["reason"] = read.reason
        if launch is not None:
            message["launch"] = {"pid": launch.pid, "console": launch.console}
        if engines.read_stop_mark(self.path.parent) is not None:
            message["stop"] = {"pid": engines.read_stop_mark(self.path.parent)}
        return message


# --------------------------------------------------------------------------- loop


def _parse_resume(value: str | None) -> int | None:
    return None if value is None or value.lower() in ("", "none") else int(value)


def build_parser() -> argparse.ArgumentParser:
    """The ``trainer follow`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer follow",
        description="Stream a run directory's status, metrics rows, log bytes and GPU "
        "stats as JSON lines on stdout, resuming from the given offsets. With --project, "
        "also the project's runs (and, without RUN_DIR, the run to watch is chosen: the "
        "newest going one, else the newest).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR", nargs="?")
    p.add_argument("--project", default=None, help="also list this project's runs")
    p.add_argument("--log-offset", type=int, default=0, help="resume train.log at this byte")
    p.add_argument("--log-ino", type=_parse_resume, default=None,
                   help="inode the log offset refers to (a different file means reset)")
    p.add_argument("--log-tail", type=int, default=0, metavar="BYTES",
                   help="a fresh start (no offset, no inode) sends only the log's last "
                   "BYTES, from a line start (0: the whole log)")
    p.add_argument("--metrics-offset", type=int, default=0,
                   help="resume metrics.jsonl at this byte")
    p.add_argument("--metrics-ino", type=_parse_resume, default=None,
                   help="inode the metrics offset refers to")
    p.add_argument("--status-key", default=None,
                   help="the 'key' of the last status received; not sent again if unchanged")
    p.add_argument("--poll", type=float, default=0.2, help="seconds between polls")
    p.add_argument("--heartbeat", type=float, default=1.0,
                   help="send a heartbeat after this many idle seconds")
    p.add_argument("--gpu-interval", type=float, default=2.0,
                   help="seconds between nvidia-smi samples (0: none)")
    p.add_argument("--runs-interval", type=float, default=15.0,
                   help="seconds between looks at the project's runs")
    p.add_argument("--needs", default="", help="comma-separated modules the box tools "
                   "need; hello says which this python lacks")
    return p


class Follower:
    """The follow loop: polls the run's files, writes messages to ``out``."""

    def __init__(self, args: argparse.Namespace, out: Output,
                 parent_alive: Callable[[], bool]) -> None:
        self.args = args
        self.out = out
        self.parent_alive = parent_alive
        self.scanner = RunScanner(args.project) if args.project else None
        self.runs: list[dict[str, Any]] = []
        self._runs_sent: dict[str, dict[str, Any]] | None = None
        self.run_arg = args.run_dir
        if self.run_arg is None and self.scanner is not None:
            self.runs = self.scanner.scan()  # to choose; a named run is sent before this
            chosen = choose(self.runs)
            self.run_arg = None if chosen is None else chosen["run_dir"]
        self.run_dir = None if self.run_arg is None else Path(self.run_arg).absolute()
        self.gpu = smi.GpuSampler(args.gpu_interval)
        self.host = smi.HostLoad()
        self._next_host = 0.0
        self.parts: list[Any] = []
        if self.run_dir is not None:
            log_path = self.run_dir / runfiles.LOG_FILE
            offset = args.log_offset
            if args.log_tail > 0 and offset == 0 and args.log_ino is None:
                offset = tail_start(log_path, args.log_tail)
            self.status = StatusFollower(self.run_dir / runfiles.STATUS_FILE, args.status_key)
            self.log = LogFollower(Tail(log_path, offset, args.log_ino))
            self.metrics = MetricsFollower(Tail(self.run_dir / runfiles.METRICS_FILE,
                                                args.metrics_offset, args.metrics_ino))
            self.side = SideFiles(self.run_dir)
            self.parts = [self.status, self.metrics, self.log]

    def hello(self) -> dict[str, Any]:
        """The first message: who follows what, and this install (``box``)."""
        message: dict[str, Any] = {
            "t": "hello", "v": PROTOCOL_VERSION, "pid": os.getpid(), "now": time.time(),
            "run_dir": None if self.run_dir is None else str(self.run_dir),
            "run": self.run_arg, "project": self.args.project, "gpu": self.gpu.available,
            "box": box_info([n for n in self.args.needs.split(",") if n])}
        if self.parts:
            message["log"] = [self.log.tail.offset, self.log.tail.ino]
            message["metrics"] = [self.metrics.tail.offset, self.metrics.tail.ino]
        return message

    def run(self) -> None:
        """Loop until the reader or the parent is gone (``BrokenPipeError`` ends it)."""
        poll = max(0.02, self.args.poll)
        self.out.send(self.hello())
        if self.parts:
            self._send_all(self.status.poll())  # the watched run first, then the list
        next_scan = 0.0
        try:
            while self.parent_alive():
                now = time.monotonic()
                if self.scanner is not None and now >= next_scan:
                    if self._runs_sent is not None or not self.runs:
                        self.runs = self.scanner.scan()
                    self._send_runs()
                    next_scan = now + max(1.0, self.args.runs_interval)
                self._send_all(self.gpu.ensure_running(now))
                if self.args.gpu_interval > 0 and now >= self._next_host:
                    self._next_host = now + self.args.gpu_interval
                    load = self.host.sample()
                    if load is not None:
                        self.out.send({"t": "host", **load})
                for part in self.parts:
                    self._send_all(part.poll())
                if self.parts:
                    self._send_all(self.side.poll(now))
                if time.monotonic() - self.out.last_write >= self.args.heartbeat:
                    self.out.send({"t": "hb"})
                self._wait(poll)
        finally:
            self.gpu.stop()
            if self.parts:
                self.log.tail.close()
                self.metrics.tail.close()

    def _send_runs(self) -> None:
        """A ``runs`` message: the whole list the first time, then what changed."""
        current = {r["name"]: r for r in self.runs}
        sent = self._runs_sent
        if sent is None:
            self.out.send({"t": "runs", "project": self.args.project, "full": True,
                           "runs": self.runs, "gone": []})
        else:
            changed = [r for r in self.runs if sent.get(r["name"]) != r]
            gone = sorted(set(sent) - set(current))
            if changed or gone:
                self.out.send({"t": "runs", "project": self.args.project, "full": False,
                               "runs": changed, "gone": gone})
        self._runs_sent = current

    def _send_all(self, messages: Iterator[dict[str, Any]]) -> None:
        for message in messages:
            self.out.send(message)

    def _wait(self, seconds: float) -> None:
        """Sleep for one poll, reading nvidia-smi output as it arrives."""
        fd = self.gpu.fileno()
        if fd is None:
            time.sleep(seconds)
            return
        ready, _, _ = select.select([fd], [], [], seconds)
        if ready:
            self._send_all(self.gpu.read(time.monotonic()))


def _parent_watch() -> Callable[[], bool]:
    parent = os.getppid()
    return lambda: os.getppid() == parent


def main(argv: list[str]) -> int:
    """Run the follower until stdout or the parent goes away."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.run_dir is None and not args.project:
        parser.error("give RUN_DIR, --project DIR, or both")
    out = Output(sys.stdout.buffer)
    try:
        Follower(args, out, _parent_watch()).run()
    except BrokenPipeError:
        pass
    except KeyboardInterrupt:
        return 130
    finally:
        # Nothing more can be written; keep the interpreter from complaining at exit.
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
    return 0
