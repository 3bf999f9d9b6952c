"""A watch of a run with a huge log (220 MB) starts at the log's tail, with a bounded
number of bytes on the wire whatever the log's size; older parts and search are answered
on the box (``trainer log``); the follower streams the run's side files (hub.json,
guard.json, the weights' identity) and the project's runs as they change. Real follower
processes over ``LocalTransport``."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from remote.runs import log as logread
from remote.transport.local import LocalTransport
from remote.watch import LOG_TAIL_BYTES, Watcher
from remote.watch.events import GuardEvent, HubEvent, LogEvent, RunsEvent, StatusEvent, WeightsEvent
from tests.fixtures.tui_runs import write_run
from tests.fixtures.watcher_kit import Recorder
from trainer import procid, runfiles

LOG_BYTES = 220 * 1000 * 1000
LAST = "the very last line of the log"


class Metered:
    """A ``LocalTransport`` whose follower streams count the bytes they deliver."""

    def __init__(self) -> None:
        self.inner = LocalTransport()
        self.trainer_prefix = self.inner.trainer_prefix
        self.received = 0

    def stream(self, command: str, **kw: Any) -> Any:
        stream = self.inner.stream(command, **kw)
        meter = self

        class Counted:
            def lines(self, timeout: float, max_line: int | None = None) -> Any:
                for line in stream.lines(timeout, max_line):
                    meter.received += len(line) + 1
                    yield line

            def close(self) -> None:
                stream.close()

        return Counted()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def huge_log_run(root: Path) -> Path:
    """A run whose train.log is 220 MB: sparse up to its last lines, which are real."""
    run = write_run(root / "big", done=2, total=4, state="completed")
    with open(run / runfiles.LOG_FILE, "r+b") as fh:
        fh.truncate(LOG_BYTES)
        fh.seek(LOG_BYTES)
        for n in range(20_000):
            fh.write(f"2026-07-31 10:00:00 | INFO     | step {n} loss 0.5 findme{n % 7}\n"
                     .encode())
        fh.write(f"{LAST}\n".encode())
    return run


def watch(run: Path, transport: Any, **kw: Any) -> tuple[Watcher, Recorder]:
    seen = Recorder()
    watcher = Watcher(lambda: transport, str(run), seen, close_transport=False, **kw)
    watcher.start()
    return watcher, seen


def test_a_huge_log_starts_at_its_tail_with_bounded_bytes(tmp_path: Path) -> None:
    run = huge_log_run(tmp_path)
    size = (run / runfiles.LOG_FILE).stat().st_size
    link = Metered()
    watcher, seen = watch(run, link, log_tail=LOG_TAIL_BYTES)
    try:
        seen.wait(lambda ev: any(isinstance(e, LogEvent) and LAST.encode() in e.data
                                 for e in ev), what="the log's last line")
        first = seen.of(LogEvent)[0]
        assert size - LOG_TAIL_BYTES <= first.offset < size - 1000
        with open(run / runfiles.LOG_FILE, "rb") as fh:  # it starts at a line start
            fh.seek(first.offset - 1)
            assert fh.read(1) == b"\n"
        assert link.received < 2_000_000, f"{link.received} bytes for a {size}-byte log"
        assert seen.of(StatusEvent)
    finally:
        watcher.stop()


def test_older_parts_and_search_are_answered_on_the_box(tmp_path: Path) -> None:
    run = write_run(tmp_path / "r", done=1, total=1, state="completed",
                    log_lines=[f"line {n} {'needle' if n % 1000 == 0 else 'hay'}"
                               for n in range(30_000)])
    data = (run / runfiles.LOG_FILE).read_bytes()
    box = LocalTransport()
    end = len(data) - 5000
    end = data.index(b"\n", end) + 1  # where a tail watch would start
    chunk = logread.older_log(box, str(run), end, 64 * 1024)
    assert chunk.offset + len(chunk.data) == end and end - chunk.offset <= 64 * 1024
    assert chunk.data == data[chunk.offset:end] and data[chunk.offset - 1:chunk.offset] == b"\n"
    assert chunk.size == len(data)
    found = logread.search_log(box, str(run), "NEEDLE", limit=5)
    assert found.total == 30 and found.truncated and len(found.matches) == 5
    first = found.matches[0]
    assert first.line == 1 and first.offset == 0 and "line 0 needle" in first.text
    assert found.matches[1].line == 1001
    assert data[found.matches[1].offset:].startswith(found.matches[1].text.encode())
    assert logread.search_log(box, str(run), "absent").total == 0


def test_side_files_and_runs_are_streamed_as_they_change(tmp_path: Path) -> None:
    project = tmp_path / "project"
    run = write_run(project / "exp1", done=1, total=3, state="completed")
    watcher, seen = watch(run, LocalTransport(), project=str(project), runs_interval=1.0)
    try:
        seen.wait(lambda ev: seen.of(RunsEvent) and seen.of(GuardEvent) and
                  seen.of(WeightsEvent) and seen.of(HubEvent), what="the first side files")
        assert seen.of(GuardEvent)[-1].state is None and seen.of(WeightsEvent)[-1].files == ()
        (run / "weights" / "best.pt").write_bytes(b"w" * 100)
        seen.wait(lambda ev: any(f.name == "best.pt" and f.size == 100
                                 for e in seen.of(WeightsEvent) for f in e.files),
                  what="best.pt's identity")
        runfiles.atomic_write_json(run / runfiles.HUB_FILE, {"files": []})
        seen.wait(lambda ev: any(e.ledger == {"files": []} for e in seen.of(HubEvent)),
                  what="hub.json")
        guard = {"state": "armed", "when": "done", "then": "stop", "pid": os.getpid(),
                 "started_at": runfiles.utc_now_iso(time.time() - 5),
                 **procid.identity(os.getpid())}
        runfiles.atomic_write_json(run / "guard.json", guard)
        seen.wait(lambda ev: any(e.state is not None and e.state.watching
                                 for e in seen.of(GuardEvent)), what="the armed guard")
        write_run(project / "exp2", done=1, total=3, state="completed")
        seen.wait(lambda ev: any({r.name for r in e.runs} == {"exp1", "exp2"}
                                 for e in seen.of(RunsEvent)), what="the new run")
    finally:
        watcher.stop()
