"""``remote.weights.pull``: verified, resumable pulls and the ledger, over a real sshd."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

import pytest

from remote.transport.base import TransportError
from remote.weights.pull import dest_for, ledger_entries, pull_weights, verified_copy
from tests.fixtures.sshd import SSHServer


@pytest.fixture
def run_dir(sshd: SSHServer, request: pytest.FixtureRequest) -> Path:
    path = Path(sshd.home) / "runs" / request.node.name
    (path / "weights").mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(autouse=True)
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPURENT_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def test_pull_resumes_a_partial_file_and_records_it(sshd, run_dir, tmp_path, data_dir) -> None:
    data = os.urandom(3_000_000)
    (run_dir / "weights" / "best.pt").write_bytes(data)
    dest = tmp_path / "dest"
    seen: list[tuple[str, int, int]] = []
    with sshd.connect() as box:
        label = box.label
        target = dest_for(dest, label, str(run_dir.resolve())) / "weights" / "best.pt"
        target.parent.mkdir(parents=True)
        (target.parent / "best.pt.part").write_bytes(data[:1_000_000])
        [got] = pull_weights(box, str(run_dir), dest, files=("best.pt",),
                             progress=lambda *a: seen.append(a))
    sha = hashlib.sha256(data).hexdigest()
    assert (got.name, got.sha256, got.size) == ("best.pt", sha, len(data))
    assert got.local_path == str(target) and target.read_bytes() == data
    assert str(target).startswith(str(dest / label.replace(":", "_")))
    assert not (target.parent / "best.pt.part").exists()
    assert seen[0] == ("best.pt", 1_000_000, len(data)) and seen[-1][1] == len(data)
    [line] = (data_dir / "pulls.jsonl").read_text().splitlines()
    entry = json.loads(line)
    remote = str(run_dir.resolve() / "weights" / "best.pt")
    assert entry["sha256"] == sha and entry["run_dir"] == str(run_dir.resolve())
    assert entry["host"] == label and entry["remote_path"] == remote
    assert entry["file"] == "best.pt" and entry["local_path"] == str(target)
    assert (entry["inode"], entry["mtime_ns"]) == (target.stat().st_ino,
                                                   target.stat().st_mtime_ns)
    entries = ledger_entries(label)
    assert verified_copy(entries, remote, sha) == entry
    assert verified_copy(entries, remote, "0" * 64) is None  # other content
    assert ledger_entries("someone@else:22") == []
    target.unlink()
    assert verified_copy(entries, remote, sha) is None  # a deleted copy is not safe


def test_a_new_checkpoint_of_the_same_size_replaces_the_local_copy(sshd, run_dir, tmp_path,
                                                                   data_dir) -> None:
    """A local copy is kept only when its bytes are the box's, not when its size is."""
    box_file = run_dir / "weights" / "best.pt"
    old, new = os.urandom(200_000), os.urandom(200_000)
    box_file.write_bytes(old)
    with sshd.connect() as box:
        label = box.label
        [first] = pull_weights(box, str(run_dir), tmp_path / "dest", files=("best.pt",))
        box_file.write_bytes(new)  # a better epoch, saved over it: same size
        [second] = pull_weights(box, str(run_dir), tmp_path / "dest", files=("best.pt",))
    target = Path(second.local_path)
    assert second.local_path == first.local_path and target.read_bytes() == new
    sha = hashlib.sha256(new).hexdigest()
    assert second.sha256 == sha
    entries = ledger_entries(label)
    assert entries[0]["sha256"] == hashlib.sha256(target.read_bytes()).hexdigest() == sha
    assert verified_copy(entries, str(box_file.resolve()), sha) == entries[0]


def test_both_weights_by_default_each_run_in_its_own_folder(sshd, run_dir, tmp_path) -> None:
    (run_dir / "weights" / "best.pt").write_bytes(b"best")
    (run_dir / "weights" / "last.pt").write_bytes(b"last")
    twin = run_dir.parent / "elsewhere" / run_dir.name
    (twin / "weights").mkdir(parents=True)
    (twin / "weights" / "best.pt").write_bytes(b"other best")
    with sshd.connect() as box:
        got = pull_weights(box, str(run_dir), tmp_path / "dest")
        [other] = pull_weights(box, str(twin), tmp_path / "dest")
    assert [g.name for g in got] == ["best.pt", "last.pt"]
    assert Path(got[0].local_path).parent == Path(got[1].local_path).parent
    assert Path(got[0].local_path).read_bytes() == b"best"
    assert other.local_path != got[0].local_path  # same run name, another run
    assert Path(other.local_path).read_bytes() == b"other best"


def test_a_corrupt_partial_file_is_detected_and_redone(sshd, run_dir, tmp_path) -> None:
    data = os.urandom(500_000)
    (run_dir / "weights" / "last.pt").write_bytes(data)
    (run_dir / "weights" / "best.pt").write_bytes(data[::-1])
    dest = tmp_path / "dest"
    with sshd.connect() as box:
        weights = dest_for(dest, box.label, str(run_dir.resolve())) / "weights"
        weights.mkdir(parents=True)
        (weights / "last.pt.part").write_bytes(b"\0" * 100_000)  # not a prefix of the file
        got = pull_weights(box, str(run_dir), dest, files=("last.pt", "weights/best.pt"))
    assert [g.name for g in got] == ["last.pt", "weights/best.pt"]
    assert (weights / "last.pt").read_bytes() == data
    assert (weights / "best.pt").read_bytes() == data[::-1]


def test_missing_files_and_bad_names(sshd, run_dir, tmp_path, data_dir) -> None:
    with sshd.connect() as box:
        with pytest.raises(TransportError, match="no weights/best.pt or weights/last.pt"):
            pull_weights(box, str(run_dir), tmp_path / "d")
        with pytest.raises(TransportError, match="does not exist"):
            pull_weights(box, str(run_dir), tmp_path / "d", files=("best.pt",))
        with pytest.raises(TransportError, match="is not a directory"):
            pull_weights(box, str(run_dir / "nope"), tmp_path / "d")
        for bad in ("../secret", "/etc/passwd", "weights/../../x", ""):
            with pytest.raises(ValueError):
                pull_weights(box, str(run_dir), tmp_path / "d", files=(bad,))
    assert not (data_dir / "pulls.jsonl").exists()


def test_gpurent_pull_through_an_ssh_config_alias(sshd, run_dir, tmp_path, data_dir,
                                                  monkeypatch, capsys) -> None:
    """The headless command, reaching the box by an alias in ~/.ssh/config."""
    home = tmp_path / "laptop-home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(
        f"Host thebox\n  HostName 127.0.0.1\n  Port {sshd.port}\n  User {sshd.user}\n"
        f"  IdentityFile {sshd.key_path}\n  IdentitiesOnly yes\n")
    (home / ".ssh" / "known_hosts").write_text(Path(sshd.known_hosts).read_text())
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    data = os.urandom(100_000)
    (run_dir / "weights" / "best.pt").write_bytes(data)
    from remote.cli import main

    assert main(["pull", f"thebox:{run_dir}", str(tmp_path / "got"), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] and out["files"][0]["sha256"] == hashlib.sha256(data).hexdigest()
    assert Path(out["files"][0]["local_path"]).read_bytes() == data
    assert out["files"][0]["local_path"].startswith(str(tmp_path / "got"))
    assert main(["pull", f"thebox:{run_dir}", str(tmp_path / "got"), "--file", "../x"]) == 2
    assert "bad file name" in capsys.readouterr().err


def test_a_pull_that_does_not_fit_is_refused_before_it_starts(sshd, run_dir, tmp_path) -> None:
    """A destination without room for the file: one line with what is needed and what is
    free, and nothing written (no partial file left to fill the disk)."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)],
                             capture_output=True, text=True, timeout=30)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here: {mounted.stderr.strip()}")
    try:
        (run_dir / "weights" / "best.pt").write_bytes(os.urandom(3 << 20))
        with sshd.connect() as box, pytest.raises(TransportError) as err:
            pull_weights(box, str(run_dir), small, files=("best.pt",))
        assert "best.pt: needs 3.1 MB at " in str(err.value) and " free" in str(err.value)
        assert [p for p in small.rglob("*") if p.is_file()] == []
    finally:
        subprocess.run(["umount", str(small)], capture_output=True, timeout=30)
