"""What the laptop reads of an old box's bytes when a run resumes elsewhere (its pulled
``last.pt`` and history, the Hub's status) holds against hostile files: bounded in memory
and time, one line for each, never a traceback. The hostile files are made here, small on
disk: a pickle bomb compresses to kilobytes."""

from __future__ import annotations

import json
import os
import pickle
import struct
import subprocess
import sys
import textwrap
import zipfile
from collections import OrderedDict
from pathlib import Path

import pytest

from remote.resume.fromlaptop import choose, reaches, upload_copy
from remote.resume.move import Moving, money_lines
from remote.resume.resume import ResumeFailed
from remote.transport.local import LocalTransport
from remote.weights import ckptepoch
from remote.weights.ckptepoch import UnreadableCheckpoint, checkpoint_epoch, read_epoch
from remote.weights.lastsafe import HubCopy, LaptopRun
from remote.weights.pull import PulledFile, local_sha256, record
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env
from tests.fixtures.paths import ROOT as REPO
from trainer import runfiles

RUN_DIR = "/home/user/runs/exp"


def _zip(path: Path, body: bytes, compress: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression=compress) as archive:
        archive.writestr("last/data.pkl", body)
    return path


def _unreadable(path: Path) -> str:
    with pytest.raises(UnreadableCheckpoint) as caught:
        read_epoch(str(path))
    assert checkpoint_epoch(str(path)) is None
    assert "\n" not in str(caught.value)
    return str(caught.value)


def test_a_pickle_bomb_is_read_within_a_memory_limit(tmp_path: Path) -> None:
    # 40 million EMPTY_DICT opcodes, 40 KB on disk: unpickled they are 3 GB of dicts
    # (the reader that was here went to 21 GB on such a file and met the OOM killer).
    bomb = _zip(tmp_path / "last.pt", b"\x80\x02" + b"}" * 40_000_000 + b".",
                zipfile.ZIP_DEFLATED)
    assert bomb.stat().st_size < 200_000
    script = textwrap.dedent(f"""
        import resource
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from remote.weights.ckptepoch import checkpoint_epoch
        print(checkpoint_epoch({str(bomb)!r}))
        # This process's own peak (VmHWM: ru_maxrss would keep the forking parent's).
        with open("/proc/self/status") as fh:
            print(next(line.split()[1] for line in fh if line.startswith("VmHWM:")))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          cwd=REPO, env={"PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.split()[0] == "None"
    assert int(done.stdout.split()[1]) < 200 * 1024  # KB: the bomb was never built


class _Calls:
    """Pickles as a call of ``os.system``: reading it must not run it."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, ("touch SHOULD-NOT-EXIST",)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_the_walk_finds_the_top_epoch_in_every_protocol(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, protocol: int) -> None:
    monkeypatch.chdir(tmp_path)
    inner = OrderedDict(epoch=99, w=_Calls())
    saved = {"model": inner, "sets": ({1, 2}, frozenset("ab")), "raw": b"\0" * 300,
             "rate": 0.5, "runs": [inner, inner, {"epoch": 98}], "epoch": 7, "hook": _Calls()}
    path = _zip(tmp_path / "last.pt", pickle.dumps(saved, protocol=protocol))
    assert read_epoch(str(path)) == 7
    assert not (tmp_path / "SHOULD-NOT-EXIST").exists()


def test_the_walk_reads_what_torch_saves(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4))
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.zeros(1, 3, 8, 8)).sum().backward()
    optimizer.step()
    torch.save({"format": "x/1", "epoch": 12, "model": model.state_dict(),
                "train_state": {"optimizer": optimizer.state_dict()}}, tmp_path / "last.pt")
    torch.save(model, tmp_path / "whole.pt")  # a pickled module, as some engines save
    assert read_epoch(str(tmp_path / "last.pt")) == 12
    assert _unreadable(tmp_path / "whole.pt") == "it holds no epoch"


def test_a_compressed_or_oversized_data_pkl_is_refused_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    zeros = _zip(tmp_path / "zeros.pt", b"\0" * 10_000_000, zipfile.ZIP_DEFLATED)
    assert "compressed" in _unreadable(zeros)
    monkeypatch.setattr(ckptepoch, "MAX_PICKLE_BYTES", 1000)
    big = _zip(tmp_path / "big.pt", pickle.dumps({"epoch": 7, "pad": b"x" * 2000}))
    assert _unreadable(big) == "its data.pkl declares 2038 bytes, over the 1000 byte cap"


def test_a_pickle_of_too_many_opcodes_is_refused_before_it_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ckptepoch, "MAX_OPCODES", 1000)
    many = _zip(tmp_path / "many.pt", pickle.dumps({"epoch": 7, "pad": [None] * 2000}))
    assert "over 1000 pickle opcodes" in _unreadable(many)
    assert read_epoch(str(_zip(tmp_path / "few.pt", pickle.dumps({"epoch": 7})))) == 7


def test_a_huge_bytes8_length_is_one_line(tmp_path: Path) -> None:
    body = b"\x80\x04\x8e" + struct.pack("<Q", 2**64 - 1) + b"xx."
    assert _unreadable(_zip(tmp_path / "b8.pt", body)).startswith(
        "not a readable torch checkpoint (ValueError: ")


def _pulled(dest: Path, epoch: int, metrics: str, results: str) -> None:
    """A verified pull of ``last.pt`` of ``epoch`` and its history, in the ledger."""
    dest.mkdir(parents=True)
    _zip(dest / "last.pt", pickle.dumps({"epoch": epoch}))
    (dest / runfiles.METRICS_FILE).write_text(metrics)
    (dest / runfiles.RESULTS_FILE).write_text(results)
    for name in ("last.pt", runfiles.METRICS_FILE, runfiles.RESULTS_FILE):
        local = dest / name
        record("user@box:22", RUN_DIR, f"{RUN_DIR}/{name}",
               PulledFile(name, str(local), local_sha256(local), local.stat().st_size))


def _rows(epochs: int) -> tuple[str, str]:
    return ("".join(json.dumps({"epoch": e}) + "\n" for e in range(1, epochs + 1)),
            "epoch\n" + "".join(f"{e}\n" for e in range(1, epochs + 1)))


def test_a_lying_epoch_is_no_epoch(tmp_path: Path) -> None:
    lie = _zip(tmp_path / "lie.pt", pickle.dumps({"epoch": 10**12}))
    assert _unreadable(lie) == "its epoch is not a count in 0..1000000 (over 1000000)"
    # The resume takes the Hub, and says why, without counting to 10**12.
    _pulled(tmp_path / "pulled", 10**12, *_rows(3))
    source = choose(HubCopy("org/exp", "c0ffee", 2), "exp")
    assert source.copy is None and source.why == (
        "this laptop's pulled last.pt of the run cannot be read: its epoch is not a count "
        "in 0..1000000 (over 1000000)")


def test_a_history_line_nested_deep_is_no_row(tmp_path: Path) -> None:
    metrics, results = _rows(3)
    nested = "[" * 100_000 + "]" * 100_000 + "\n"
    (tmp_path / runfiles.METRICS_FILE).write_text(nested + metrics)
    assert reaches(str(tmp_path / runfiles.METRICS_FILE), 3)
    (tmp_path / runfiles.RESULTS_FILE).write_text(results)
    copy = LaptopRun(str(_zip(tmp_path / "last.pt", pickle.dumps({"epoch": 2}))), 2,
                     RUN_DIR, {name: str(tmp_path / name)
                               for name in (runfiles.METRICS_FILE, runfiles.RESULTS_FILE)})
    box_run = tmp_path / "box" / "exp"
    upload_copy(LocalTransport(), copy, str(box_run))
    uploaded = (box_run / runfiles.METRICS_FILE).read_text().splitlines()
    assert uploaded[1:] == [json.dumps({"epoch": e}) for e in (1, 2)]


def test_a_huge_csv_field_is_one_line(tmp_path: Path) -> None:
    metrics, results = _rows(3)
    _pulled(tmp_path / "pulled", 3, metrics, results + "x" * 200_000 + "\n")
    source = choose(HubCopy("org/exp", "c0ffee", 2), "exp")
    assert source.copy is None and source.why == (
        "the laptop's copy of epoch 3 is newer than the Hub's epoch 2, but its pulled "
        "results.csv cannot be read: field larger than field limit (131072)")
    copy = LaptopRun(str(tmp_path / "pulled" / "last.pt"), 3, RUN_DIR, {
        name: str(tmp_path / "pulled" / name)
        for name in (runfiles.METRICS_FILE, runfiles.RESULTS_FILE)})
    with pytest.raises(ResumeFailed, match=r"^the laptop's pulled history: results.csv "
                                           r"cannot be read: field larger than field limit"):
        upload_copy(LocalTransport(), copy, str(tmp_path / "box" / "exp"))


def test_an_oversized_history_is_refused_unread(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("remote.resume.fromlaptop.MAX_HISTORY_BYTES", 100)
    _pulled(tmp_path / "pulled", 30, *_rows(30))
    source = choose(HubCopy("org/exp", "c0ffee", 2), "exp")
    assert source.copy is None and "but its pulled " in source.why
    assert source.why.endswith(" bytes, over the 100 byte cap")


def test_a_status_with_counts_out_of_range_costs_no_traceback() -> None:
    moving = Moving("org/exp", "exp", old_rate=1.0)
    status = {"completed_epochs": 5, "total_epochs": 10**400, "mean_epoch_seconds": 10**400,
              "args": {"hub_period": 10**400}}
    assert money_lines(status, moving) == []
    status = {"completed_epochs": 5, "total_epochs": 30, "mean_epoch_seconds": 1e308}
    assert money_lines(status, moving) == [
        "work after epoch 5 is lost: at most 3 epoch(s), one milestone (the bound: this "
        "laptop did not see the old box's last epoch)"]


HISTORY_UNREADABLE = "results.csv cannot be read: field larger than field limit (131072)"


def _files(run: Path) -> dict[str, bytes]:
    """Every file of a run but its log, by path."""
    return {str(p.relative_to(run)): p.read_bytes() for p in sorted(run.rglob("*"))
            if p.is_file() and p.name != runfiles.LOG_FILE}


def test_a_resume_whose_history_cannot_be_read_is_one_line_and_loses_nothing(
        shapes_data: Path, in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainer.engine.command import main as train

    assert train(["model=n", "imgsz=64", "workers=0", "seed=0", f"data={shapes_data}",
                  "batch=8", "epochs=1", "project=runs", "name=h"]) == 0
    run = in_tmp / "runs" / "h"
    with open(run / runfiles.RESULTS_FILE, "a") as fh:
        fh.write("2," + "x" * 200_000 + "\n")
    with open(run / runfiles.METRICS_FILE, "a") as fh:
        fh.write(json.dumps({"epoch": 2}) + "\n")  # after the checkpoint: a resume cuts it
    before = _files(run)
    capsys.readouterr()
    assert train(["resume=True", "project=runs", "name=h", "epochs=2", "workers=0"]) == 1
    said = capsys.readouterr()
    last = said.out.strip().splitlines()[-1]
    assert "| ERROR" in last and " cannot resume " in last and "Traceback" not in said.err
    assert last.endswith(f"{HISTORY_UNREADABLE}; nothing in it was changed")
    assert (run / runfiles.LOG_FILE).read_text().strip().splitlines()[-1] == last
    assert _files(run) == before


def test_a_restore_whose_history_cannot_be_cut_is_one_line_and_loses_nothing(
        tmp_path: Path, hub_standin: HubStandin, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPURENT_CACHE_DIR", str(tmp_path / "cache"))
    metrics = "".join(json.dumps({"epoch": e}) + "\n" for e in (1, 2, 3, 4))
    hub_standin.add_files("org/ly", {  # one milestone push of a LibreYOLO run
        "last.pt": _zip(tmp_path / "last.pt", b"\x80\x02}.").read_bytes(),
        "train_config.yaml": b"epochs: 10\n",
        "status.json": json.dumps({"completed_epochs": 3, "save_dir": "/old/ly"}).encode(),
        "metrics.jsonl": metrics.encode(),
        "results.csv": b"epoch\n1\n2," + b"x" * 200_000 + b"\n"})
    run = tmp_path / "new" / "ly"
    done = subprocess.run([sys.executable, "-m", "trainer", "restore", "org/ly", "--run-dir",
                           str(run), "--token-stdin"], input=VALID_TOKEN,
                          capture_output=True, text=True, timeout=120,
                          env=hub_env(hub_standin, tmp_path / "hf"))
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        f"trainer restore: org/ly's history cannot be cut at its epoch 3: "
        f"{HISTORY_UNREADABLE}; the files are in {run} as the Hub has them"]
    assert (run / runfiles.METRICS_FILE).read_text() == metrics
    assert (run / "weights" / "last.pt").is_file()
