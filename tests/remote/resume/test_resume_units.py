"""The parts of a resume that choose and carry, without a box or a model (milliseconds):
the laptop's epoch reader, the run a bare ``gpurent resume`` takes, the pulled copy a
resume elsewhere starts from, and the history uploaded with it. The whole paths run in
``tests/test_resume*.py`` (each 30-50 s)."""

from __future__ import annotations

import json
import os
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from remote.resume.fromlaptop import choose, upload_copy
from remote.resume.resume import pick_interrupted
from remote.transport.local import LocalTransport
from remote.weights.ckptepoch import checkpoint_epoch
from remote.weights.lastsafe import HubCopy, LaptopRun, laptop_copy, laptop_run
from tests.fixtures.resume_units_kit import _checkpoint, _history, _pulled
from trainer import runfiles


class _Calls:
    """Pickles as a call of ``os.system``: reading it must not run it."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("touch SHOULD-NOT-EXIST",)


def test_the_epoch_is_read_without_resolving_what_the_pickle_names(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "last.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("last/data.pkl", pickle.dumps(
            {"epoch": 7, "model": OrderedDict(w=_Calls()), "hook": _Calls()}))
    assert checkpoint_epoch(str(path)) == 7
    assert not (tmp_path / "SHOULD-NOT-EXIST").exists()
    (tmp_path / "torn.pt").write_bytes(path.read_bytes()[:40])
    assert checkpoint_epoch(str(tmp_path / "torn.pt")) is None


def _status(run: Path, state: str, updated: float, **more: object) -> None:
    run.mkdir(parents=True)
    runfiles.atomic_write_json(run / runfiles.STATUS_FILE, {
        "schema_version": 1, "state": state, "completed_epochs": 2, "total_epochs": 10,
        "updated_at": runfiles.utc_now_iso(updated), **more})


def test_a_bare_resume_takes_the_newest_interrupted_run(tmp_path: Path) -> None:
    now = runfiles.parse_iso(runfiles.utc_now_iso()) or 0.0
    _status(tmp_path / "a-old", "failed", now - 3000)
    _status(tmp_path / "b-new", "running", now - 600, pid=2999991)  # its pid gone: dead
    _status(tmp_path / "c-mid", "stopped", now - 1800)
    _status(tmp_path / "d-done", "completed", now - 60)  # newer, but nothing to resume
    assert pick_interrupted(LocalTransport(), str(tmp_path)) == str(tmp_path / "b-new")


def test_a_resume_elsewhere_takes_the_newest_pull(tmp_path: Path) -> None:
    run_dir = "/home/user/runs/exp"
    _pulled(tmp_path / "first", run_dir, 3)
    newer = _pulled(tmp_path / "second", run_dir, 5)
    _pulled(tmp_path / "other", "/home/user/runs/exp2", 9)  # another run, pulled last

    copy = laptop_run("exp", "/home/user/runs")
    assert copy == LaptopRun(str(newer / "weights" / "last.pt"), 5, run_dir, {
        runfiles.METRICS_FILE: str(newer / runfiles.METRICS_FILE),
        runfiles.RESULTS_FILE: str(newer / runfiles.RESULTS_FILE)})
    # What an interruption tells as the laptop's safe copy is the newest pull too.
    told = laptop_copy("exp", "/home/user/runs")
    assert told is not None and told.local_path == str(newer / "weights" / "last.pt")


def test_the_uploaded_history_ends_at_the_copys_epoch(tmp_path: Path) -> None:
    # LibreYOLO does not trim a history on resume: rows past the copy's epoch would
    # come back as duplicates when it trains those epochs again.
    pulled = tmp_path / "pulled"
    _checkpoint(pulled / "last.pt", 3)
    _history(pulled, 5)
    copy = LaptopRun(str(pulled / "last.pt"), 3, "/home/user/runs/ly", {
        name: str(pulled / name) for name in (runfiles.METRICS_FILE, runfiles.RESULTS_FILE)})
    box_run = tmp_path / "box" / "runs" / "ly"
    upload_copy(LocalTransport(), copy, str(box_run))

    metrics = (box_run / runfiles.METRICS_FILE).read_text().splitlines()
    assert [json.loads(line)["epoch"] for line in metrics] == [1, 2, 3]
    results = (box_run / runfiles.RESULTS_FILE).read_text().splitlines()
    assert [line.split(",")[0] for line in results] == ["epoch", "1", "2", "3"]
    assert (box_run / "weights" / "last.pt").read_bytes() == (pulled / "last.pt").read_bytes()
    assert len((pulled / runfiles.METRICS_FILE).read_text().splitlines()) == 5  # untouched


def test_the_laptops_copy_is_chosen_only_newer_and_with_its_history(tmp_path: Path) -> None:
    _pulled(tmp_path / "pulled", "/home/user/runs/exp", 5)
    assert choose(HubCopy("org/exp", "c0ffee", 4), "exp").copy is not None
    assert choose(HubCopy("org/exp", error="cannot ask the Hub: 503"), "exp").copy is not None
    same = choose(HubCopy("org/exp", "c0ffee", 5), "exp")
    assert same.copy is None and same.why == \
        "the Hub's epoch 5 is as new as the laptop's copy of epoch 5 or newer"
    # Its history pulled before it, short of its epoch: epochs 4 and 5 would be missing.
    _pulled(tmp_path / "short", "/home/user/runs/short", 5, rows=3)
    short = choose(HubCopy("org/short", "c0ffee", 2), "short")
    assert short.copy is None and short.why.endswith("its pulled history ends before epoch 5")
