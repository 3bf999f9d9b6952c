"""Getting a box ready to run ``python3 -m trainer``: once per trainer version.

1. find the python that can train (``remote.link.interpreter``: the candidates of rented images,
   the one with torch preferred; ``--python`` or the config file overrides; the choice
   is remembered per box on the laptop, see ``remote.config``);
2. upload this ``trainer`` package over SFTP, as one tarball, into
   ``~/.cache/gpurent/trainer-<version>-<content hash>/trainer`` (skipped when that
   directory is complete: its ``.complete`` marker is written last), with
   ``gpurent_main.py`` beside it;
3. check for ``psutil`` and ``huggingface_hub`` and, only when missing, install them with
   ``pip install --target`` into ``deps-X.Y`` of that directory, which works for a
   virtualenv's python and the system's alike (``--user`` fails in a venv). A box
   without pip or network gets one note, and is not asked again for that version;
4. point ``transport.trainer_prefix`` at the uploaded copy:
   ``PYTHONPATH=DIR PY DIR/gpurent_main.py``, to which commands add ``-m trainer ...``;
5. run ``trainer preflight --json`` (unless asked not to).

Works on any ``remote.transport.base.Transport``; the remote side needs only ``sh``, ``tar``
and a python >= 3.9.
"""

from __future__ import annotations

import contextlib
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
from remote import config
from remote.link.interpreter import BoxPython, choose, parse_probe, probe_script
from remote.link.tools import ask_tool
from remote.transport.base import Transport, TransportError
from trainer import runfiles

#: Pure-Python needs of the box-side tools, by import name -> pip name.
NEEDS = {"psutil": "psutil", "huggingface_hub": "huggingface_hub"}
CACHE_DIR = ".cache/gpurent"
MARKER = ".complete"
#: The laptop's cache of the package hash (see ``package_digest``), in its state dir.
DIGEST_CACHE = "package-digest.json"
PIP_TIMEOUT = 600.0
PREFLIGHT_TIMEOUT = 300.0
#: The entry point uploaded beside ``trainer/``: ``python DIR/gpurent_main.py -m trainer
#: ARGS`` is ``python -m trainer ARGS`` with DIR, not the working directory, first on
#: sys.path (what ``-P`` does from 3.11 on: a ``trainer/`` folder in a project cannot
#: shadow ours), and the needs pip installed into ``DIR/deps-X.Y`` last, after the
#: python's own site-packages, so they fill gaps without shadowing torch's.
LAUNCHER_NAME = "gpurent_main.py"
LAUNCHER = b'''"""python gpurent_main.py -m trainer ARGS: see remote/link/bootstrap.py."""
import os
import runpy
import sys

here = os.path.dirname(os.path.abspath(__file__))
deps = os.path.join(here, "deps-%d.%d" % sys.version_info[:2])
if os.path.isdir(deps):
    sys.path.append(deps)
if sys.argv[1:3] == ["-m", "trainer"]:
    del sys.argv[1:3]
runpy.run_module("trainer", run_name="__main__", alter_sys=True)
'''

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
    #: torch's version in that python (``"?"`` present without metadata, ``""`` absent).
    torch: str = ""


def package_files() -> list[tuple[str, bytes]]:
    """What is uploaded: the ``trainer`` package as ``(relative path, content)``, sorted,
    without caches, and the entry point beside it."""
    files = [(path.relative_to(_PACKAGE_DIR.parent).as_posix(), path.read_bytes())
             for path in _package_paths()]
    return [*files, (LAUNCHER_NAME, LAUNCHER)]


def _package_paths() -> list[Path]:
    return [path for path in sorted(_PACKAGE_DIR.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc"]


def package_digest() -> str:
    """``content_hash(package_files())``, computed once per install of this package: the
    answer is kept in the laptop's state directory, keyed by every package file's path,
    size and mtime, so a connection only stats the files."""
    key = hashlib.sha256(LAUNCHER)
    for path in _package_paths():
        st = path.stat()
        key.update(f"{path.relative_to(_PACKAGE_DIR)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    if key.hexdigest() in _digests:
        return _digests[key.hexdigest()]
    _digests[key.hexdigest()] = digest = _stored_digest(key.hexdigest())
    return digest


#: ``package_digest``'s answers in this process, by the files' stats.
_digests: dict[str, str] = {}


def _stored_digest(key: str) -> str:
    cache = config.state_path().with_name(DIGEST_CACHE)
    try:
        known = json.loads(cache.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return known[key]
    digest = content_hash(package_files())
    with contextlib.suppress(OSError):
        cache.parent.mkdir(parents=True, exist_ok=True)
        runfiles.atomic_write_json(cache, {key: digest})
    return digest


def install_name() -> str:
    """``trainer-<version>-<content hash>``: the box directory of this package."""
    return f"trainer-{trainer.version.__version__}-{package_digest()}"


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


def _probe_script(dir_name: str, forced: str | None) -> str:
    """One round trip: $HOME, whether the version is complete, which needs failed to
    install before, and every python candidate (``forced`` first)."""
    base = f'"$HOME"/{CACHE_DIR}/{dir_name}'
    return (
        f'printf "home\\t%s\\n" "$HOME"; mkdir -p "$HOME"/{CACHE_DIR}; '
        f'if [ -f {base}/{MARKER} ]; then printf "marker\\t%s\\n" "$(cat {base}/{MARKER})"; fi; '
        f'for f in {base}/deps-*.failed {base}/deps-*.ok-*; do [ -f "$f" ] && '
        'printf "depsfailed\\t%s\\n" "${f##*/}"; done; '
        + probe_script((forced,) if forced else ())
    )


def _parse_probe(out: str) -> tuple[str, str | None, set[str], list[BoxPython]]:
    home, marker, failed = "", None, set()
    for line in out.splitlines():
        parts = line.split("\t")
        if parts[0] == "home" and len(parts) == 2:
            home = parts[1]
        elif parts[0] == "marker" and len(parts) == 2:
            marker = parts[1].strip()
        elif parts[0] == "depsfailed" and len(parts) == 2:
            failed.add(parts[1].strip())
    return home, marker, failed, parse_probe(out.splitlines())


def box_id(transport: Transport) -> str:
    """What the laptop remembers a box by: its host key where the transport knows it
    (the same box whatever address it is reached at), else its label."""
    return getattr(transport, "box_id", None) or transport.label


def boot_probe(python: str | None = None, name: str | None = None) -> str:
    """The probe bootstrap runs (``bootstrap(probe=...)`` takes its output instead), for
    the install ``name`` (default: this package's)."""
    return _probe_script(name or install_name(), python)


def bootstrap_box(transport: Transport, progress: StepProgress | None = None, *,
              python: str | None = None, preflight: bool = True,
              install: bool = True, probe: str | None = None) -> BootstrapResult:
    """Make ``transport``'s box ready (see the module doc) and set its ``trainer_prefix``.

    ``python`` forces an interpreter (a path on the box) instead of choosing one; ``probe``
    is the output of ``boot_probe(python)`` when it already ran (the gate's answer,
    ``remote.link.gate``), which saves its round trip. Raises ``TransportError`` with one line
    when no usable python exists or the upload fails."""
    say = progress or (lambda _msg: None)
    digest = package_digest()
    dir_name = install_name()
    if probe is None:
        say("looking for python on the box")
        probe = transport.run(_probe_script(dir_name, python), timeout=120.0).stdout.decode(
            "utf-8", errors="replace")
    home, marker, failed, found = _parse_probe(probe)
    if not home.startswith("/"):
        raise TransportError(f"cannot find the home directory on {transport.label}")
    notes: list[str] = []
    memory = box_id(transport)
    remembered = None if python else config.remembered(memory).get("python")
    chosen = choose(found, transport.label, forced=python,
                    remembered=remembered if isinstance(remembered, str) else None,
                    notes=notes)
    say(f"using {chosen.describe()}")
    base = f"{home}/{CACHE_DIR}/{dir_name}"

    uploaded = False
    if marker == digest:
        say(f"trainer {trainer.version.__version__} ({digest}) is already on the box")
    else:
        files = package_files()
        say(f"uploading trainer {trainer.version.__version__} ({len(files)} files)")
        _upload(transport, files, base, digest)
        uploaded = True
    facts = {"trainer": dir_name} if python or chosen.path == remembered else \
        {"trainer": dir_name, "python": chosen.path}
    if config.remembered(memory).get("trainer") != dir_name or len(facts) > 1:
        try:
            config.remember(memory, **facts)
        except OSError as exc:  # a read-only laptop home: choose again next time
            notes.append(f"could not remember the python choice: {exc.strerror or exc}")

    if install:
        _ensure_needs(transport, chosen, base, failed, notes, say)
    q = shlex.quote
    transport.trainer_prefix = (f"PYTHONPATH={q(base)} {q(chosen.path)} "
                                f"{q(f'{base}/{LAUNCHER_NAME}')}")
    result = BootstrapResult(python=chosen.path, trainer_dir=base, preflight=None,
                             notes=notes, python_version=chosen.version, uploaded=uploaded,
                             torch=chosen.torch)
    if preflight:
        result.preflight = _preflight(transport, notes, say)
    return result


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


def _ensure_needs(transport: Transport, py: BoxPython, base: str, failed: set[str],
                  notes: list[str], say: StepProgress) -> None:
    """Install the missing needs into ``base/deps-X.Y`` with ``pip --target``; a failure
    is one note, and a marker beside the directory keeps later connections from
    retrying (and repeating it) for this trainer version. ``failed`` holds the markers
    the probe found (``deps-X.Y.failed``; ``deps-X.Y.ok-KEY``: nothing was missing for
    the python ``python_key`` names)."""
    deps = f"{base}/deps-{'.'.join(py.version.split('.')[:2])}"
    if f"{deps.rsplit('/', 1)[-1]}.ok-{python_key(py.path)}" in failed:
        return  # this python had them all before, for this version (the box's cache)
    q = shlex.quote
    names = sorted(NEEDS)
    check = (f"{q(py.path)} -c 'import hashlib, importlib.util as u, json, sys; "
             "sys.path.append(sys.argv[1]); "
             "m = [m for m in sys.argv[2:] if u.find_spec(m) is None]; "
             "k = hashlib.sha256(sys.executable.encode()).hexdigest()[:12]; "
             "m or open(sys.argv[1] + \".ok-\" + k, \"w\").close(); print(json.dumps(m))' "
             f"{q(deps)} " + " ".join(names))
    res = transport.run(check, timeout=60.0)
    try:
        missing = json.loads(res.stdout.decode())
    except ValueError:
        notes.append(f"could not check for {', '.join(names)}: {_last_line(res.stderr)}")
        return
    if not missing or f"{deps.rsplit('/', 1)[-1]}.failed" in failed:
        return
    _pip_install(transport, py.path, deps, missing, notes, say)


def python_key(path: str) -> str:
    """What names a python in the box's needs cache (``deps-X.Y.ok-KEY``); the box side
    computes the same from ``sys.executable`` (``trainer.watch.boxinfo``)."""
    return hashlib.sha256(path.encode()).hexdigest()[:12]


def install_needs(transport: Transport, box: dict[str, Any], notes: list[str],
                  say: StepProgress) -> None:
    """Install what the follower's ``hello`` said this install lacks (``box``: its
    ``python``, ``python_version``, ``dir``, ``missing``, ``failed``), unless an install
    failed before for this version; the needs check itself ran on the box."""
    missing = [m for m in box.get("missing") or () if m in NEEDS]
    version = str(box.get("python_version") or "")
    if not missing or box.get("failed") or not version.count("."):
        return
    deps = f"{box['dir']}/deps-{'.'.join(version.split('.')[:2])}"
    _pip_install(transport, str(box["python"]), deps, missing, notes, say)


def _pip_install(transport: Transport, python: str, deps: str, missing: list[str],
                 notes: list[str], say: StepProgress) -> None:
    q = shlex.quote
    pkgs = [NEEDS[m] for m in missing]
    say(f"installing {', '.join(pkgs)} into {deps} (pip --target)")
    cmd = (f"{q(python)} -m pip install --target {q(deps)} --disable-pip-version-check "
           "--no-input -q --retries 1 --timeout 20 " + " ".join(q(p) for p in pkgs))
    try:
        res = transport.run(cmd, timeout=PIP_TIMEOUT)
        why = "" if res.ok else _pip_failure(res.stderr)
    except TransportError as exc:
        why = str(exc)
    if not why:
        notes.append(f"installed {', '.join(pkgs)} into {deps} (pip --target)")
        return
    note = (f"could not install {', '.join(pkgs)} ({why}); GPU stats and Hub pushes will "
            f"not work until they are installed for {python}")
    notes.append(note)
    transport.run(f"printf '%s\\n' {q(note)} > {q(deps + '.failed')}", timeout=60.0)


def _pip_failure(stderr: bytes) -> str:
    """Why pip failed, in a few words."""
    text = stderr.decode("utf-8", errors="replace")
    if "No module named pip" in text:
        return "this python has no pip"
    if any(m in text for m in ("No matching distribution", "NewConnectionError",
                               "Temporary failure in name resolution", "Network is unreachable")):
        return "no network to the package index"
    return f"pip: {_last_line(stderr)}"


def _preflight(transport: Transport, notes: list[str], say: StepProgress) -> dict | None:
    say("running preflight on the box")
    try:
        answer = ask_tool(transport, ["preflight", "--json"], timeout=PREFLIGHT_TIMEOUT)
    except TransportError as exc:
        notes.append(f"preflight did not finish: {exc}")
        return None
    report = answer.report
    if report is None:
        notes.append(f"preflight failed (exit {answer.rc}): "
                     f"{answer.why[:300] or 'no message'}")
        return None
    if not answer.ok:
        failed = ", ".join(str(f) for f in report.get("failed") or []) or f"exit {answer.rc}"
        notes.append(f"preflight found a problem: {failed}")
    return report


def _last_line(data: bytes) -> str:
    lines = [ln.strip() for ln in data.decode("utf-8", errors="replace").splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else "no message"
