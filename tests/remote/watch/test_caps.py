"""Caps on the follower stream (``remote.watch.caps``): a box that sends an endless line,
a message nested without end or a flood of messages costs the laptop bounded memory; the
watcher skips or reconnects and says why once. The endless line goes through the real
sshd, and the laptop's peak RSS is read from ``/proc/self/status``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from remote.transport.local import LocalTransport
from remote.watch.caps import MAX_JSON_DEPTH, RateCap, decode_message, depth_within
from remote.watch.events import ConnectionEvent, LogEvent
from remote.watch.watcher import Watcher
from tests.fixtures.paths import ROOT
from tests.fixtures.watcher_kit import Recorder

MB = 1024 * 1024

#: A "follower" on the box: says hello, then whatever the test asks, counting its starts.
FAKE_FOLLOWER = r"""
import json, sys, time
with open(sys.argv[1], "a") as fh:
    fh.write("start\n")
out = sys.stdout.buffer
out.write(b'{"t":"hello","now":%f}\n' % time.time())
out.flush()
kind = sys.argv[2]
if kind == "endless":
    chunk = b"a" * (1 << 20)
    for _ in range(250):
        out.write(chunk)
elif kind == "deep":
    nest = lambda n: "[" * n + "]" * n
    out.write(('{"t":"log","offset":0,"text":"deep\\n","x":%s}\n' % nest(40)).encode())
    out.write(('{"t":"log","offset":0,"text":"deeper\\n","x":%s}\n' % nest(200000)).encode())
    out.write(b'{"t":"log","offset":0,"text":"fine\\n"}\n')
elif kind == "flood":
    line = b'{"t":"pid","pid":1,"alive":true}\n'
    out.write(line * 20000)
out.flush()
time.sleep(30)
"""

#: The laptop: a watcher over SSH on the fake follower; prints its events and peak RSS.
LAPTOP = r"""
import json, sys, time
from remote.transport.ssh import connect
from remote.watch.watcher import Watcher
server, fake, starts = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
events = []

def transport():
    t = connect(server["target"], port=server["port"], known_hosts=server["known_hosts"],
                identity_files=(server["key"],), allow_agent=False,
                ssh_config=server["config"])
    t.trainer_prefix = f"python3 {fake} {starts} endless"
    return t

w = Watcher(transport, "/nonexistent-run", events.append, silence_timeout=10)
w.start()
end = time.monotonic() + 120
while time.monotonic() < end:
    if sum(1 for e in events if getattr(e, "state", "") == "live") >= 3:
        break
    time.sleep(0.1)
w.stop()
status = open("/proc/self/status").read()
hwm = int(status.split("VmHWM:")[1].split()[0])
print(json.dumps({"hwm_kb": hwm, "events": [[getattr(e, "state", type(e).__name__),
                                             getattr(e, "detail", "")] for e in events]}))
"""


def fake_transport(tmp_path: Path, kind: str):
    fake = tmp_path / "fake_follower.py"
    fake.write_text(FAKE_FOLLOWER)
    starts = tmp_path / "starts"

    def connect() -> LocalTransport:
        transport = LocalTransport()
        transport.trainer_prefix = f"{sys.executable} {fake} {starts} {kind}"
        return transport

    return connect, starts


def test_an_endless_line_over_ssh_keeps_the_laptop_small(sshd, tmp_path: Path) -> None:
    fake = tmp_path / "fake_follower.py"
    fake.write_text(FAKE_FOLLOWER)
    starts = tmp_path / "starts"
    server = {"target": f"{sshd.user}@{sshd.host}", "port": sshd.port,
              "known_hosts": sshd.known_hosts, "key": sshd.key_path, "config": sshd.ssh_config}
    result = subprocess.run([sys.executable, "-c", LAPTOP, json.dumps(server), str(fake),
                             str(starts)], cwd=ROOT, capture_output=True, text=True,
                            timeout=180)
    assert result.returncode == 0, result.stderr[-2000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    states = [state for state, _ in report["events"]]
    assert states.count("live") >= 3  # three connections, each sent a 250 MB line
    limited = [detail for state, detail in report["events"] if state == "limited"]
    assert limited == ["the box sent a line over 16 MiB without a newline; reconnecting"]
    assert report["hwm_kb"] < 100 * 1024, f"peak RSS {report['hwm_kb'] / 1024:.0f} MB"
    assert "Traceback" not in result.stderr


def test_messages_nested_too_deeply_are_skipped(tmp_path: Path) -> None:
    connect, _ = fake_transport(tmp_path, "deep")
    rec = Recorder()
    watcher = Watcher(connect, str(tmp_path), rec, silence_timeout=30)
    watcher.start()
    try:
        rec.wait(lambda ev: any(isinstance(e, LogEvent) for e in ev), what="the fine line")
    finally:
        watcher.stop()
    assert [e.data for e in rec.of(LogEvent)] == [b"fine\n"]
    limited = [e.detail for e in rec.of(ConnectionEvent) if e.state == "limited"]
    assert limited == [f"skipped a message nested deeper than {MAX_JSON_DEPTH} levels"]
    assert [e.state for e in rec.of(ConnectionEvent)].count("live") == 1  # no reconnect


def test_a_flood_of_messages_resets_the_connection_and_says_so_once(tmp_path: Path) -> None:
    connect, starts = fake_transport(tmp_path, "flood")
    rec = Recorder()
    watcher = Watcher(connect, str(tmp_path), rec, silence_timeout=30)
    watcher.start()
    try:
        rec.wait(lambda ev: sum(getattr(e, "state", "") == "live" for e in ev) >= 3,
                 timeout=60, what="three connections")
    finally:
        watcher.stop()
    limited = [e.detail for e in rec.of(ConnectionEvent) if e.state == "limited"]
    assert limited == ["the box sent over 2000 messages a second; reconnecting"]
    assert starts.read_text().count("start") >= 3


def test_the_caps_themselves() -> None:
    assert depth_within({"a": [{"b": [1]}]}, 4) and not depth_within({"a": [{"b": [1]}]}, 3)
    assert decode_message(b'{"t":"x","v":' + b"[" * 100000 + b"]" * 100000 + b"}") is not None
    assert decode_message(b"[1]") is None and decode_message(b"{") is None
    clock = iter([0.0, 0.1, 0.2, 0.3, 5.0, 5.1]).__next__
    cap = RateCap(per_second=0.4, window=5.0, clock=clock)  # two per window
    assert [cap.over() for _ in range(5)] == [False, False, True, False, False]
