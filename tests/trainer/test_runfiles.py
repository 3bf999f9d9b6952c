"""The run-directory contract: writer, hostile-input reader, incremental metrics."""

from __future__ import annotations

import csv
import json
import math
import os
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT
from trainer import runfiles
from trainer.health import judge_health
from trainer.runfiles import RunWriter, parse_status, read_metrics, read_status


def test_status_is_written_whole_with_schema_and_time(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.write_status({"state": "running", "train_loss": math.nan, "best_metric": math.inf,
                         "metrics": {"mAP50": float("-inf"), "mAP50-95": 0.25}})
    text = (tmp_path / "status.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    read = read_status(tmp_path)
    assert read.ok, read.reason
    assert read.get("schema_version") == 1
    assert read.get("train_loss") is None and read.get("best_metric") is None
    assert read.get("metrics") == {"mAP50": None, "mAP50-95": 0.25}
    assert abs(runfiles.parse_iso(read.get("updated_at")) - time.time()) < 60
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_metrics_and_results_rows_are_appended(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    for epoch in (1, 2):
        writer.append_metrics({"epoch": epoch, "time": 1.5, "train/loss": 2.0 / epoch,
                               "metrics/mAP50": math.nan, "validated": True})
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["epoch"] for r in rows] == [1, 2]
    assert rows[0]["metrics/mAP50"] is None
    with open(tmp_path / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == ["epoch", "time", "train/loss", "metrics/mAP50", "validated"]
    assert [row["train/loss"] for row in table] == ["2", "1"]
    # A second writer (a resumed run) keeps the existing header.
    RunWriter(tmp_path).append_metrics({"epoch": 3, "train/loss": 0.5, "new/col": 1})
    with open(tmp_path / "results.csv", newline="") as fh:
        table = list(csv.reader(fh))
    assert table[0] == ["epoch", "time", "train/loss", "metrics/mAP50", "validated"]
    assert table[-1] == ["3", "", "0.5", "", ""]


def test_summary_and_log_format(tmp_path: Path) -> None:
    writer = RunWriter(tmp_path)
    writer.write_summary({"best_epoch": 3, "total_seconds": 12.5})
    assert json.loads((tmp_path / "summary.json").read_text())["best_epoch"] == 3
    log = runfiles.logging.getLogger("test.runfiles")
    handler = runfiles.train_log_handler(tmp_path)
    log.addHandler(handler)
    log.setLevel("INFO")
    log.info("epoch 1 done")
    log.warning("careful")
    handler.close()
    log.removeHandler(handler)
    lines = (tmp_path / "train.log").read_text().splitlines()
    pattern = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \| (INFO {4}|WARNING ) \| ")
    assert all(pattern.match(line) for line in lines), lines
    assert lines[0].endswith("| INFO     | epoch 1 done")


def test_atomic_save_keeps_the_old_file_when_saving_fails(tmp_path: Path) -> None:
    target = tmp_path / "weights" / "best.pt"
    runfiles.atomic_write_bytes(target, b"old")

    def broken(tmp: str) -> None:
        Path(tmp).write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError):
        runfiles.atomic_save(target, broken)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in target.parent.iterdir()) == ["best.pt"]


HOSTILE = {
    "empty": b"",
    "partial": b'{"state": "runn',
    "list": b"[1, 2, 3]",
    "string": b'"running"',
    "nan": b'{"state": "running", "train_loss": NaN}',
    "infinity": b'{"state": "running", "eta_seconds": Infinity}',
    "wrong type": b'{"state": "running", "completed_epochs": "3"}',
    "bool as int": b'{"state": "running", "pid": true}',
    "state not a string": b'{"state": 7}',
    "not utf-8": b'{"state": "running", "task": "\xff\xfe"}',
    "deeply nested": b"[" * 100_000 + b"]" * 100_000,
    "huge": b'{"state": "running", "pad": "' + b"x" * (5 * 1024 * 1024) + b'"}',
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_status_is_unreadable_with_one_line_reason(tmp_path: Path, name: str) -> None:
    (tmp_path / "status.json").write_bytes(HOSTILE[name])
    read = read_status(tmp_path)
    assert not read.ok
    assert read.reason and "\n" not in read.reason and len(read.reason) < 300
    health = judge_health(read, now=time.time(), pid_alive=lambda _pid: True)
    assert health.verdict == "unreadable"
    assert health.reason == read.reason


def test_missing_status_is_unreadable(tmp_path: Path) -> None:
    read = read_status(tmp_path)
    assert not read.ok and "no status.json" in read.reason


def test_unknown_state_and_extra_keys_are_tolerated() -> None:
    read = parse_status(b'{"state": "paused", "vendor_key": {"x": 1}, "pid": null}')
    assert read.ok
    assert read.get("state") == "paused" and read.get("vendor_key") == {"x": 1}
    health = judge_health(read, now=time.time())
    assert health.verdict == "live" and "paused" in health.reason


def test_metrics_are_read_incrementally(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'{"epoch": 1}\nnot json\n[1]\n{"epoch": 2}\n{"epoch": 3, "train/lo')
    first = read_metrics(tmp_path)
    assert [r["epoch"] for r in first.rows] == [1, 2]
    assert first.skipped == 2
    assert first.next_offset == path.read_bytes().index(b'{"epoch": 3')
    with open(path, "ab") as fh:
        fh.write(b'ss": 0.5}\n')
    second = read_metrics(tmp_path, first.next_offset)
    assert second.rows == [{"epoch": 3, "train/loss": 0.5}] and not second.reset
    assert read_metrics(tmp_path, second.next_offset).rows == []
    path.write_bytes(b'{"epoch": 1}\n')  # replaced by a fresh run
    third = read_metrics(tmp_path, second.next_offset)
    assert third.reset and third.rows == [{"epoch": 1}]


def test_missing_metrics_file_reads_as_nothing(tmp_path: Path) -> None:
    chunk = read_metrics(tmp_path, 10)
    assert chunk.rows == [] and chunk.next_offset == 10


WRITER = textwrap.dedent(
    """
    import sys
    from trainer.runfiles import RunWriter
    writer = RunWriter(sys.argv[1])
    for i in range(int(sys.argv[2])):
        writer.write_status({"state": "running", "completed_epochs": i,
                             "metrics": {"pad": "x" * (i % 977)}})
    writer.write_status({"state": "completed", "completed_epochs": -1})
    """
)


def test_reader_never_sees_a_partial_status_while_it_is_rewritten(tmp_path: Path) -> None:
    writes = 3_000
    RunWriter(tmp_path).write_status({"state": "running", "completed_epochs": -2})
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), str(writes)],
                              env=env)
    seen: set[int] = set()
    reads = 0
    while True:
        read = read_status(tmp_path)
        reads += 1
        assert read.ok, f"read {reads}: {read.reason}"
        seen.add(read.get("completed_epochs"))
        if read.get("state") == "completed":
            break
    assert writer.wait(timeout=120) == 0
    # The reader really overlapped the writer: it saw many distinct versions.
    assert len(seen) > 50, (reads, len(seen))
