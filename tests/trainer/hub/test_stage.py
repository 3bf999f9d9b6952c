"""``trainer stage``: a dataset tar from a Hub dataset repository (the stand-in),
downloaded with the real client, extracted safely and only once."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.fixtures.hub_stage_kit import DATA_YAML, make_tar
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, hub_env
from tests.fixtures.paths import ROOT
from trainer.hub import stage as hub_stage

MB = 1024 * 1024


def dataset_tar(payload: int = 0) -> bytes:
    return make_tar([
        ("shapes/data.yaml", DATA_YAML, {}),
        ("shapes/images/train/a.bin", os.urandom(payload) if payload else b"a", {}),
        ("shapes/labels/train/a.txt", b"0 0.5 0.5 0.2 0.2\n", {}),
        ("shapes/latest", None, {"type": tarfile.SYMTYPE, "linkname": "images"}),
    ])


def stage_cmd(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "trainer", "stage", *args], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_stage_resumes_a_dropped_download_and_is_idempotent(hub_standin: HubStandin,
                                                            tmp_path: Path) -> None:
    archive = dataset_tar(payload=12 * MB)
    hub_standin.add_file("org/shapes", "shapes.tar", archive)
    hub_standin.truncate_next_download(11 * MB)  # the connection drops after 11 MiB
    env = hub_env(hub_standin, tmp_path / "hf")
    dest = tmp_path / "data"
    first = stage_cmd(env, "org/shapes", "shapes.tar", "--dest", str(dest), "--json")
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    assert result["staged"] and result["files"] == 3
    assert result["data_yaml"] == str(dest / "shapes" / "data.yaml")
    assert (dest / "shapes" / "data.yaml").read_bytes() == DATA_YAML
    assert (dest / "shapes" / "latest").is_symlink()
    # The client resumed from its last whole chunk with a Range request to the CDN,
    # which it reached without the Authorization header.
    cdn = hub_standin.routes("cdn")
    assert [r.range for r in cdn] == [None, f"bytes={10 * MB}-"]
    assert Path(result["archive"]).read_bytes() == archive
    assert Path(result["archive"]).is_relative_to(tmp_path / "hf")

    second = stage_cmd(env, "org/shapes", "shapes.tar", "--dest", str(dest))
    assert second.returncode == 0, second.stderr
    assert second.stdout.startswith("already staged")
    assert "train: images/train" in second.stdout  # it prints the data.yaml
    assert len(hub_standin.routes("cdn")) == 2  # no second download
    assert hub_standin.routes("resolve")[-1].method == "HEAD"


def test_a_new_archive_under_the_same_name_is_staged_again(hub_standin: HubStandin,
                                                          tmp_path: Path) -> None:
    """The marker stands for one archive, not for its name: after a new commit of
    ``shapes.tar`` the next stage downloads it and the new files are what DEST holds."""
    hub_standin.add_file("org/shapes", "shapes.tar", dataset_tar())
    env = hub_env(hub_standin, tmp_path / "hf")
    dest = tmp_path / "data"
    first = stage_cmd(env, "org/shapes", "shapes.tar", "--dest", str(dest), "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout)["staged"]
    new_yaml = DATA_YAML.replace(b"[circle, square]", b"[circle, square, star]")
    hub_standin.add_file("org/shapes", "shapes.tar", make_tar([
        ("shapes/data.yaml", new_yaml, {}),
        ("shapes/labels/train/b.txt", b"2 0.5 0.5 0.2 0.2\n", {}),
    ]))
    second = stage_cmd(env, "org/shapes", "shapes.tar", "--dest", str(dest), "--json")
    assert second.returncode == 0, second.stderr
    result = json.loads(second.stdout)
    assert result["staged"], "the old marker was trusted for a new archive"
    assert (dest / "shapes" / "data.yaml").read_bytes() == new_yaml
    assert (dest / "shapes" / "labels" / "train" / "b.txt").is_file()
    assert len(hub_standin.routes("cdn")) == 2  # the new archive was downloaded


def test_stage_refuses_an_archive_that_escapes(hub_standin: HubStandin,
                                               tmp_path: Path) -> None:
    evil = make_tar([
        ("good/data.yaml", DATA_YAML, {}),
        ("../evil", b"escaped", {}),
        ("/tmp/abs-evil", b"absolute", {}),
        ("good/link", None, {"type": tarfile.SYMTYPE, "linkname": "../../outside"}),
    ])
    hub_standin.add_file("org/evil", "evil.tar", evil)
    box = tmp_path / "box"
    dest = box / "data"
    box.mkdir()
    result = stage_cmd(hub_env(hub_standin, tmp_path / "hf"), "org/evil", "evil.tar",
                       "--dest", str(dest))
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing evil.tar" in lines[0], result.stderr
    assert "Traceback" not in result.stderr
    assert sorted(p.name for p in box.iterdir()) == []  # nothing written, inside or out
    assert not (tmp_path / "evil").exists() and not Path("/tmp/abs-evil").exists()


@pytest.mark.parametrize(("name", "attrs", "why"), [
    ("../evil", {}, "climbs out"),
    ("a/../../evil", {}, "climbs out"),
    ("/etc/evil", {}, "absolute path"),
    ("link", {"type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}, "absolute path"),
    ("a/link", {"type": tarfile.SYMTYPE, "linkname": "../../x"}, "outside the destination"),
    ("hard", {"type": tarfile.LNKTYPE, "linkname": "../x"}, "climbs out|outside"),
    ("dev", {"type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}, "device"),
    ("fifo", {"type": tarfile.FIFOTYPE}, "device or FIFO"),
])
def test_each_unsafe_member_is_refused_before_writing(tmp_path: Path, name: str,
                                                      attrs: dict, why: str) -> None:
    data = None if attrs.get("type") not in (None, tarfile.REGTYPE) else b"x"
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([("ok.txt", b"fine", {}), (name, data, attrs)]))
    dest = tmp_path / "dest"
    with pytest.raises(hub_stage.UnsafeArchive, match=why):
        hub_stage.extract_archive(archive, dest)
    assert not dest.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.tar"]


def test_links_inside_the_destination_are_fine(tmp_path: Path) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([
        ("d/file.txt", b"x", {}),
        ("d/sym", None, {"type": tarfile.SYMTYPE, "linkname": "file.txt"}),
        ("d/hard", None, {"type": tarfile.LNKTYPE, "linkname": "d/file.txt"}),
    ]))
    plan = hub_stage.extract_archive(archive, tmp_path / "dest")
    assert plan.files == 1
    assert (tmp_path / "dest" / "d" / "sym").read_bytes() == b"x"
    assert (tmp_path / "dest" / "d" / "hard").read_bytes() == b"x"


def test_not_enough_disk_is_refused_before_extracting(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "a.tar"
    archive.write_bytes(make_tar([("big.bin", os.urandom(4096), {})]))
    # Pretend the disk is nearly full: only the check's view of free space changes.
    monkeypatch.setattr(hub_stage, "free_bytes", lambda _path: hub_stage.DISK_MARGIN)
    with pytest.raises(OSError, match="not enough disk"):
        hub_stage.extract_archive(archive, tmp_path / "dest")
    assert not (tmp_path / "dest").exists()


def test_stage_of_a_missing_file_is_one_line(hub_standin: HubStandin, tmp_path: Path) -> None:
    hub_standin.add_file("org/shapes", "shapes.tar", dataset_tar())
    result = stage_cmd(hub_env(hub_standin, tmp_path / "hf"), "org/shapes", "nope.tar",
                       "--dest", str(tmp_path / "d"))
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "404" in result.stderr


def test_stage_a_private_regular_file_at_a_revision(hub_standin: HubStandin,
                                                    tmp_path: Path) -> None:
    commit = hub_standin.add_file("org/private", "small.tar", dataset_tar(), private=True,
                                  lfs=False)
    hub_standin.add_file("org/private", "small.tar", b"a later, different file", lfs=False)
    env = hub_env(hub_standin, tmp_path / "hf")
    args = ("org/private", "small.tar", "--dest", str(tmp_path / "d"), "--revision", commit)
    refused = stage_cmd(env, *args)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1
    assert "401" in refused.stderr
    result = subprocess.run([sys.executable, "-m", "trainer", "stage", *args, "--token-stdin",
                             "--json"], input=VALID_TOKEN + "\n", env=env, cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    answer = json.loads(result.stdout)
    assert answer["commit"] == commit and answer["files"] == 3
    # A regular file is served straight from resolve (ETag, Content-Length), with the token.
    get = [r for r in hub_standin.routes("resolve") if r.method == "GET"]
    assert len(get) == 1 and get[0].has_auth and hub_standin.routes("cdn") == []
