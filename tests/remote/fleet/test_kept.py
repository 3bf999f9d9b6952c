"""The answer kept on the box (``trainer safe --keep``): a listing of an unchanged box
prints it with ``cat`` and starts no python there, and any change of what the answer
depends on (a weight file replaced by other bytes of the same size and mtime, a run added
to the registry) makes the tool run again; a ``stat`` that prints another shape (busybox)
never leaves an answer to keep. Each box is a real sshd whose ``python3`` is a wrapper
the test can make unusable: a listing that still says "safe" then did not run python."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from remote.config import remember_hub_repo
from remote.fleet.fleet import list_fleet
from tests.fixtures.fleet_kit import account, finished_run, register_run
from tests.fixtures.fleetbox import known_as
from tests.fixtures.hub_standin import VALID_TOKEN, record_push
from tests.fixtures.paths import ROOT
from tests.fixtures.sshd import SSHServer, make_server
from trainer import runfiles
from trainer.hub.safe import (
    KEPT_FILE,
    STAMP_LINES,
    inventory,
    keep_answer,
    stamp_covers,
    stamp_lines,
)

#: What ``stat -c '%n %s %i %.9Y %.9Z'`` prints where the times have no fraction
#: (busybox prints ``%.9Y`` as the seconds, zero-padded to 9 digits).
BUSYBOX_STAT = (f"#!/bin/sh\n{Path('/usr/bin/stat')} \"$@\" | "
                "sed 's/\\.[0-9]\\{9\\}\\( \\|$\\)/\\1/g'\n")


class Box:
    """A box (real sshd) whose PATH starts with ``bin``, where ``python3`` runs this
    interpreter until ``break_python``."""

    def __init__(self, where: Path, stat: str | None = None) -> None:
        self.bin = where / "bin"
        self.bin.mkdir(parents=True)
        self.python = self.bin / "python3"
        self.fix_python()
        if stat is not None:
            (self.bin / "stat").write_text(stat)
            (self.bin / "stat").chmod(0o755)
        self.server: SSHServer = make_server(where / "sshd", box_path=[
            str(self.bin), "/usr/local/bin", "/usr/bin", "/bin"])
        self.kept = Path(self.server.home) / ".cache" / "gpurent" / KEPT_FILE

    def fix_python(self) -> None:
        """``python3`` runs this interpreter."""
        self._python(f'#!/bin/sh\nexec {sys.executable} "$@"\n')

    def break_python(self) -> None:
        """``python3`` fails at once, whatever it is asked."""
        self._python("#!/bin/sh\necho 'python is gone' >&2\nexit 97\n")

    def _python(self, text: str) -> None:
        tmp = self.bin / ".python3.tmp"
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, self.python)


@pytest.fixture
def hub_user(hub_standin, tmp_path, monkeypatch):
    """The user's Hub stand-in, token and repository ``org/run``."""
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    remember_hub_repo("org/run")
    return hub_standin


def fleet_box(provider_standin, tmp_path: Path, box: Box, monkeypatch):
    """``list_fleet`` of one Vast account whose one instance is ``box``, told to use the
    box's ``python3`` wrapper (``[hosts."vast:ID"] python``, so that the gate never picks
    another python there): a function that returns that instance's row."""
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, box.server.host, box.server.port)
    options = known_as(tmp_path, box.server, f"vast:{iid}")
    config = tmp_path / "xdg" / "gpurent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(f'[hosts."vast:{iid}"]\npython = "{box.python}"\n')
    config.chmod(0o600)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))

    def row():
        [only] = list_fleet([account(vast)], options).rows
        assert only.box is not None, only.unreachable
        return only

    return row


def pushed_run(box: Box, hub, name: str = "exp") -> Path:
    """A finished run of ``box``'s registry whose best.pt and end are on the Hub
    (``org/run``)."""
    run = finished_run(Path(box.server.home) / "proj" / name)
    register_run(box.server, run)
    record_push(hub, run, ("best.pt", "status.json"))
    return run


def kept_after_two(row, box: Box) -> os.stat_result:
    """Two listings: the first ships the trainer (the check's own exec), the second runs
    ``trainer safe --keep`` in the probe's exec. Returns the kept file's stat."""
    assert row().weights.words() == "weights safe (hub)"
    assert not box.kept.exists()
    assert row().weights.words() == "weights safe (hub)"
    return box.kept.stat()


def test_an_unchanged_box_answers_from_the_kept_report_and_a_new_registry_line_is_seen(
        provider_standin, hub_user, tmp_path, monkeypatch):
    box = Box(tmp_path / "box")
    try:
        row = fleet_box(provider_standin, tmp_path, box, monkeypatch)
        pushed_run(box, hub_user)
        kept = kept_after_two(row, box)
        box.break_python()
        said = row().weights
        assert said.words() == "weights safe (hub)", said  # no python ran on the box
        again = box.kept.stat()
        assert (again.st_ino, again.st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)

        other = finished_run(Path(box.server.home) / "proj" / "exp2")  # not pushed
        register_run(box.server, other)
        said = row().weights
        assert said.state == "unknown" and "python is gone" in said.reason, said
        box.fix_python()
        said = row().weights
        assert said.state == "unsafe" and "exp2/weights/best.pt" in said.reason, said
        box.break_python()
        said = row().weights  # the new run is in the kept answer
        assert said.state == "unsafe" and "exp2/weights/best.pt" in said.reason, said
    finally:
        box.server.sshd.stop()


def test_a_best_pt_replaced_by_other_bytes_of_the_same_size_and_mtime_is_judged_anew(
        provider_standin, hub_user, tmp_path, monkeypatch):
    box = Box(tmp_path / "box")
    try:
        row = fleet_box(provider_standin, tmp_path, box, monkeypatch)
        run = pushed_run(box, hub_user)
        kept_after_two(row, box)
        best = run / "weights" / "best.pt"
        was, folder = best.stat(), best.parent.stat()
        new = best.with_name(".best.pt.new")
        new.write_bytes(os.urandom(was.st_size))
        os.utime(new, ns=(was.st_atime_ns, was.st_mtime_ns))
        os.replace(new, best)
        os.utime(best.parent, ns=(folder.st_atime_ns, folder.st_mtime_ns))
        now = best.stat()
        assert (now.st_size, now.st_mtime_ns) == (was.st_size, was.st_mtime_ns)
        assert best.parent.stat().st_mtime_ns == folder.st_mtime_ns
        said = row().weights
        assert said.state == "unsafe" and "exp/weights/best.pt" in said.reason, said
    finally:
        box.server.sshd.stop()


def test_a_stat_without_nanoseconds_never_leaves_a_kept_answer(provider_standin, hub_user,
                                                                tmp_path, monkeypatch):
    box = Box(tmp_path / "box", stat=BUSYBOX_STAT)
    said = subprocess.run([str(box.bin / "stat"), "-L", "-c", "%n %s %i %.9Y %.9Z", "--",
                           str(box.python)], capture_output=True, text=True, timeout=30)
    assert re.fullmatch(r"\S+ \d+ \d+ \d+ \d+\n", said.stdout), said
    try:
        row = fleet_box(provider_standin, tmp_path, box, monkeypatch)
        pushed_run(box, hub_user)
        assert row().weights.words() == "weights safe (hub)"
        assert row().weights.words() == "weights safe (hub)"  # the tool ran, folded
        assert not box.kept.exists()
        box.break_python()
        said = row().weights
        assert said.state == "unknown" and "python is gone" in said.reason, said
    finally:
        box.server.sshd.stop()


def stamp(env: dict[str, str]) -> bytes:
    """``STAMP_LINES``'s output on this machine."""
    return subprocess.run(["sh", "-c", STAMP_LINES], env=env, capture_output=True,
                          check=False, timeout=30).stdout


def test_the_stamp_covers_what_the_answer_reads_and_refuses_other_shapes(tmp_path):
    run = tmp_path / "proj" / "exp"
    runfiles.RunWriter(run).write_status({"state": "completed", "best_epoch": 1})
    registry = tmp_path / "runs.txt"
    registry.write_text(f"{run}\n")
    env = {**os.environ, runfiles.RUN_REGISTRY_ENV: str(registry)}
    seen = [stamp(env)]

    def changed(change) -> None:
        change()
        seen.append(stamp(env))
        assert seen[-1] != seen[-2], change

    changed(lambda: runfiles.atomic_write_bytes(run / "weights" / "last.pt", b"x"))
    changed(lambda: runfiles.RunWriter(run).write_status({"best_epoch": 2}))
    changed(lambda: (run / "hub.json").write_text('{"entries": []}'))
    changed(lambda: (run / "train_config.yaml").write_text("epochs: 3\n"))
    beside = run.parent / ".gpurent" / "exp.hub.json"  # a LibreYOLO run's ledger
    beside.parent.mkdir()
    changed(lambda: beside.write_text('{"entries": []}'))
    changed(lambda: registry.write_text(f"{run}\n{run}\n"))
    lines = seen[-1]
    answer = {"runs": [{"run_dir": str(run), "files": [
        {"path": str(run / "weights" / "last.pt")}]}]}
    assert stamp_covers(lines, answer)
    assert not stamp_covers(lines, {"runs": [{"run_dir": str(tmp_path), "files": []}]})
    busybox = [" ".join(w.split(".")[0] if "." in w and w[0].isdigit() else w
                        for w in row.split(" ")) for row in lines.decode().splitlines()]
    assert not stamp_covers(("\n".join(busybox) + "\n").encode(), answer)
    assert not stamp_covers(b"", {"runs": []})  # no stat at all


def test_a_weight_file_written_after_the_stamp_leaves_no_kept_answer(tmp_path,
                                                                     monkeypatch):
    """The stamp is taken before the inventory: a best.pt that lands between the two is in
    the answer but not in the stamp, and an answer kept under that stamp would be printed
    again for as long as nothing else changes."""
    run = tmp_path / "proj" / "exp"
    runfiles.RunWriter(run).write_status({"state": "completed", "best_epoch": 1})
    (run / "weights").mkdir(exist_ok=True)
    registry = tmp_path / "runs.txt"
    registry.write_text(f"{run}\n")
    monkeypatch.setenv(runfiles.RUN_REGISTRY_ENV, str(registry))
    kept = tmp_path / "cache" / KEPT_FILE
    monkeypatch.setenv("GPURENT_CACHE_DIR", str(kept.parent))
    lines = stamp_lines()
    runfiles.atomic_write_bytes(run / "weights" / "best.pt", b"new weights")
    answer = inventory(registry=True)
    assert [f["file"] for f in answer["runs"][0]["files"]] == ["best.pt"]
    assert not stamp_covers(lines, answer)
    keep_answer("x", lines, answer)
    assert not kept.exists()
    keep_answer("x", stamp_lines(), inventory(registry=True))  # stamped with it: kept
    assert kept.is_file()


def test_keep_goes_with_the_registry_alone(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(tmp_path),
           "GPURENT_CACHE_DIR": str(tmp_path / "cache")}
    run = finished_run(tmp_path / "proj" / "exp")
    for words in ([str(run), "--keep=x"], ["--keep=x"], ["--registry", "--keep=a b"]):
        out = subprocess.run([sys.executable, "-m", "trainer", "safe", "--json", *words],
                             env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and "--keep goes with --registry alone" in out.stderr
    out = subprocess.run([sys.executable, "-m", "trainer", "safe", "--json", str(run)],
                         env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and not (tmp_path / "cache" / KEPT_FILE).exists()
