"""Pulling a run's weights to the laptop, verified, and remembering that we did.

Each file of box run ``/abs/RUN`` lands at ``DEST/<host>/abs/RUN/<path in the run>`` (so
pulls of different runs, or of two boxes, never share a name), for ``gpurent pull`` and
the TUI's pull alike; ``DEST`` is ``./weights`` unless another folder is named
(``default_pull_dir``). It is downloaded into ``NAME.part`` over several SFTP sessions at
once, by ranges (``remote.transport.ranged``; a partial one from an earlier attempt is
resumed), hashed on the way; its sha256 is compared with the one the box computes
meanwhile (``sha256sum``, or the box's python), and only then renamed into place and
appended to the pull ledger ``$GPURENT_DATA_DIR/pulls.jsonl`` (default
``~/.local/share/gpurent/pulls.jsonl``), one JSON object per line: the box
(``host``), the run and file as absolute paths on the box, the sha256, and the local
copy's absolute path and identity (size, inode, mtime).

A ledger line counts as a copy only while that local file is still what was pulled
(``verified_copy``): the same identity, or (when any part changed) the same sha256.

A checkpoint may be replaced while it is pulled (the trainer saves ``best.pt`` atomically):
then the hashes disagree, the box is asked again, and the pull restarts once from zero.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from remote.config import data_dir
from remote.transport.base import Transport, TransportError
from trainer import runfiles

#: ``progress(file_name, done_bytes, total_bytes)``.
PullProgress = Callable[[str, int, int], None]

LEDGER_NAME = "pulls.jsonl"
HASH_TIMEOUT = 600.0


@dataclass(frozen=True)
class PulledFile:
    """One verified file on the laptop."""

    name: str
    local_path: str
    sha256: str
    size: int


#: The run's history, pulled from the run's top by its bare name.
HISTORY_FILES = (runfiles.METRICS_FILE, runfiles.RESULTS_FILE)

#: Most bytes of a path the box may answer with (PATH_MAX is 4096 on Linux).
PATH_REPLY = 1 << 16


def ledger_path() -> Path:
    """The pull ledger file."""
    return data_dir() / LEDGER_NAME


def ledger_stamp() -> tuple[int, int, int] | None:
    """The pull ledger's size, mtime and inode (``None`` while there is none): a pull
    made anywhere on this laptop (``gpurent pull``, another window) changes it."""
    try:
        st = os.stat(ledger_path())
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ino


def remote_path(run_dir: str, name: str) -> str:
    """Where ``name`` lives in the run: the history (``metrics.jsonl``, ``results.csv``)
    is at the run's top, another bare file name is under ``weights/``, a relative path is
    under the run directory. Absolute paths and ``..`` are refused."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad file name {name!r}: use a name like best.pt or weights/x.pt")
    rel = name if len(parts) > 1 or name in HISTORY_FILES else f"{runfiles.WEIGHTS_DIR}/{name}"
    return f"{run_dir.rstrip('/')}/{rel}"


_PY_SHA256 = """import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())
"""


def remote_sha256(transport: Transport, path: str) -> tuple[str, int]:
    """The sha256 and size of ``path`` on the box (``sha256sum``, else its python)."""
    q = shlex.quote(path)
    py = f"python3 -c {shlex.quote(_PY_SHA256)} {q}"
    script = (f"if [ ! -f {q} ]; then echo missing >&2; exit 3; fi; wc -c < {q}; "
              f"if command -v sha256sum >/dev/null 2>&1; then sha256sum -- {q}; else {py}; fi")
    res = transport.run(script, timeout=HASH_TIMEOUT)
    words = res.stdout.decode("utf-8", errors="replace").split()
    if res.rc == 3:
        hint = (": the trainer writes it after the first validated epoch; pull again then"
                if path.endswith("/best.pt") else "")
        raise TransportError(f"{path} does not exist on {transport.label}{hint}")
    if not res.ok or len(words) < 2 or len(words[1]) != 64:
        err = res.stderr.decode("utf-8", errors="replace").strip().splitlines()
        raise TransportError(f"cannot hash {path} on {transport.label}: "
                             f"{err[-1] if err else 'no output'}")
    return words[1].lower(), int(words[0])


def local_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 of a local file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


DEFAULT_FILES = ("best.pt", "last.pt")
#: The folder pulls go into, in the working directory, when none is named.
PULL_FOLDER = "weights"
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._@-]")


def box_run_dir(transport: Transport, run_dir: str) -> str:
    """The run directory as an absolute path on the box, symlinks resolved."""
    q = shlex.quote(run_dir)
    res = transport.run(f"cd -- {q} 2>/dev/null && pwd -P", timeout=30.0,
                        max_bytes=PATH_REPLY)
    path = res.stdout.decode("utf-8", errors="replace").strip()
    if not res.ok or not path.startswith("/"):
        raise TransportError(f"{run_dir} is not a directory on {transport.label}")
    return path


def dest_for(dest_dir: str | os.PathLike[str], host_label: str, abs_run_dir: str) -> Path:
    """``DEST/<host>/<the run's absolute path on the box>``, absolute, each part made safe."""
    parts = [_UNSAFE_CHARS.sub("_", p) for p in abs_run_dir.split("/") if p not in ("", ".")]
    return Path(dest_dir).expanduser().resolve().joinpath(
        _UNSAFE_CHARS.sub("_", host_label), *[p if p != ".." else "__" for p in parts])


def default_pull_dir(beside: str | os.PathLike[str] | None = None) -> Path:
    """The folder a pull goes into when none is named, for ``gpurent pull`` and the TUI's
    pull alike: ``weights`` in the working directory (the README's), or in ``beside``
    (the demo's root: its runs live in the cache, and its pulls beside them, never in
    the checkout it was started from)."""
    return Path(beside or ".") / PULL_FOLDER


def existing_defaults(transport: Transport, run_dir: str) -> tuple[str, ...]:
    """Which of ``DEFAULT_FILES`` the run has; a one-line error when neither."""
    found = tuple(n for n in DEFAULT_FILES if transport.stat(remote_path(run_dir, n)))
    if not found:
        raise TransportError(f"no weights/best.pt or weights/last.pt in {run_dir} on "
                             f"{transport.label} yet: the trainer writes last.pt after the "
                             "first epoch (best.pt after the first validated epoch); pull "
                             "again then")
    return found


def pull_weights(transport: Transport, run_dir: str,
                 dest_dir: str | os.PathLike[str] | None = None,
                 files: tuple[str, ...] | None = None,
                 progress: PullProgress | None = None) -> list[PulledFile]:
    """Download ``files`` of the run (default: ``best.pt`` and ``last.pt``, those that
    exist) under ``dest_for(dest_dir, ...)`` (``dest_dir`` default:
    ``default_pull_dir()``), verify each against the box's sha256 and record it in the
    pull ledger. A file already there with the right hash is not downloaded again.
    Raises ``TransportError`` (one line) when a file is missing on the box or cannot be
    verified, ``ValueError`` for a bad name."""
    for name in files or ():
        remote_path(run_dir, name)  # bad names fail before anything is fetched
    abs_run = box_run_dir(transport, run_dir)
    files = files or existing_defaults(transport, abs_run)
    dest = dest_for(default_pull_dir() if dest_dir is None else dest_dir, transport.label,
                    abs_run)
    pulled = []
    for name in files:
        source = remote_path(abs_run, name)
        target = dest / source[len(abs_run) + 1:]
        target.parent.mkdir(parents=True, exist_ok=True)
        sha, size = _pull_one(transport, source, target, name, progress)
        item = PulledFile(name=name, local_path=str(target), sha256=sha, size=size)
        record(transport.label, abs_run, source, item)
        pulled.append(item)
    return pulled


def _pull_one(transport: Transport, source: str, target: Path, name: str,
              progress: PullProgress | None) -> tuple[str, int]:
    part = target.with_name(target.name + ".part")
    report = (lambda done, total: progress(name, done, total)) if progress else None
    if target.exists():  # pulled before: the same content is not fetched again
        want, size = remote_sha256(transport, source)
        if target.stat().st_size == size and local_sha256(target) == want:
            if progress:
                progress(name, size, size)
            return want, size
    _check_room(transport, source, part, name)
    if not hasattr(transport, "download_ranges"):
        return _pull_one_stream(transport, source, target, part, report)
    for attempt in range(2):
        got, size, want, box_size = _download_hashed(transport, source, part, report,
                                                     resume=attempt == 0)
        if got == want and size == box_size:
            os.replace(part, target)
            return want, size
        # Either the partial file was stale or the box replaced the file meanwhile.
    part.unlink(missing_ok=True)
    raise TransportError(f"{name}: sha256 of the download does not match the box's "
                         f"after two tries (is it being rewritten?)")


def _check_room(transport: Transport, source: str, part: Path, name: str) -> None:
    """``TransportError`` before a byte is fetched when ``part``'s disk cannot hold the
    rest of ``source`` (a full disk would leave a partial file and a failed pull)."""
    # An exec, not SFTP: an SFTP session stays open, and a box that allows one session
    # at a time would then refuse the download's.
    try:
        asked = transport.run(f"stat -c %s -- {shlex.quote(source)}", timeout=30.0,
                              max_bytes=64)
    except TransportError:
        return  # the download says what is wrong
    words = asked.stdout.split()
    if not asked.ok or len(words) != 1 or not words[0].isdigit():
        return
    size = int(words[0])
    have = part.stat().st_size if part.exists() else 0
    free = shutil.disk_usage(part.parent).free
    if size - have > free:
        raise TransportError(f"{name}: needs {_mb(size - have)} at {part.parent}, "
                             f"which has {_mb(free)} free")


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def _download_hashed(transport: Transport, source: str, part: Path,
                     report: Callable[[int, int], None] | None,
                     resume: bool) -> tuple[str, int, str, int]:
    """``(sha256, size)`` of the download and of the box's file. The box hashes while the
    file travels (both read it once, at the same time), from when the download holds its
    first session: a box that allows one session at a time then refuses the hash, which
    runs again after the download."""
    with ThreadPoolExecutor(1) as pool:
        box_hash: list[Future[tuple[str, int]]] = []
        got, size, _streams = transport.download_ranges(  # type: ignore[attr-defined]
            source, str(part), progress=report, resume=resume,
            opened=lambda: box_hash.append(pool.submit(remote_sha256, transport, source)))
        try:
            want, box_size = box_hash[0].result()
        except TransportError:
            want, box_size = remote_sha256(transport, source)
    return got, size, want, box_size


def _pull_one_stream(transport: Transport, source: str, target: Path, part: Path,
                     report: Callable[[int, int], None] | None) -> tuple[str, int]:
    """One stream (a transport without ranged downloads: this machine)."""
    want, size = remote_sha256(transport, source)
    for attempt in range(2):
        transport.download(source, str(part), progress=report, resume=attempt == 0)
        if local_sha256(part) == want:
            os.replace(part, target)
            return want, os.path.getsize(target)
        want, size = remote_sha256(transport, source)
    part.unlink(missing_ok=True)
    raise TransportError(f"{target.name}: sha256 of the download does not match the "
                         f"box's after two tries (is it being rewritten?)")


def record(host_label: str, abs_run_dir: str, source: str, item: PulledFile) -> None:
    """Append one verified pull to the ledger, with the local copy's identity."""
    path = ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    st = os.stat(item.local_path)
    line = json.dumps({"host": host_label, "run_dir": abs_run_dir, "remote_path": source,
                       "file": item.name, "sha256": item.sha256, "size": item.size,
                       "local_path": item.local_path, "inode": st.st_ino,
                       "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                       "time": runfiles.utc_now_iso()})
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def ledger_entries(host_label: str) -> list[dict]:
    """The ledger's lines for box ``host_label``, newest first (unreadable lines, and
    lines without an absolute local path, are skipped)."""
    try:
        text = ledger_path().read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for line in reversed(text.splitlines()):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and entry.get("host") == host_label \
                and isinstance(entry.get("local_path"), str) \
                and os.path.isabs(entry["local_path"]):
            out.append(entry)
    return out


def copy_is_intact(entry: dict) -> bool:
    """Whether the local file of a ledger line is still what was pulled: the recorded
    size, inode, mtime and ctime (a copy rewritten in place with its mtime put back moves
    its ctime), or (when any differs, or a line has no ctime) the recorded sha256,
    re-hashed."""
    try:
        st = os.stat(entry["local_path"])
    except OSError:
        return False
    if st.st_size != entry.get("size"):
        return False
    if (st.st_ino, st.st_mtime_ns, st.st_ctime_ns) == \
            (entry.get("inode"), entry.get("mtime_ns"), entry.get("ctime_ns")):
        return True
    try:
        return local_sha256(entry["local_path"]) == entry.get("sha256")
    except OSError:
        return False


def verified_copy(entries: list[dict], remote_file: str, sha256: str) -> dict | None:
    """The newest ledger line (of ``ledger_entries``) holding box file ``remote_file``
    with content ``sha256`` whose local copy is intact, or ``None``."""
    for entry in entries:
        if entry.get("remote_path") == remote_file and entry.get("sha256") == sha256 \
                and copy_is_intact(entry):
            return entry
    return None
