"""Getting a box ready to run ``python3 -m trainer``: once per trainer version.

1. find a python3 (>= 3.11) on the box: ``python3`` on PATH, then the usual places;
2. upload this ``trainer`` package over SFTP, as one tarball, into
   ``~/.cache/gpurent/trainer-<version>-<content hash>/trainer`` (skipped when that
   directory is complete: its ``.complete`` marker is written last);
3. check for ``psutil`` and ``huggingface_hub`` and, only when missing, try
   ``python3 -m pip install --user`` (a failure is noted, not fatal);
4. point ``transport.trainer_prefix`` at the uploaded copy (``PYTHONPATH=DIR PY -P``;
   ``-P`` keeps the working directory off ``sys.path`` so a ``trainer/`` folder in a
   project cannot shadow ours);
5. run ``trainer preflight --json`` (unless asked not to).

Works on any ``remote.transport.base.Transport``; the remote side needs only ``sh``, ``tar``
and the python it finds.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import tarfile
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trainer.version
from remote.transport.base import Transport, TransportError

#: Where python is looked for, in order (the first one >= MIN_PYTHON wins).
PYTHON_CANDIDATES = ("python3", "/usr/bin/python3", "/usr/local/bin/python3",
                     "/opt/conda/bin/python3", "/opt/conda/bin/python", "/usr/bin/python",
                     "python")
#: ``trainer.runfiles`` uses ``datetime.UTC`` (3.11).
MIN_PYTHON = (3, 11)
#: Pure-Python needs of the box-side tools, by import name -> pip name.
NEEDS = {"psutil": "psutil", "huggingface_hub": "huggingface_hub"}
CACHE_DIR = ".cache/gpurent"
MARKER = ".complete"
PIP_TIMEOUT = 600.0
PREFLIGHT_TIMEOUT = 300.0

#: ``progress("one line")`` for each step.
StepProgress = Callable[[str], None]

_PACKAGE_DIR = Path(trainer.version.__file__).resolve().parent


@dataclass
class BootstrapResult:
    """What bootstrapping found and did."""

    #: The python the trainer runs with (absolute path on the box).
    python: str
    #: The directory put first on PYTHONPATH (it holds ``trainer/``).
    trainer_dir: str
    #: The ``preflight --json`` report, or ``None`` when it was not run or failed.
    preflight: dict[str, Any] | None
    #: One line per thing the user should know (installs, failures, skips).
    notes: list[str] = field(default_factory=list)
    python_version: str = ""
    #: Whether the trainer package was uploaded (``False``: that version was there).
    uploaded: bool = False


def package_files() -> list[tuple[str, bytes]]:
    """The ``trainer`` package as ``(relative path, content)``, sorted, without caches."""
    files = []
    for path in sorted(_PACKAGE_DIR.rglob("*")):
        rel = path.relative_to(_PACKAGE_DIR.parent).as_posix()
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            files.append((rel, path.read_bytes()))
    return files


def content_hash(files: list[tuple[str, bytes]]) -> str:
    """A short hash of the package's paths and contents (names the box directory)."""
    digest = hashlib.sha256()
    for rel, data in files:
        digest.update(rel.encode() + b"\0" + len(data).to_bytes(8, "big") + data)
    return digest.hexdigest()[:16]


def make_tarball(files: list[tuple[str, bytes]]) -> bytes:
    """A gzipped tar of ``files`` (fixed mtimes and owners, so it is reproducible)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=6) as tar:
        for rel, data in files:
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _probe_script(dir_name: str) -> str:
    """One round trip: $HOME, whether the version is complete, every python candidate."""
    cands = " ".join(shlex.quote(c) for c in PYTHON_CANDIDATES)
    marker = f'"$HOME"/{CACHE_DIR}/{dir_name}/{MARKER}'
    return (
        f'printf "home\\t%s\\n" "$HOME"; mkdir -p "$HOME"/{CACHE_DIR}; '
        f'if [ -f {marker} ]; then printf "marker\\t%s\\n" "$(cat {marker})"; fi; '
        f"for p in {cands}; do "
        'path=$(command -v "$p" 2>/dev/null) || continue; '
        "v=$(\"$path\" -c 'import sys; print(\"%d.%d.%d\" % sys.version_info[:3])' "
        "2>/dev/null) || continue; "
        'printf "python\\t%s\\t%s\\n" "$path" "$v"; done'
    )


def _parse_probe(out: str) -> tuple[str, str | None, list[tuple[str, str]]]:
    home, marker, pythons = "", None, []
    for line in out.splitlines():
        parts = line.split("\t")
        if parts[0] == "home" and len(parts) == 2:
            home = parts[1]
        elif parts[0] == "marker" and len(parts) == 2:
            marker = parts[1].strip()
        elif parts[0] == "python" and len(parts) == 3 and (parts[1], parts[2]) not in pythons:
            pythons.append((parts[1], parts[2]))
    return home, marker, pythons


def _version(text: str) -> tuple[int, ...]:
    try:
        return tuple(int(x) for x in text.split("."))
    except ValueError:
        return ()


def bootstrap(transport: Transport, progress: StepProgress | None = None, *,
              python: str | None = None, preflight: bool = True,
              install: bool = True) -> BootstrapResult:
    """Make ``transport``'s box ready (see the module doc) and set its ``trainer_prefix``.

    ``python`` forces an interpreter (a path on the box) instead of searching. Raises
    ``TransportError`` with one line when no usable python exists or the upload fails."""
    say = progress or (lambda _msg: None)
    files = package_files()
    digest = content_hash(files)
    dir_name = f"trainer-{trainer.version.__version__}-{digest}"
    say("looking for python3 on the box")
    probe = transport.run(_probe_script(dir_name), timeout=60.0)
    home, marker, found = _parse_probe(probe.stdout.decode("utf-8", errors="replace"))
    if not home.startswith("/"):
        raise TransportError(f"cannot find the home directory on {transport.label}")
    notes: list[str] = []
    chosen = _choose_python(transport, python, found, notes)
    py, version = chosen
    say(f"using python {version} at {py}")
    base = f"{home}/{CACHE_DIR}/{dir_name}"

    uploaded = False
    if marker == digest:
        say(f"trainer {trainer.version.__version__} ({digest}) is already on the box")
    else:
        say(f"uploading trainer {trainer.version.__version__} ({len(files)} files)")
        _upload(transport, files, base, digest)
        uploaded = True

    if install:
        _ensure_needs(transport, py, notes, say)
    dash_p = " -P" if _version(version) >= (3, 11) else ""
    transport.trainer_prefix = f"PYTHONPATH={shlex.quote(base)} {shlex.quote(py)}{dash_p}"
    result = BootstrapResult(python=py, trainer_dir=base, preflight=None, notes=notes,
                             python_version=version, uploaded=uploaded)
    if preflight:
        result.preflight = _preflight(transport, notes, say)
    return result


def _choose_python(transport: Transport, forced: str | None,
                   found: list[tuple[str, str]], notes: list[str]) -> tuple[str, str]:
    if forced:
        res = transport.run(f"{shlex.quote(forced)} -c 'import sys; "
                            "print(\"%d.%d.%d\" % sys.version_info[:3])'", timeout=60.0)
        version = res.stdout.decode().strip()
        if not res.ok or _version(version) < MIN_PYTHON:
            raise TransportError(f"{forced} on {transport.label} is not a python "
                                 f">= {'.'.join(map(str, MIN_PYTHON))}")
        return forced, version
    for path, version in found:
        if _version(version) >= MIN_PYTHON:
            return path, version
        notes.append(f"skipped python {version} at {path} (too old)")
    need = ".".join(map(str, MIN_PYTHON))
    seen = ", ".join(f"{p} ({v})" for p, v in found) or "none"
    raise TransportError(f"no python >= {need} on {transport.label} (found: {seen})")


def _upload(transport: Transport, files: list[tuple[str, bytes]], base: str,
            digest: str) -> None:
    tag = uuid.uuid4().hex[:8]
    archive = f"{base}.{tag}.tar.gz"
    staging = f"{base}.{tag}.partial"
    fd, local = tempfile.mkstemp(suffix=".tar.gz", prefix="gpurent-trainer-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(make_tarball(files))
        transport.upload(local, archive)
    finally:
        os.unlink(local)
    q = shlex.quote
    # Extract beside the final place, write the marker last, then move it in whole; a
    # concurrent bootstrap that finished first wins and ours is dropped.
    script = (
        f"set -e; rm -rf {q(staging)}; mkdir -p {q(staging)}; "
        f"tar -xzf {q(archive)} -C {q(staging)}; rm -f {q(archive)}; "
        f"printf '%s\\n' {q(digest)} > {q(staging)}/{MARKER}; "
        f"if [ -f {q(base)}/{MARKER} ]; then rm -rf {q(staging)}; "
        f"else rm -rf {q(base)}; mv {q(staging)} {q(base)}; fi"
    )
    res = transport.run(script, timeout=120.0)
    if not res.ok:
        transport.run(f"rm -rf {q(staging)} {q(archive)}", timeout=60.0)
        raise TransportError(f"unpacking the trainer on {transport.label} failed: "
                             f"{_last_line(res.stderr)}")


def _ensure_needs(transport: Transport, py: str, notes: list[str],
                  say: StepProgress) -> None:
    names = sorted(NEEDS)
    check = (f"{shlex.quote(py)} -c 'import importlib.util as u, json, sys; "
             f"print(json.dumps([m for m in sys.argv[1:] if u.find_spec(m) is None]))' "
             + " ".join(names))
    res = transport.run(check, timeout=60.0)
    try:
        missing = json.loads(res.stdout.decode())
    except ValueError:
        notes.append(f"could not check for {', '.join(names)}: {_last_line(res.stderr)}")
        return
    if not missing:
        return
    pkgs = [NEEDS[m] for m in missing]
    say(f"installing {', '.join(pkgs)} with pip --user")
    cmd = (f"{shlex.quote(py)} -m pip install --user --disable-pip-version-check "
           f"--no-input -q " + " ".join(shlex.quote(p) for p in pkgs))
    try:
        res = transport.run(cmd, timeout=PIP_TIMEOUT)
    except TransportError as exc:
        notes.append(f"could not install {', '.join(pkgs)}: {exc}")
        return
    if res.ok:
        notes.append(f"installed {', '.join(pkgs)} with pip --user")
    else:
        notes.append(f"could not install {', '.join(pkgs)} (pip: {_last_line(res.stderr)}); "
                     "GPU stats and Hub pushes may not work")


def _preflight(transport: Transport, notes: list[str], say: StepProgress) -> dict | None:
    say("running preflight on the box")
    try:
        res = transport.run(f"{transport.trainer_prefix} -m trainer preflight --json",
                            timeout=PREFLIGHT_TIMEOUT)
    except TransportError as exc:
        notes.append(f"preflight did not finish: {exc}")
        return None
    text = res.stdout.decode("utf-8", errors="replace")
    start = text.find("{")
    try:
        report, _ = json.JSONDecoder().raw_decode(text[start:]) if start >= 0 else (None, 0)
    except ValueError:
        report = None
    if not isinstance(report, dict):
        notes.append(f"preflight failed (exit {res.rc}): {_last_line(res.stderr)}")
        return None
    if not res.ok:
        failed = ", ".join(str(f) for f in report.get("failed") or []) or f"exit {res.rc}"
        notes.append(f"preflight found a problem: {failed}")
    return report


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else "no message"
