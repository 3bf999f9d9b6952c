"""``remote.watch.watcher.Watcher`` over ``LocalTransport``: real follower processes, a real
writer process, the follower killed under it, no python on the "box", garbage lines."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from remote.transport.local import LocalTransport
from remote.watch.events import (
    ConnectionEvent,
    HostEvent,
    LogEvent,
    MetricsEvent,
    StatusEvent,
    WatchEvent,
)
from remote.watch.watcher import Watcher
from tests.fixtures.paths import ROOT
from tests.fixtures.watcher_kit import Recorder
from trainer import runfiles

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def start_writer(run: Path, *args: str) -> subprocess.Popen[bytes]:
    """A simulated trainer writing ``run``."""
    return subprocess.Popen([sys.executable, "-m", "tests.fixtures.run_sim", str(run), *args],
                            cwd=ROOT, env=ENV)


def followers(run: Path) -> list[psutil.Process]:
    """The ``trainer follow`` processes following ``run``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "follow" in cmd and str(run) in cmd and "trainer" in cmd:
            found.append(proc)
    return found


def caught_up(rec: Recorder, run: Path) -> Callable[[list[WatchEvent]], bool]:
    """All of the log and a final status have been delivered."""
    def check(_events: list[WatchEvent]) -> bool:
        log = run / runfiles.LOG_FILE
        return rec.health() == "completed" and log.exists() and \
            len(rec.log()) == log.stat().st_size
    return check


def test_resumes_after_the_follower_is_killed_without_gap_or_duplicate(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rec = Recorder()
    watcher = Watcher(LocalTransport, str(run), rec, silence_timeout=5, poll_interval=0.05)
    writer = start_writer(run, "--epochs", "6", "--epoch-seconds", "0.5",
                          "--lines-per-epoch", "40", "--seed", "11")
    watcher.start()
    try:
        kills = 0
        for n in range(1, 4):
            rec.wait(lambda ev, n=n: [e.state for e in ev if isinstance(e, ConnectionEvent)]
                     .count("live") >= n, what=f"connection {n}")
            seen = len(rec.of(LogEvent))
            rec.wait(lambda _ev, seen=seen: len(rec.of(LogEvent)) > seen, what="log data")
            procs = followers(run)
            assert procs, "no follower is running"
            for proc in procs:
                proc.send_signal(signal.SIGKILL)
            kills += 1
            time.sleep(0.3)
        assert writer.wait(60) == 0
        rec.wait(caught_up(rec, run), what="the whole log and a completed status")
    finally:
        watcher.stop()
        writer.kill()
    assert kills == 3
    assert rec.log() == (run / runfiles.LOG_FILE).read_bytes()
    rows = [r for e in rec.of(MetricsEvent) for r in e.rows]
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5, 6]
    states = [e.state for e in rec.of(ConnectionEvent)]
    assert states.count("reconnecting") >= 3 and states.count("live") >= 4
    assert states[-1] == "closed" and not watcher.running
    assert not followers(run), "the follower outlived the watcher"


def test_a_sigkilled_trainer_is_judged_dead(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rec = Recorder()
    writer = start_writer(run, "--epochs", "1", "--epoch-seconds", "0.1", "--hold")
    watcher = Watcher(LocalTransport, str(run), rec, poll_interval=0.05)
    watcher.start()
    try:
        rec.wait(lambda ev: any(isinstance(e, StatusEvent) and e.pid_alive
                                and e.read.get("completed_epochs") == 1 for e in ev),
                 what="a live run after its epoch")
        assert rec.health() == "live"
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        rec.wait(lambda _ev: rec.health() == "dead", what="health dead")
    finally:
        watcher.stop()
        writer.kill()
    last = rec.of(StatusEvent)[-1]
    assert last.pid_alive is False and last.read.get("state") == "running"
    assert f"pid {writer.pid} is gone" in last.health.reason


def test_polls_the_files_when_the_box_has_no_python(tmp_path: Path) -> None:
    run = tmp_path / "run"
    rec = Recorder()
    writer = start_writer(run, "--epochs", "3", "--epoch-seconds", "0.3", "--seed", "5")

    def no_python() -> LocalTransport:
        transport = LocalTransport()
        transport.trainer_prefix = str(tmp_path / "no" / "python3")
        return transport

    watcher = Watcher(no_python, str(run), rec, poll_interval=0.05)
    watcher.start()
    try:
        rec.wait(lambda ev: any(isinstance(e, ConnectionEvent) and e.state == "polling"
                                for e in ev), what="the polling fallback")
        assert writer.wait(60) == 0
        rec.wait(caught_up(rec, run), what="the whole log by polling")
    finally:
        watcher.stop()
        writer.kill()
    assert watcher.polling
    assert rec.log() == (run / runfiles.LOG_FILE).read_bytes()
    assert [r["epoch"] for e in rec.of(MetricsEvent) for r in e.rows] == [1, 2, 3]
    polling = [e for e in rec.of(ConnectionEvent) if e.state == "polling"]
    assert len(polling) == 1 and "not found" in polling[0].detail


def test_garbage_lines_are_skipped(tmp_path: Path) -> None:
    run = tmp_path / "run"
    # The follower's output passes through a filter that adds junk after every line:
    # a login banner's leftovers, broken JSON, messages with wrong types.
    junk = ['garbage {', '{"t":"log","offset":-5,"text":"x"}', '[1, 2]',
            '{"t":"metrics","offset":0,"next":"9","rows":"no"}', '{"t":"gpu","gpus":[[0]]}',
            '{"t":"log","offset":0,"b64":"!!!"}', '{"t":"status","status":7}',
            '{"t":"reset","file":"other"}', '{"t":7}', '\x1b]0;title\x07']
    filter_script = tmp_path / "noisy.sh"
    filter_script.write_text(
        '"$@" | while IFS= read -r line; do printf "%s\\n" "$line"; '
        + " ".join(f"printf '%s\\n' {shlex.quote(j)};" for j in junk) + " done\n")

    def noisy() -> LocalTransport:
        transport = LocalTransport()
        transport.trainer_prefix = f"sh {filter_script} env {transport.trainer_prefix}"
        return transport

    rec = Recorder()
    writer = start_writer(run, "--epochs", "2", "--epoch-seconds", "0.3", "--seed", "2")
    watcher = Watcher(noisy, str(run), rec, poll_interval=0.05)
    watcher.start()
    try:
        assert writer.wait(60) == 0
        rec.wait(caught_up(rec, run), what="the whole log through the noise")
    finally:
        watcher.stop()
        writer.kill()
    assert rec.log() == (run / runfiles.LOG_FILE).read_bytes()
    assert [r["epoch"] for e in rec.of(MetricsEvent) for r in e.rows] == [1, 2]
    assert not watcher.polling
    assert [e.state for e in rec.of(ConnectionEvent)].count("live") == 1


def test_reconnect_now_resumes_and_stop_closes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    runfiles.RunWriter(run).write_status({"state": "completed", "total_epochs": 1,
                                          "completed_epochs": 1})
    (run / runfiles.LOG_FILE).write_bytes(b"one\n")
    rec = Recorder()
    watcher = Watcher(LocalTransport, str(run), rec, poll_interval=0.05)
    watcher.start()
    rec.wait(lambda _ev: rec.log() == b"one\n", what="the log")
    watcher.reconnect_now()
    rec.wait(lambda ev: [e.state for e in ev if isinstance(e, ConnectionEvent)].count("live")
             == 2, what="a second live connection")
    with open(run / runfiles.LOG_FILE, "ab") as fh:
        fh.write(b"two\n")
    rec.wait(lambda _ev: rec.log() == b"one\ntwo\n", what="the rest of the log")
    # The box's CPU and RAM come too (every --gpu-interval, 2 s by default).
    rec.wait(lambda _ev: any(e.cpu_percent is not None for e in rec.of(HostEvent)),
             what="a CPU sample")
    host = [e for e in rec.of(HostEvent) if e.cpu_percent is not None][-1]
    assert 0 <= host.cpu_percent <= 100 and 0 < host.mem_used_mib < host.mem_total_mib
    watcher.stop()
    assert not watcher.running
    assert rec.of(ConnectionEvent)[-1].state == "closed"
    assert not [e for e in rec.of(ConnectionEvent) if e.state == "reconnecting"]
    assert len(rec.of(StatusEvent)) == 1, "an unchanged status was sent again"


def test_a_silent_follower_is_stale_and_replaced(tmp_path: Path) -> None:
    run = tmp_path / "run"
    runfiles.RunWriter(run).write_status({"state": "completed"})
    (run / runfiles.LOG_FILE).write_bytes(b"before\n")
    rec = Recorder()
    watcher = Watcher(LocalTransport, str(run), rec, silence_timeout=1.5, poll_interval=0.05)
    watcher.start()
    try:
        rec.wait(lambda _ev: rec.log() == b"before\n", what="the log")
        frozen = followers(run)
        assert len(frozen) == 1
        frozen[0].send_signal(signal.SIGSTOP)  # a link that hangs: no bytes, no EOF
        with open(run / runfiles.LOG_FILE, "ab") as fh:
            fh.write(b"during\n")
        rec.wait(lambda ev: any(isinstance(e, ConnectionEvent) and e.state == "stale"
                                for e in ev), what="stale")
        rec.wait(lambda _ev: rec.log() == b"before\nduring\n", what="the resumed log")
        assert not frozen[0].is_running() or frozen[0].status() == psutil.STATUS_ZOMBIE
    finally:
        watcher.stop()
    states = [e.state for e in rec.of(ConnectionEvent)]
    assert states[:4] == ["live", "stale", "reconnecting", "live"]


#: A "follower" on the box: says hello, sends the lines of the file it is given, waits.
REPLAY = r"""
import json, sys, time
out = sys.stdout.buffer
out.write(b'{"t":"hello","now":%f}\n' % time.time())
with open(sys.argv[1], "rb") as fh:
    out.write(fh.read())
out.flush()
time.sleep(30)
"""


def test_bytes_and_rows_sent_again_are_delivered_once(tmp_path: Path) -> None:
    """A follower may send again what was delivered (a resume from an older offset): the
    log's overlap is trimmed, a metrics message already delivered is dropped."""
    messages = [
        {"t": "log", "offset": 0, "text": "one\ntwo\n"},
        {"t": "log", "offset": 0, "text": "one\n"},
        {"t": "log", "offset": 4, "text": "two\nthree\n"},
        {"t": "metrics", "offset": 0, "next": 12, "rows": [{"epoch": 1}]},
        {"t": "metrics", "offset": 0, "next": 12, "rows": [{"epoch": 1}]},
        {"t": "metrics", "offset": 12, "next": 24, "rows": [{"epoch": 2}]},
        {"t": "log", "offset": 14, "text": "end\n"},
    ]
    (tmp_path / "lines").write_text("".join(json.dumps(m) + "\n" for m in messages))
    (tmp_path / "replay.py").write_text(REPLAY)

    def replay() -> LocalTransport:
        transport = LocalTransport()
        transport.trainer_prefix = f"{sys.executable} {tmp_path / 'replay.py'} " \
                                   f"{tmp_path / 'lines'}"
        return transport

    rec = Recorder()
    watcher = Watcher(replay, str(tmp_path / "run"), rec, silence_timeout=30)
    watcher.start()
    try:
        rec.wait(lambda _ev: any(e.data.endswith(b"end\n") for e in rec.of(LogEvent)),
                 what="the last log line")
    finally:
        watcher.stop()
    assert b"".join(e.data for e in rec.of(LogEvent)) == b"one\ntwo\nthree\nend\n"
    assert [r["epoch"] for e in rec.of(MetricsEvent) for r in e.rows] == [1, 2]


def test_polling_starts_a_shrunk_log_and_metrics_again(tmp_path: Path) -> None:
    """Without python on the box: a log or metrics file cut below what was delivered is
    read again from its start (a reset), not skipped until it grows past the old end."""
    run = tmp_path / "run"
    writer = runfiles.RunWriter(run)
    rec = Recorder()

    def status_read(epochs: int) -> None:
        """A new status, of a new size (a poll notices it by size and mtime)."""
        writer.write_status({"state": "completed", "total_epochs": epochs})
        rec.wait(lambda ev: any(isinstance(e, StatusEvent) and
                                e.read.get("total_epochs") == epochs for e in ev),
                 what=f"the status with {epochs} epochs")

    def no_python() -> LocalTransport:
        transport = LocalTransport()
        transport.trainer_prefix = str(tmp_path / "no" / "python3")
        return transport

    (run / runfiles.LOG_FILE).parent.mkdir(parents=True, exist_ok=True)
    (run / runfiles.LOG_FILE).write_bytes(b"a long first line\n")
    (run / runfiles.METRICS_FILE).write_bytes(b'{"epoch": 1, "loss": 0.5}\n')
    watcher = Watcher(no_python, str(run), rec, poll_interval=0.05)
    writer.write_status({"state": "completed", "total_epochs": 3})
    watcher.start()
    try:
        rec.wait(lambda _ev: rec.log() == b"a long first line\n" and rec.of(MetricsEvent),
                 what="the first log and row")
        (run / runfiles.LOG_FILE).write_bytes(b"new\n")
        (run / runfiles.METRICS_FILE).write_bytes(b'{"epoch": 7}\n')
        # Files are read after the status in each poll: a status seen, then another,
        # means a whole poll read the shortened files.
        status_read(30)
        status_read(300)
    finally:
        watcher.stop()
    assert watcher.polling
    assert rec.log() == b"new\n"
    rows: list[dict] = []
    for event in rec.of(MetricsEvent):
        rows = [] if event.reset else [*rows, *event.rows]
    assert [r["epoch"] for r in rows] == [7]
