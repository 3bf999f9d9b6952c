"""Extracting an untrusted tar safely, the same way on every Python >= 3.9.

Nothing of tarfile's own extraction is used: its filters differ by version and were
bypassed (CVE-2025-4517: a symlink chain past PATH_MAX defeats the ``realpath`` they rely
on). Instead:

1. ``plan_archive`` reads the headers only and writes nothing. Each name is normalised
   lexically and refused when it is absolute, climbs with ``..``, is a device or FIFO,
   repeats an earlier non-directory member, or lies under a symlink (or file) of the same
   archive. Each symlink's target is resolved through the archive's other symlinks, the
   way the kernel would walk the extracted tree, and refused when it leaves DEST; a hard
   link must name an earlier regular file. Member count and total size are capped.
2. ``extract_planned`` writes into a private staging directory: directories and files
   first (created with ``O_EXCL | O_NOFOLLOW``, so nothing is written through a link),
   symlinks last. Then the staged tree is compared with DEST (an existing entry that is
   a link, or of another kind, refuses the whole archive) and renamed into place. On any
   failure the staging directory is removed: nothing is left behind.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

#: Most members an archive may hold (a COCO-sized dataset has about 250 000).
MAX_MEMBERS = 2_000_000
#: Most bytes the regular files of an archive may unpack to.
MAX_TOTAL_BYTES = 2 << 40
#: Most symlinks followed while resolving one link (the kernel's ELOOP limit).
MAX_LINK_HOPS = 40
_COPY_CHUNK = 1 << 20
_WRITE_FLAGS = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
                | getattr(os, "O_CLOEXEC", 0))

Parts = tuple[str, ...]


class UnsafeArchive(Exception):
    """The archive holds a member that could write outside DEST; one-line message."""


@dataclass(frozen=True)
class Entry:
    """One member to write: its normalised path, kind (``dir``, ``file``, ``symlink``,
    ``hardlink``) and, for a hard link, the path of the file it names."""

    parts: Parts
    kind: str
    member: tarfile.TarInfo
    target: Parts | None = None


@dataclass(frozen=True)
class ArchivePlan:
    """What a validated archive will write: regular file count and bytes, and the
    members in archive order."""

    files: int
    bytes: int
    entries: tuple[Entry, ...] = ()


def shown(name: str) -> str:
    """A member name as inert text for an error message."""
    return repr(name.encode("unicode_escape").decode("ascii")[:200])


def _parts(name: str, what: str) -> Parts:
    """``name`` as path components; ``UnsafeArchive`` when absolute or climbing out."""
    if name.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", name):
        raise UnsafeArchive(f"{what} {shown(name)} has an absolute path")
    if ".." in re.split(r"[\\/]", name):
        raise UnsafeArchive(f"{what} {shown(name)} climbs out with '..'")
    return tuple(p for p in name.split("/") if p not in ("", "."))


def _kind(member: tarfile.TarInfo) -> str:
    if member.ischr() or member.isblk() or member.isfifo() or member.isdev():
        raise UnsafeArchive(f"member {shown(member.name)} is a device or FIFO")
    if member.isdir():
        return "dir"
    if member.issym():
        return "symlink"
    if member.islnk():
        return "hardlink"
    if member.isreg():
        return "file"
    raise UnsafeArchive(f"member {shown(member.name)} is not a regular file, directory "
                        "or link")


def resolve_link(parts: Parts, links: dict[Parts, str]) -> Parts:
    """Where the symlink at ``parts`` leads, walked through the archive's other symlinks
    (``links``: path -> target) as the kernel would; ``UnsafeArchive`` when the walk
    leaves the destination, meets an absolute target or loops."""
    stack: list[str] = list(parts[:-1])
    pending = links[parts].split("/")
    hops = 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if not stack:
                raise UnsafeArchive(f"link {shown('/'.join(parts))} points outside the "
                                    f"destination ({links[parts][:200]!r})")
            stack.pop()
            continue
        stack.append(part)
        target = links.get(tuple(stack))
        if target is None:
            continue
        hops += 1
        if hops > MAX_LINK_HOPS:
            raise UnsafeArchive(f"link {shown('/'.join(parts))} loops through other links")
        if target.startswith("/"):
            raise UnsafeArchive(f"link {shown('/'.join(stack))} points to the absolute "
                                f"path {target[:200]!r}")
        stack.pop()
        pending = target.split("/") + pending
    return tuple(stack)


def plan_archive(tar: tarfile.TarFile, *, max_members: int = MAX_MEMBERS,
                 max_bytes: int = MAX_TOTAL_BYTES) -> ArchivePlan:
    """Check every member header (reads the whole index, writes nothing) and total the
    bytes; ``UnsafeArchive`` on the first member that is refused."""
    entries: list[Entry] = []
    non_dirs: dict[Parts, str] = {}
    dirs = set()
    links: dict[Parts, str] = {}
    files = size = 0
    for count, member in enumerate(iter(tar.next, None), 1):
        if count > max_members:
            raise UnsafeArchive(f"more than {max_members} members")
        kind = _kind(member)
        parts = _parts(member.name, "member")
        if not parts:
            if kind == "dir":
                continue
            raise UnsafeArchive(f"member {shown(member.name)} has an empty name")
        if parts in non_dirs or (kind != "dir" and parts in dirs):
            raise UnsafeArchive(f"member {shown(member.name)} appears twice")
        target = None
        if kind == "symlink":
            if not member.linkname:
                raise UnsafeArchive(f"link {shown(member.name)} has an empty target")
            if member.linkname.startswith("/"):
                raise UnsafeArchive(f"link {shown(member.name)} points to the absolute path "
                                    f"{member.linkname[:200]!r}")
            links[parts] = member.linkname
        elif kind == "hardlink":
            target = _parts(member.linkname, f"hard link {shown(member.name)} to")
            if non_dirs.get(target) != "file":
                raise UnsafeArchive(f"hard link {shown(member.name)} names "
                                    f"{shown(member.linkname)}, not an earlier file of the "
                                    "archive")
        elif kind == "file":
            files += 1
            size += member.size
            if size > max_bytes:
                raise UnsafeArchive(f"the files unpack to more than {max_bytes} bytes")
        if kind == "dir":
            dirs.add(parts)
        else:
            non_dirs[parts] = kind
        entries.append(Entry(parts, kind, member, target))
    for entry in entries:
        for cut in range(1, len(entry.parts)):
            above = non_dirs.get(entry.parts[:cut])
            if above is not None:
                raise UnsafeArchive(f"member {shown('/'.join(entry.parts))} lies under the "
                                    f"{'link' if above == 'symlink' else above} "
                                    f"{shown('/'.join(entry.parts[:cut]))}")
    for parts in links:
        resolve_link(parts, links)
    return ArchivePlan(files, size, tuple(entries))


def nearest_existing(path: Path) -> Path:
    """``path`` or its nearest ancestor that exists."""
    probe = path
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return probe


def extract_planned(tar: tarfile.TarFile, plan: ArchivePlan, dest: Path) -> None:
    """Write ``plan`` (from ``plan_archive`` on the same open ``tar``) into ``dest``
    through a staging directory; on any error nothing is left behind. Raises
    ``UnsafeArchive`` when DEST already holds a link or another kind of entry where the
    archive puts something, ``OSError`` or ``tarfile.TarError``."""
    if dest.is_symlink() and not dest.exists():
        raise UnsafeArchive(f"{dest} is a dangling link")
    exists = dest.exists()
    if exists and not dest.is_dir():
        raise UnsafeArchive(f"{dest} exists and is not a directory")
    staging = Path(tempfile.mkdtemp(prefix=".gpurent-staging-",
                                    dir=dest if exists else nearest_existing(dest.parent)))
    try:
        _write(tar, plan.entries, staging)
        if exists:
            moves: list[tuple[str, str]] = []
            _plan_moves(str(staging), str(dest), moves)
            for src, dst in moves:
                os.replace(src, dst)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.rename(staging, dest)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)


def _write(tar: tarfile.TarFile, entries: tuple[Entry, ...], root: Path) -> None:
    """Directories and files first, symlinks last: no link exists while data is written,
    and no member lies under a link (``plan_archive`` saw to that)."""
    dirs: list[tuple[str, tarfile.TarInfo]] = []
    links: list[tuple[str, str]] = []
    for entry in entries:
        path = os.path.join(root, *entry.parts)
        if entry.kind == "dir":
            os.makedirs(path, exist_ok=True)
            dirs.append((path, entry.member))
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if entry.kind == "file":
            _write_file(tar, entry.member, path)
        elif entry.kind == "hardlink":
            assert entry.target is not None
            os.link(os.path.join(root, *entry.target), path, follow_symlinks=False)
        else:
            links.append((path, entry.member.linkname))
    for path, target in links:
        os.symlink(target, path)
    for path, member in reversed(dirs):
        os.chmod(path, 0o755)
        os.utime(path, (member.mtime, member.mtime))


def _write_file(tar: tarfile.TarFile, member: tarfile.TarInfo, path: str) -> None:
    source = tar.extractfile(member)
    if source is None:
        raise tarfile.ReadError(f"cannot read member {shown(member.name)}")
    fd = os.open(path, _WRITE_FLAGS, 0o755 if member.mode & 0o100 else 0o644)
    written = 0
    with os.fdopen(fd, "wb") as out, source:
        while True:
            chunk = source.read(_COPY_CHUNK)
            if not chunk:
                break
            written += len(chunk)
            out.write(chunk)
    if written != member.size:
        raise tarfile.ReadError(f"member {shown(member.name)} is truncated")
    os.utime(path, (member.mtime, member.mtime))


def _plan_moves(src_dir: str, dst_dir: str, moves: list[tuple[str, str]]) -> None:
    """The renames that merge ``src_dir`` into the existing ``dst_dir``, checked with
    ``lstat`` level by level before anything moves."""
    for name in sorted(os.listdir(src_dir)):
        src, dst = os.path.join(src_dir, name), os.path.join(dst_dir, name)
        src_is_dir = stat.S_ISDIR(os.lstat(src).st_mode)
        try:
            mode = os.lstat(dst).st_mode
        except FileNotFoundError:
            moves.append((src, dst))
            continue
        if stat.S_ISDIR(mode) and src_is_dir:
            _plan_moves(src, dst, moves)
        elif stat.S_ISDIR(mode) or src_is_dir:
            what = "a link" if stat.S_ISLNK(mode) else (
                "a directory" if stat.S_ISDIR(mode) else "a file")
            raise UnsafeArchive(f"{dst} is already {what}; the archive puts "
                                f"{'a directory' if src_is_dir else 'a file'} there")
        else:
            moves.append((src, dst))  # a file or link replaces a file or link, not its target
