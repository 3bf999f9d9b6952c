"""``python -m trainer follow``: the box-side streamer, run as a real process against run
directories written by a real writer process (``tests.fixtures.run_sim``)."""

from __future__ import annotations

import base64
import json
import os
import random
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fixtures.paths import ROOT
from trainer import runfiles
from trainer.follow import encode_bytes
from trainer.health import local_pid_alive
from trainer.smi import parse_gpu_line

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


class Follow:
    """A ``trainer follow`` process and a reader of its JSON lines."""

    def __init__(self, run_dir: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "trainer", "follow", str(run_dir), "--poll", "0.03",
             "--heartbeat", "0.2", *args],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env or ENV)
        self._buf = b""

    def next(self, timeout: float = 10.0) -> dict[str, Any]:
        """The next message; fails the test when none comes within ``timeout``."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            assert left > 0, "the follower sent nothing"
            ready, _, _ = select.select([self.proc.stdout], [], [], left)
            if ready:
                data = os.read(self.proc.stdout.fileno(), 65536)
                assert data, f"the follower ended: {self.proc.stderr.read()!r}"
                self._buf += data
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def until(self, kind: str, timeout: float = 10.0) -> tuple[dict[str, Any],
                                                              list[dict[str, Any]]]:
        """Read until a message of ``kind``; returns it and everything before it."""
        seen = []
        deadline = time.monotonic() + timeout
        while True:
            message = self.next(max(0.1, deadline - time.monotonic()))
            if message["t"] == kind:
                return message, seen
            seen.append(message)

    def idle(self, beats: int = 2) -> list[dict[str, Any]]:
        """Everything up to ``beats`` heartbeats: the follower has polled at least once
        after whatever the test did before calling this."""
        got: list[dict[str, Any]] = []
        for _ in range(beats):
            _, seen = self.until("hb")
            got += seen
        return got

    def kill(self) -> None:
        """SIGKILL the follower and reap it."""
        self.proc.kill()
        self.proc.wait(10)
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()


def log_bytes(message: dict[str, Any]) -> bytes:
    """The file bytes a ``log`` message carries."""
    if "text" in message:
        return message["text"].encode("utf-8")
    return base64.b64decode(message["b64"])


def test_log_bytes_and_rows_arrive_exactly_once_across_resumes(tmp_path: Path) -> None:
    run = tmp_path / "run"
    writer = subprocess.Popen([sys.executable, "-m", "tests.fixtures.run_sim", str(run),
                               "--epochs", "5", "--epoch-seconds", "0.3",
                               "--lines-per-epoch", "40", "--seed", "7"], cwd=ROOT, env=ENV)
    rng = random.Random(3)
    got, rows = bytearray(), []
    log_at, log_ino, rows_at, rows_ino = 0, None, 0, None
    key, done, resumes = None, False, 0

    def caught_up() -> bool:
        return writer.poll() is not None and \
            log_at == (run / runfiles.LOG_FILE).stat().st_size and \
            rows_at == (run / runfiles.METRICS_FILE).stat().st_size

    while not done:
        args = ["--log-offset", str(log_at), "--log-ino", str(log_ino or "none"),
                "--metrics-offset", str(rows_at), "--metrics-ino", str(rows_ino or "none")]
        follow = Follow(run, *args, *(["--status-key", key] if key else []))
        hello = follow.next()
        assert hello["t"] == "hello" and hello["log"] == [log_at, log_ino]
        # Take a random number of messages, then drop the link with data in flight.
        for _ in range(rng.randint(2, 12)):
            m = follow.next()
            if m["t"] == "log":
                assert m["offset"] == log_at, "gap or overlap in the log"
                got += log_bytes(m)
                log_at, log_ino = m["offset"] + len(log_bytes(m)), m["ino"]
            elif m["t"] == "metrics":
                assert m["offset"] == rows_at
                rows += m["rows"]
                rows_at, rows_ino = m["next"], m["ino"]
            elif m["t"] == "status":
                key = m["key"]
            done = caught_up()
            if done:
                break
        follow.kill()
        resumes += 1
    assert writer.wait(30) == 0
    assert resumes > 3
    assert bytes(got) == (run / runfiles.LOG_FILE).read_bytes()
    assert [r["epoch"] for r in rows] == [1, 2, 3, 4, 5]


def test_truncation_and_rotation_reset_the_log(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    log = run / runfiles.LOG_FILE
    log.write_bytes(b"A" * 100 + b"\n")
    follow = Follow(run)
    try:
        follow.until("hello")
        first, _ = follow.until("log")
        assert log_bytes(first) == b"A" * 100 + b"\n" and first["offset"] == 0
        # Truncated (copytruncate style), then written again.
        with open(log, "r+b") as fh:
            fh.truncate(0)
            fh.write(b"BB\n")
        reset, _ = follow.until("reset")
        assert reset == {"t": "reset", "file": "log", "ino": first["ino"],
                         "reason": "truncated"}
        again, _ = follow.until("log")
        assert (again["offset"], log_bytes(again)) == (0, b"BB\n")
        # Rotated: renamed away while more was written to it, and a new file started.
        with open(log, "ab") as old:
            old.write(b"last words of the old file\n")
            os.rename(log, run / "train.log.1")
            old.write(b"written after the rename\n")
        log.write_bytes(b"new file\n")
        seen = follow.idle(3)
        old_tail = b"".join(log_bytes(m) for m in seen
                            if m["t"] == "log" and m["ino"] == first["ino"])
        assert old_tail == b"last words of the old file\nwritten after the rename\n"
        resets = [m for m in seen if m["t"] == "reset"]
        assert [r["reason"] for r in resets] == ["replaced"]
        new = [m for m in seen if m["t"] == "log" and m["ino"] != first["ino"]]
        assert [(m["offset"], log_bytes(m)) for m in new] == [(0, b"new file\n")]
        last_old = max(i for i, m in enumerate(seen)
                       if m["t"] == "log" and m["ino"] == first["ino"])
        assert last_old < seen.index(resets[0]) < seen.index(new[0])
        new_ino = new[0]["ino"]
    finally:
        follow.kill()
    # Rotated while nobody followed: resuming with the old inode starts the new file.
    os.rename(log, run / "train.log.2")
    log.write_bytes(b"x" * 50 + b"\n")
    follow = Follow(run, "--log-offset", "9", "--log-ino", str(new_ino))
    try:
        reset, _ = follow.until("reset")
        assert reset["reason"] == "replaced"
        data, _ = follow.until("log")
        assert (data["offset"], log_bytes(data)) == (0, b"x" * 50 + b"\n")
    finally:
        follow.kill()


def test_metrics_wait_for_whole_lines_and_skip_garbage(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    path = run / runfiles.METRICS_FILE
    follow = Follow(run)
    try:
        follow.until("hello")
        with open(path, "ab") as fh:
            fh.write(b'{"epoch": 1, "train/loss": 0.')
            fh.flush()
            assert not [m for m in follow.idle() if m["t"] == "metrics"]
            fh.write(b'5}\nnot json\n{"epoch": 2, "metrics/mAP50": NaN}\n[1]\n{"epoch": 3')
        message, _ = follow.until("metrics")
        assert message["rows"] == [{"epoch": 1, "train/loss": 0.5},
                                   {"epoch": 2, "metrics/mAP50": None}]
        assert message["skipped"] == 2 and message["offset"] == 0
        assert message["next"] == path.stat().st_size - len(b'{"epoch": 3')
        with open(path, "ab") as fh:
            fh.write(b"}\n")
        message, _ = follow.until("metrics")
        assert message["rows"] == [{"epoch": 3}] and message["next"] == path.stat().st_size
        # Shrunk below the offset: a reset, then rows from the start of the new content.
        path.write_bytes(b'{"epoch": 1}\n')
        reset, _ = follow.until("reset")
        assert reset["file"] == "metrics" and reset["reason"] in ("truncated", "replaced")
        message, _ = follow.until("metrics")
        assert (message["offset"], message["rows"]) == (0, [{"epoch": 1}])
    finally:
        follow.kill()


def test_garbage_status_and_pid_liveness(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    status = run / runfiles.STATUS_FILE
    follow = Follow(run)
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        follow.until("hello")
        first, _ = follow.until("status")
        assert first["status"] is None and "no status.json" in first["reason"]
        status.write_bytes(b"{not json")
        message, _ = follow.until("status")
        assert message["status"] is None and "not valid JSON" in message["reason"]
        status.write_text(json.dumps({"state": "running", "pid": "abc"}))
        message, _ = follow.until("status")
        assert message["status"] is None and "'pid'" in message["reason"]
        runfiles.RunWriter(run).write_status({"state": "running", "pid": sleeper.pid})
        message, _ = follow.until("status")
        assert message["status"]["pid"] == sleeper.pid and message["pid_alive"] is True
        sleeper.kill()
        sleeper.wait()
        message, _ = follow.until("pid")
        disk = message.pop("disk")  # the run's disk, to name a full one as the reason
        assert message == {"t": "pid", "pid": sleeper.pid, "alive": False}
        assert set(disk) == {"free", "size"} and 0 <= disk["free"] <= disk["size"]
    finally:
        follow.kill()
        sleeper.kill()
        sleeper.wait()
    # An unchanged status is not sent again after a resume with its key.
    resumed = Follow(run, "--status-key", _status_key(status))
    try:
        resumed.until("hello")
        assert not [m for m in resumed.idle() if m["t"] == "status"]
    finally:
        resumed.kill()


def _status_key(path: Path) -> str:
    st = path.stat()
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def test_ends_when_stdout_closes_or_parent_dies(tmp_path: Path) -> None:
    follow = Follow(tmp_path)
    follow.until("hello")
    assert follow.proc.stdout is not None
    follow.proc.stdout.close()
    assert follow.proc.wait(15) == 0
    assert follow.proc.stderr is not None
    assert b"Traceback" not in follow.proc.stderr.read()
    follow.proc.stderr.close()
    # The parent (a shell that then becomes `sleep`) dies; stdout stays open (a file).
    parent = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -m trainer follow {tmp_path} --poll 0.03 "
                     f"> {tmp_path}/out 2>&1 & echo $!; exec sleep 60"],
        stdout=subprocess.PIPE, cwd=ROOT, env=ENV)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    parent.stdout.close()
    deadline = time.monotonic() + 15
    out = tmp_path / "out"
    while not out.exists() or b"hello" not in out.read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    while local_pid_alive(child):
        assert time.monotonic() < deadline, "the follower outlived its parent"
        time.sleep(0.05)


def test_gpu_lines_parse_like_nvidia_smi_prints_them() -> None:
    assert parse_gpu_line("0, NVIDIA H200, 35, 1234, 143771, 41, 120.55") == \
        [0, "NVIDIA H200", 35.0, 1234.0, 143771.0, 41.0, 120.55]
    assert parse_gpu_line("1, Tesla T4, [N/A], 3, 15360, [N/A], [Not Supported]") == \
        [1, "Tesla T4", None, 3.0, 15360.0, None, None]
    assert parse_gpu_line("2, Odd, Name, 1, 2, 3, 4, N/A")[1] == "Odd, Name"
    assert parse_gpu_line("No devices were found") is None
    assert parse_gpu_line("x, a, 1, 2, 3, 4, 5") is None


def test_gpu_samples_from_nvidia_smi_loop(tmp_path: Path) -> None:
    # No GPU here: a stand-in prints what nvidia-smi's loop mode prints (two GPUs, one
    # field unsupported), then exits the way it does when the driver goes away.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho \"$@\" > \"$(dirname \"$0\")/args\"\n"
                   "for i in 1 2 3; do\n"
                   "  printf '0, NVIDIA H200, 12, 1000, 143771, 40, [N/A]\\n"
                   "1, NVIDIA H200, 99, 5, 143771, 41, 300.5\\n'\n  sleep 0.1\ndone\n"
                   "echo 'Unable to determine the device handle for GPU0: Unknown Error'\n"
                   "exit 9\n")
    smi.chmod(0o755)
    env = {**ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    follow = Follow(tmp_path, "--gpu-interval", "0.1", env=env)
    try:
        hello = follow.next()
        assert hello["gpu"] is True
        sample, _ = follow.until("gpu")
        assert sample["gpus"] == [[0, "NVIDIA H200", 12, 1000, 143771, 40, None],
                                  [1, "NVIDIA H200", 99, 5, 143771, 41, 300.5]]
        error, seen = follow.until("gpu")
        # Unchanged samples are not sent again; the failure is reported once.
        assert not [m for m in seen if m["t"] == "gpu"]
        assert error == {"t": "gpu",
                         "error": "Unable to determine the device handle for GPU0: "
                                  "Unknown Error"}
    finally:
        follow.kill()
    args = (bin_dir / "args").read_text().split()
    assert "--format=csv,noheader,nounits" in args and args[-2:] == ["-lms", "100"]
    assert any(a.startswith("--query-gpu=index,name,utilization.gpu") for a in args)


def test_encode_bytes_keeps_every_byte() -> None:
    text = "épოქა 🚀".encode()
    for cut in range(len(text) + 1):
        field, used = encode_bytes(text[:cut])
        data = field["text"].encode() if "text" in field else base64.b64decode(field["b64"])
        assert data == text[:used] and used >= cut - 3
    assert "b64" in encode_bytes(b"ok \xff\xfe\n")[0]


def test_follows_a_libreyolo_run(tmp_path: Path) -> None:
    """A run the stand-in for ``libreyolo train`` wrote (its status names its pid, no start
    time; the launcher's files are not in it)."""
    data = tmp_path / "data.yaml"
    data.write_text("nc: 1\n")
    env = {**ENV, "FAKE_LIBREYOLO_EPOCH_SECONDS": "0.01", "FAKE_LIBREYOLO_SAVE_SECONDS": "0"}
    done = subprocess.run([sys.executable, str(ROOT / "tests/fixtures/fake_libreyolo.py"),
                           "train", "model=yolox-n", "pretrained=False", f"data={data}",
                           "epochs=2", f"project={tmp_path}", "name=run"],
                          env=env, capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    follow = Follow(tmp_path / "run")
    try:
        follow.until("hello")
        status, _ = follow.until("status")
        assert status["status"]["state"] == "completed" and status["status"]["pid"] > 1
        assert "pid_start" not in status["status"] and status["pid_alive"] is False
        rows = [m for m in follow.idle() if m["t"] == "metrics"]
        assert [r["epoch"] for m in rows for r in m["rows"]] == [1, 2]
    finally:
        follow.kill()


def test_importing_the_follower_does_not_import_torch() -> None:
    code = "import sys, trainer.follow; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env=ENV, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.parametrize("arg", ["--log-offset=x", "--poll=fast"])
def test_bad_arguments_are_a_usage_error(tmp_path: Path, arg: str) -> None:
    out = subprocess.run([sys.executable, "-m", "trainer", "follow", str(tmp_path), arg],
                         capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=60)
    assert out.returncode == 2 and "Traceback" not in out.stderr


def test_host_cpu_and_ram_every_interval_where_proc_exists(tmp_path: Path) -> None:
    # What the TUI shows of a box without a GPU: its CPU and RAM, from /proc.
    follow = Follow(tmp_path, "--gpu-interval", "0.1")
    try:
        follow.next()  # hello
        first, _ = follow.until("host")
        second, _ = follow.until("host")
    finally:
        follow.kill()
    assert first["cpu"] is None and isinstance(second["cpu"], int | float)
    assert 0 <= second["cpu"] <= 100 and second["cpus"] == os.cpu_count()
    assert 0 < second["mem_used_mib"] < second["mem_total_mib"]
