"""Safe extraction of an untrusted tar (``trainer.hub.untar`` through
``trainer.hub.stage.extract_archive``), with real tars on the real filesystem: symlink
chains that leave DEST (CVE-2025-4517 included) are refused with the destination's parent
tree byte-identical before and after, on this Python and on Python 3.9."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.fixtures.paths import ROOT
from trainer.hub import stage as hub_stage
from trainer.hub.untar import UnsafeArchive

PYTHON39 = Path("/root/.pyenv/versions/3.9.18/bin/python")
SYM, HARD, DIR = tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.DIRTYPE


def make_tar(members: list[tuple]) -> bytes:
    """A tar from ``(name, type, linkname_or_data)`` tuples (regular files: bytes)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, kind, extra in members:
            info = tarfile.TarInfo(name)
            info.type = kind
            data = None
            if kind == tarfile.REGTYPE:
                data = extra
                info.size = len(data)
            elif kind in (SYM, HARD):
                info.linkname = extra
            elif kind == DIR:
                info.mode = 0o777
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def tree_hash(root: Path) -> str:
    """Every entry under ``root`` (never following links): path, kind, link target,
    content and mode, hashed."""
    digest = hashlib.sha256()
    for current, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(dirs + files):
            path = Path(current, name)
            st = path.lstat()
            digest.update(f"{path.relative_to(root)}\0{st.st_mode:o}\0".encode())
            if path.is_symlink():
                digest.update(os.readlink(path).encode())
            elif path.is_file():
                digest.update(path.read_bytes())
    return digest.hexdigest()


def cve_2025_4517_tar(dest: Path, *, hardlink: bool = True) -> bytes:
    """CPython's ``test_realpath_limit_attack``: a chain of symlinks whose expansion
    passes PATH_MAX, so that ``realpath`` stops resolving and the data filter lets
    ``escape`` (pointing above DEST) and writes through it pass."""
    steps = "abcdefghijklmnop"
    max_path = os.pathconf(dest.parent, "PC_PATH_MAX")
    component = "d" * ((max_path - len(str(dest)) - 1) // (len(steps) + 1))
    members: list[tuple] = []
    path = ""
    for step in steps:
        members.append((os.path.join(path, component), DIR, None))
        members.append((os.path.join(path, step), SYM, component))
        path = os.path.join(path, component)
    linkpath = os.path.join(*steps, "l" * 254)
    members += [(linkpath, SYM, os.path.join(*[".."] * len(steps))),
                ("escape", SYM, os.path.join(linkpath, ".."))]
    if hardlink:
        members += [(("flaglink", HARD, os.path.join("escape", "flag"))),
                    ("flaglink", tarfile.REGTYPE, b"overwrite")]
    members.append(("escape/newfile", tarfile.REGTYPE, b"new"))
    return make_tar(members)


CHAINS = {
    # l1 is DEST itself, so l1/l2 -> .. is DEST's parent, and l2/evil lands beside DEST.
    "dot-chain": [("l1", SYM, "."), ("l1/l2", SYM, ".."), ("l2/evil", tarfile.REGTYPE, b"x")],
    # Each link looks inside on its own; followed one after the other they leave DEST.
    "hop-chain": [("a/up", SYM, ".."), ("a/b", SYM, "up/.."), ("c", SYM, "a/b/x")],
    # A link, then a file written through it.
    "through-link": [("out", SYM, "sub/../.."), ("out/evil", tarfile.REGTYPE, b"x")],
    # A directory replaced by a link after files were put in it.
    "dir-then-link": [("d/", DIR, None), ("d/ok", tarfile.REGTYPE, b"x"), ("d", SYM, "..")],
    "loop": [("x", SYM, "y"), ("y", SYM, "x")],
}


@pytest.fixture
def box(tmp_path: Path) -> Path:
    """A box directory holding a file beside DEST that an escape would overwrite."""
    root = tmp_path / "box"
    (root / "keep").mkdir(parents=True)
    (root / "flag").write_bytes(b"original")
    (root / "keep" / "file").write_bytes(b"keep")
    return root


@pytest.mark.parametrize("hardlink", [True, False], ids=["with-hardlink", "links-only"])
def test_cve_2025_4517_chain_is_refused_and_nothing_changes(hardlink: bool, box: Path,
                                                            tmp_path: Path) -> None:
    dest = box / "data"
    archive = tmp_path / "cve.tar"
    archive.write_bytes(cve_2025_4517_tar(dest, hardlink=hardlink))
    before = tree_hash(tmp_path)
    why = "not an earlier file" if hardlink else "lies under the link|outside"
    with pytest.raises(UnsafeArchive, match=why):
        hub_stage.extract_archive(archive, dest)
    assert tree_hash(tmp_path) == before
    assert (box / "flag").read_bytes() == b"original"


@pytest.mark.parametrize("name", sorted(CHAINS))
def test_symlink_chains_leaving_dest_are_refused(name: str, box: Path, tmp_path: Path) -> None:
    archive = tmp_path / "chain.tar"
    archive.write_bytes(make_tar([("ok.txt", tarfile.REGTYPE, b"fine"), *CHAINS[name]]))
    before = tree_hash(tmp_path)
    with pytest.raises(UnsafeArchive, match="outside|lies under|appears twice|loops"):
        hub_stage.extract_archive(archive, box / "data")
    assert tree_hash(tmp_path) == before


def test_chains_that_stay_inside_are_extracted(tmp_path: Path) -> None:
    archive = tmp_path / "ok.tar"
    archive.write_bytes(make_tar([
        ("set/images/a.jpg", tarfile.REGTYPE, b"jpeg"),
        ("set/latest", SYM, "current"),
        ("set/current", SYM, "./images/../images"),
        ("set/copy.jpg", HARD, "set/images/a.jpg"),
        ("top", SYM, "set/latest/a.jpg"),
    ]))
    plan = hub_stage.extract_archive(archive, tmp_path / "dest")
    assert plan.files == 1
    dest = tmp_path / "dest"
    assert (dest / "top").read_bytes() == b"jpeg"
    assert (dest / "set" / "copy.jpg").stat().st_ino == (dest / "set/images/a.jpg").stat().st_ino
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dest", "ok.tar"]  # no staging left


@pytest.mark.parametrize(("limits", "why"), [
    ({"max_members": 3}, "more than 3 members"),
    ({"max_bytes": 10}, "more than 10 bytes"),
])
def test_member_count_and_size_are_capped(limits: dict, why: str, box: Path,
                                          tmp_path: Path) -> None:
    archive = tmp_path / "many.tar"
    archive.write_bytes(make_tar([(f"f{i}", tarfile.REGTYPE, b"12345") for i in range(5)]))
    before = tree_hash(tmp_path)
    with pytest.raises(UnsafeArchive, match=why):
        hub_stage.extract_archive(archive, box / "data", **limits)
    assert tree_hash(tmp_path) == before


def test_a_truncated_archive_leaves_nothing_behind(box: Path, tmp_path: Path) -> None:
    whole = make_tar([("a.bin", tarfile.REGTYPE, os.urandom(4096)),
                      ("b.bin", tarfile.REGTYPE, os.urandom(300_000))])
    archive = tmp_path / "cut.tar"
    archive.write_bytes(whole[:200_000])  # b.bin's header is there, its data is cut
    before = tree_hash(tmp_path)
    with pytest.raises((tarfile.TarError, OSError)):
        hub_stage.extract_archive(archive, box / "data")
    assert tree_hash(tmp_path) == before


def test_an_existing_dest_is_merged_but_never_written_through(box: Path,
                                                              tmp_path: Path) -> None:
    dest = box / "data"
    (dest / "old").mkdir(parents=True)
    (dest / "old" / "kept.txt").write_bytes(b"kept")
    (dest / "file.txt").write_bytes(b"old")
    archive = tmp_path / "new.tar"
    archive.write_bytes(make_tar([("old/new.txt", tarfile.REGTYPE, b"new"),
                                  ("file.txt", tarfile.REGTYPE, b"replaced")]))
    hub_stage.extract_archive(archive, dest)
    assert (dest / "old" / "kept.txt").read_bytes() == b"kept"
    assert (dest / "old" / "new.txt").read_bytes() == b"new"
    assert (dest / "file.txt").read_bytes() == b"replaced"
    assert sorted(p.name for p in dest.iterdir()) == ["file.txt", "old"]
    # A link already in DEST where the archive puts a directory: refused, nothing moved.
    (dest / "sneaky").symlink_to(box / "keep")
    archive.write_bytes(make_tar([("zz.txt", tarfile.REGTYPE, b"z"),
                                  ("sneaky/evil", tarfile.REGTYPE, b"x")]))
    before = tree_hash(tmp_path)
    with pytest.raises(UnsafeArchive, match="already a link"):
        hub_stage.extract_archive(archive, dest)
    assert tree_hash(tmp_path) == before


HOSTILE_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from trainer.hub.stage import extract_archive
from trainer.hub.untar import UnsafeArchive
refused = 0
for archive in sys.argv[3:]:
    try:
        extract_archive(Path(archive), Path(sys.argv[2]))
    except UnsafeArchive as exc:
        refused += 1
        print("refused:", exc)
print("refused", refused, "of", len(sys.argv) - 3)
"""


@pytest.mark.skipif(not PYTHON39.exists(), reason=f"no Python 3.9 at {PYTHON39}")
def test_the_hostile_tars_are_refused_on_python_3_9(box: Path, tmp_path: Path) -> None:
    dest = box / "data"
    archives = []
    for name, members in [("cve", None), *CHAINS.items()]:
        path = tmp_path / f"{name}.tar"
        path.write_bytes(cve_2025_4517_tar(dest) if members is None else make_tar(members))
        archives.append(str(path))
    good = tmp_path / "good.tar"
    good.write_bytes(make_tar([("d/f", tarfile.REGTYPE, b"x"), ("d/l", SYM, "f")]))
    before = tree_hash(tmp_path)
    result = subprocess.run([str(PYTHON39), "-S", "-c", HOSTILE_SCRIPT, str(ROOT), str(dest),
                             *archives], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"refused {len(archives)} of {len(archives)}" in result.stdout, result.stdout
    assert tree_hash(tmp_path) == before
    result = subprocess.run([str(PYTHON39), "-S", "-c", HOSTILE_SCRIPT, str(ROOT), str(dest),
                             str(good)], capture_output=True, text=True, timeout=120)
    assert "refused 0 of 1" in result.stdout, result.stdout + result.stderr
    assert (dest / "d" / "l").read_bytes() == b"x"


def test_the_cli_refuses_in_one_line(box: Path, tmp_path: Path, hub_standin) -> None:
    from tests.fixtures.hub_standin import hub_env

    hub_standin.add_file("org/chain", "chain.tar", make_tar(CHAINS["dot-chain"]))
    before = tree_hash(box)
    result = subprocess.run([sys.executable, "-m", "trainer", "stage", "org/chain", "chain.tar",
                             "--dest", str(box / "data")], env=hub_env(hub_standin,
                                                                      tmp_path / "hf"),
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 1
    assert result.stderr.count("\n") == 1 and "lies under the link 'l1'" in result.stderr
    assert tree_hash(box) == before
