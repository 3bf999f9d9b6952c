"""Pulling a run's weights to the laptop, verified, and remembering that we did.

Each file is downloaded into ``DEST/NAME.part`` (a partial one from an earlier attempt is
resumed), its sha256 is compared with the one computed on the box (``sha256sum``, or the
box's python), and only then renamed to ``DEST/NAME`` and appended to the pull ledger
``$GPURENT_DATA_DIR/pulls.jsonl`` (default ``~/.local/share/gpurent/pulls.jsonl``), one JSON
object per line, which the teardown gate reads through ``pulled_hashes``.

A checkpoint may be replaced while it is pulled (the trainer saves ``best.pt`` atomically):
then the hashes disagree, the box is asked again, and the pull restarts once from zero.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


def data_dir() -> Path:
    """``$GPURENT_DATA_DIR`` or ``~/.local/share/gpurent``."""
    env = os.environ.get("GPURENT_DATA_DIR")
    return Path(env).expanduser() if env else Path("~/.local/share/gpurent").expanduser()


def ledger_path() -> Path:
    """The pull ledger file."""
    return data_dir() / LEDGER_NAME


def remote_path(run_dir: str, name: str) -> str:
    """Where ``name`` lives in the run: a bare file name is under ``weights/``, a relative
    path is under the run directory. Absolute paths and ``..`` are refused."""
    parts = name.split("/")
    if not name or name.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"bad file name {name!r}: use a name like best.pt or weights/x.pt")
    rel = name if len(parts) > 1 else f"{runfiles.WEIGHTS_DIR}/{name}"
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


def pull_weights(transport: Transport, run_dir: str, dest_dir: str | os.PathLike[str],
                 files: tuple[str, ...] = ("best.pt",),
                 progress: PullProgress | None = None) -> list[PulledFile]:
    """Download ``files`` of the run into ``dest_dir``, verify each against the box's
    sha256 and record it in the pull ledger. A file already in ``dest_dir`` with the right
    hash is not downloaded again. Raises ``TransportError`` (one line) when a file is
    missing on the box or cannot be verified, ``ValueError`` for a bad name."""
    dest = Path(dest_dir).expanduser()
    dest.mkdir(parents=True, exist_ok=True)
    pulled = []
    for name in files:
        source = remote_path(run_dir, name)
        target = dest / Path(name).name
        sha, size = _pull_one(transport, source, target, name, progress)
        item = PulledFile(name=name, local_path=str(target), sha256=sha, size=size)
        record(transport.label, run_dir, item)
        pulled.append(item)
    return pulled


def _pull_one(transport: Transport, source: str, target: Path, name: str,
              progress: PullProgress | None) -> tuple[str, int]:
    want, size = remote_sha256(transport, source)
    if target.exists() and target.stat().st_size == size and local_sha256(target) == want:
        if progress:
            progress(name, size, size)
        return want, size
    part = target.with_name(target.name + ".part")
    report = (lambda done, total: progress(name, done, total)) if progress else None
    for attempt in range(2):
        transport.download(source, str(part), progress=report, resume=attempt == 0)
        got = local_sha256(part)
        if got == want:
            os.replace(part, target)
            return want, os.path.getsize(target)
        # Either the partial file was stale or the box replaced the file meanwhile.
        want, size = remote_sha256(transport, source)
    part.unlink(missing_ok=True)
    raise TransportError(f"{name}: sha256 of the download does not match the box's "
                         f"after two tries (is it being rewritten?)")


def record(host_label: str, run_dir: str, item: PulledFile) -> None:
    """Append one verified pull to the ledger."""
    path = ledger_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    line = json.dumps({"host": host_label, "run_dir": run_dir, "file": item.name,
                       "sha256": item.sha256, "size": item.size,
                       "local_path": item.local_path, "time": runfiles.utc_now_iso()})
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(line + "\n")


def pulled_hashes(host_label: str, run_dir: str) -> set[str]:
    """The sha256 of every file of this run that the ledger says is on the laptop and
    still there with that size (a deleted local copy does not count)."""
    hashes: set[str] = set()
    try:
        text = ledger_path().read_text(encoding="utf-8", errors="replace")
    except OSError:
        return hashes
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict) or entry.get("host") != host_label \
                or entry.get("run_dir") != run_dir:
            continue
        local = entry.get("local_path")
        try:
            present = isinstance(local, str) and os.path.getsize(local) == entry.get("size")
        except OSError:
            present = False
        if present and isinstance(entry.get("sha256"), str):
            hashes.add(entry["sha256"])
    return hashes
