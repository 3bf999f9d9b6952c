"""``gpurent stage`` and ``gpurent shapes`` (issue 37): a dataset put on a box reached over
a real OpenSSH sshd, the box downloading it from the Hub stand-in with the real
huggingface_hub; its progress streamed while it runs, the data.yaml printed as
``data=``, a second call doing nothing, one line for each way it fails."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fixtures.cli import GPURENT, ROOT, gpurent, ssh_home
from tests.fixtures.hub_stage_kit import DATA_YAML, make_tar
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin
from tests.fixtures.sshd import SSHServer, make_server
from tests.fixtures.watch_log import wait_until
from trainer.datasets.shapes import write_dataset
from trainer.hub.stage import DownloadWatch

TIMEOUT = 240


def dataset_tar(where: Path) -> bytes:
    """A small YOLO dataset tarred as the README does (``tar czf data.tar.gz -C mydata
    .``): data.yaml at the top."""
    write_dataset(where / "mydata", train=8, val=4, imgsz=32, seed=0)
    subprocess.run(["tar", "czf", "data.tar.gz", "-C", "mydata", "."], cwd=where,
                   check=True, timeout=60)
    return (where / "data.tar.gz").read_bytes()


@pytest.fixture
def hub_box(tmp_path: Path, hub_standin: HubStandin) -> Iterator[SSHServer]:
    """A box (real sshd) whose sessions reach the Hub stand-in, with its own HF_HOME."""
    server = make_server(tmp_path / "box", env={
        "HF_ENDPOINT": hub_standin.url, "HF_HUB_DISABLE_XET": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "box-hf")})
    yield server
    server.sshd.stop()


def laptop(tmp_path: Path, box: SSHServer) -> dict[str, str]:
    """The laptop: ``box`` in its ~/.ssh/config, an empty Hub token store of its own, the
    token in HF_TOKEN."""
    return {**ssh_home(tmp_path, box), "HF_HOME": str(tmp_path / "laptop-hf"),
            "HF_TOKEN": VALID_TOKEN}


def stage(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return gpurent("stage", "box", *args, env=env, timeout=TIMEOUT)


def downloads(hub: HubStandin) -> int:
    """Archive bodies the stand-in sent (from its CDN)."""
    return len([r for r in hub.routes("cdn") if r.method == "GET"])


def test_stage_streams_its_progress_prints_data_and_runs_once(
        hub_box: SSHServer, hub_standin: HubStandin, tmp_path: Path) -> None:
    hub_standin.add_file("me/data", "data.tar.gz", dataset_tar(tmp_path), private=True)
    env = laptop(tmp_path, hub_box)
    dest = tmp_path / "on-box" / "mydata"
    hub_standin.hold("cdn")  # the archive's body waits until the progress is seen
    proc = subprocess.Popen([str(GPURENT), "stage", "box", "me/data", "data.tar.gz",
                             "--dest", str(dest)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT), **env})
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        while first and "downloading" not in first:  # the box's bootstrap notes first
            first = proc.stderr.readline()
        assert first.startswith("gpurent stage: downloading data.tar.gz from me/data ("), \
            first
        assert proc.poll() is None  # streamed while the download waits, not at the end
        hub_standin.release("cdn")
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        hub_standin.release("cdn")
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "gpurent stage: extracting 25 files" in err
    said, data = out.splitlines()
    assert said.startswith(f"staged me/data data.tar.gz in {dest} on box: 25 files, ")
    assert data == f"data={dest / 'data.yaml'}"
    assert (dest / "data.yaml").read_text().startswith("# synthetic shapes")
    assert downloads(hub_standin) == 1

    again = stage(env, "me/data", "data.tar.gz", "--dest", str(dest), "--json")
    assert again.returncode == 0, again.stderr
    report = json.loads(again.stdout)
    assert report["ok"] and report["staged"] is False
    assert report["data_yaml"] == str(dest / "data.yaml") and report["files"] == 25
    assert "downloading" not in again.stderr and downloads(hub_standin) == 1
    # The token went on stdin: nothing the box wrote holds it.
    for path in (tmp_path / "box-hf").rglob("*"):
        assert not path.is_file() or VALID_TOKEN.encode() not in path.read_bytes(), path
    # The data= printed is what the box's tools take: the doctor passes it.
    doctor = gpurent("doctor", "box", str(dest / "data.yaml"), "--json", env=env,
                     timeout=TIMEOUT)
    assert doctor.returncode == 0, doctor.stderr
    assert json.loads(doctor.stdout)["ok"] is True


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The error of a failed ``gpurent stage``: its last line, after the connection's
    notes and any progress; no other line says it."""
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("gpurent stage: "), result.stderr
    assert "error" not in result.stderr.lower().replace(lines[-1].lower(), ""), lines
    return lines[-1]


def test_each_way_staging_fails_is_one_line(hub_box: SSHServer, hub_standin: HubStandin,
                                            tmp_path: Path) -> None:
    hub_standin.add_file("me/data", "data.tar.gz", dataset_tar(tmp_path), private=True)
    hub_standin.add_file("me/evil", "evil.tar", make_tar([
        ("good/data.yaml", DATA_YAML, {}), ("../evil", b"escaped", {})]))
    dest = tmp_path / "on-box" / "d"
    env = laptop(tmp_path, hub_box)

    no_token = stage({**env, "HF_TOKEN": ""}, "me/data", "data.tar.gz", "--dest", str(dest))
    assert no_token.returncode == 3  # the Hub refused
    assert "HTTP 401" in one_line(no_token) and "no Hugging Face token here" in \
        one_line(no_token)

    missing = stage(env, "me/nope", "data.tar.gz", "--dest", str(dest))
    assert missing.returncode == 3  # the Hub lacks it
    assert one_line(missing).startswith("gpurent stage: cannot find data.tar.gz in dataset "
                                        "me/nope: ")
    assert "HTTP 404: Repository not found" in one_line(missing)

    evil = stage(env, "me/evil", "evil.tar", "--dest", str(dest))
    assert evil.returncode == 4  # the archive refused
    assert one_line(evil).startswith("gpurent stage: refusing evil.tar: ")
    assert one_line(evil).endswith("climbs out with '..'; nothing was extracted")
    assert not dest.exists() and not (dest.parent / "evil").exists()

    bad = stage(env, "not-a-repo", "data.tar.gz", "--dest", str(dest))
    assert bad.returncode == 2 and "ORG/NAME" in one_line(bad)
    assert bad.stderr.splitlines() == [one_line(bad)]  # refused before connecting
    assert downloads(hub_standin) == 1  # the evil archive's


def test_a_disk_too_small_is_refused_before_extracting(
        hub_box: SSHServer, hub_standin: HubStandin, tmp_path: Path,
        small_disk: Path) -> None:
    hub_standin.add_file("me/data", "data.tar.gz", dataset_tar(tmp_path))
    result = stage(laptop(tmp_path, hub_box), "me/data", "data.tar.gz", "--dest",
                   str(small_disk / "mydata"))
    assert result.returncode == 5  # the box's disk
    assert one_line(result).startswith(f"gpurent stage: not enough disk in {small_disk}")
    assert list(small_disk.iterdir()) == []


def test_shapes_writes_a_first_dataset_on_the_box(hub_box: SSHServer,
                                                  tmp_path: Path) -> None:
    env = laptop(tmp_path, hub_box)
    where = tmp_path / "on-box" / "shapes"
    for _ in range(2):  # an earlier shapes dataset is written again
        made = gpurent("shapes", "box", str(where), "--train", "8", "--val", "4",
                       "--imgsz", "32", env=env, timeout=TIMEOUT)
        assert made.returncode == 0, made.stderr
        assert made.stdout.splitlines() == [
            f"wrote 8 train + 4 val images (circle, square, triangle, cross) in {where} "
            "on box", f"data={where / 'data.yaml'}"]
    assert len(list((where / "images" / "train").iterdir())) == 8
    other = tmp_path / "on-box" / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    refused = gpurent("shapes", "box", str(other), env=env, timeout=TIMEOUT)
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("gpurent shapes: trainer shapes failed (exit 2): shapes: ")
    assert (other / "notes.txt").read_text() == "mine"


def test_help_lists_stage_and_shapes() -> None:
    listed = gpurent("--help")
    assert listed.returncode == 0
    lines = listed.stdout.splitlines()
    assert any(line.split()[:1] == ["stage"] for line in lines), listed.stdout
    assert any(line.split()[:1] == ["shapes"] for line in lines), listed.stdout


def test_the_download_watch_says_how_far_the_partial_file_got(tmp_path: Path) -> None:
    said: list[str] = []
    part = tmp_path / "0123abcd.incomplete"

    def grow_to(n: int) -> None:  # whole at once, as a reader must never see it half
        (tmp_path / "next").write_bytes(b"x" * n)
        os.replace(tmp_path / "next", part)

    with DownloadWatch(tmp_path, 4_000_000, said.append, every=0.05):
        grow_to(1_000_000)
        assert wait_until(lambda: len(said) == 1, timeout=30)
        grow_to(3_000_000)
        assert wait_until(lambda: len(said) == 2, timeout=30)
        time.sleep(0.3)  # no change: nothing more is said
    assert said == ["downloaded 1.0 MB of 4.0 MB (25%)", "downloaded 3.0 MB of 4.0 MB (75%)"]
    grow_to(4_000_000)
    time.sleep(0.3)
    assert len(said) == 2 and not [t for t in threading.enumerate()
                                   if t.name == "download progress"]


def test_a_resume_elsewhere_streams_the_staging_as_it_goes(
        hub_box: SSHServer, hub_standin: HubStandin, tmp_path: Path) -> None:
    hub_standin.add_file("me/data", "data.tar.gz", dataset_tar(tmp_path))
    dest = tmp_path / "on-box" / "datasets"
    resumed = gpurent("resume", "me/nothing:exp", "--on", "box", "--stage",
                      "me/data:data.tar.gz", "--stage-dest", str(dest), "--detach",
                      env=laptop(tmp_path, hub_box), timeout=TIMEOUT)
    said = resumed.stdout.splitlines()
    # Each of the box's staging steps is a line as it comes, before the dataset is there.
    staged = next(n for n, line in enumerate(said) if "dataset staged from me/data" in line)
    steps = [line for line in said[:staged] if "staging data.tar.gz: " in line]
    assert any("downloading data.tar.gz from me/data" in line for line in steps), said
    assert any("extracting" in line for line in steps), said
    assert (dest / "data.yaml").is_file()
    assert resumed.returncode == 1 and "restore from me/nothing failed" in resumed.stderr
