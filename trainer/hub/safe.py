"""``python3 -m trainer safe [RUN_DIR ...] [--project DIR ...] [--registry] --json``: the
weight files on this box, and what the Hub ledger says about the ones that matter.

A destroy loses the whole disk, so the answer covers every run named, every run of the
projects named, and with ``--registry`` every run launched on this box through gpurent
(``~/.cache/gpurent/runs.txt``, appended at each launch). For each run it lists every
``*.pt`` under ``weights/`` and marks the ones that must be off the box before a destroy
(``required``): ``best.pt``, and ``last.pt`` when it is newer than ``best.pt`` or there is
no ``best.pt``; a run with neither needs its newest ``*.pt``. A run that has ended (a final
state in its status.json) and is pushed to the Hub (its ledger has entries) needs both
``best.pt`` and ``last.pt``, and they count only as its final push holds them: a push
of that very end's status (``final_commits``; the push watcher's last one, our
trainer's, or ``trainer push``'s), whose entries for them are the only ones given. Until
that push is in the ledger the Hub's copy of the run is an earlier one (``running`` at
an older epoch, its history short): each required file says so in ``pending``. Required
files are hashed (sha256; an unchanged file is known by its size, inode, mtime and ctime,
from the ledger or the cache under the box's cache directory,
``trainer.engines.run_cache``) and given the ledger entries (``RUN/hub.json``, or beside a
LibreYOLO run) that hold that content, newest first.

This command only reads the box. Whether a ledger entry is true is asked of the Hub by
the caller: the laptop's destroy check, or the guard (``verified_safety``).

Output (one JSON object)::

    {"schema": "gpurent.safe/2", "runs": [{"run_dir": "/abs", "sources": ["run"|"project"|
     "registry"], "best_epoch": int | None, "error": str | None, "files": [{"file":
     "best.pt", "path": "/abs/weights/best.pt", "size", "mtime_ns", "required": bool,
     "sha256": str (required files), "hub": [ledger entries], "pending": str (a required
     file of an ended run whose final push does not hold it yet)}]}]}

With ``--keep NAME`` (the fleet's folded check: ``--registry`` alone) the answer is also
kept in the box's cache directory (``KEPT_FILE``: ``CKSUM NAME``, then the JSON), so that
the caller's shell can print it again without python while nothing it depends on has
changed. The stamp is taken before the inventory by ``STAMP_LINES``, the one shell
snippet that both this command and the caller run (``sh``, then ``cksum``): ``stat -L``
of the registry, and for each registered run directory of it, of the files
``describe_run`` reads (``status.json``, ``hub.json``, ``train_config.yaml``), of
``weights/`` and each file in it, and of the LibreYOLO ledger beside the run. A change
during the inventory leaves a stamp that no longer matches. The answer is kept only when
every stamp line has the expected shape (GNU ``stat``'s ``%.9Y``: a ``stat`` that prints
something else must never make a stamp that hits) and names every run and file the answer
holds.

Standard library only. A RUN_DIR that is not a run directory (no status.json,
metrics.jsonl, results.csv or launch.pid: a project folder, ``weights/``) is refused
(exit 2, one line), as is a ``--project`` that is not a directory.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Optional

from trainer import engines, runfiles
from trainer.health import local_pid_alive
from trainer.hub.client import Verified
from trainer.hub.ledger import (
    LedgerError,
    file_identity,
    read_ledger,
    sha256_file,
    status_mark,
)

SCHEMA = "gpurent.safe/2"
#: The kind of cache (``trainer.engines.run_cache``) that remembers hashes by identity.
HASH_CACHE = "hashes"
#: Files whose presence makes a directory a run directory.
RUN_MARKERS = (runfiles.STATUS_FILE, runfiles.METRICS_FILE, runfiles.RESULTS_FILE,
               runfiles.LAUNCH_PID_FILE)
_IDENTITY_KEYS = ("size", "inode", "mtime_ns", "ctime_ns")
#: The states of a status.json whose run is over (its process wrote its end).
ENDED_STATES = ("completed", "failed", "stopped")
#: The kept answer of ``--keep``, in the box's cache directory.
KEPT_FILE = "safe-registry.kept"
#: Shell (``sh -c``) that prints what a kept answer depends on: ``stat -L`` lines (``PATH
#: SIZE INODE MTIME CTIME``, one ``stat`` for all) of the registry, and of each registered
#: run directory that exists (resolved as ``find_runs`` resolves it: ``cd -P``, no fork)
#: and the files ``describe_run`` reads there.
STAMP_LINES = (
    f"LC_ALL=C; export LC_ALL; r={runfiles.REGISTRY_SHELL}; set -- \"$r\"; "
    'while read -r p || [ -n "$p" ]; do case $p in /*) ;; *) continue ;; esac; '
    'cd -P -- "$p" 2>/dev/null || continue; d=$PWD; '
    f'set -- "$@" "$d" "$d/{runfiles.STATUS_FILE}" "$d/{runfiles.HUB_FILE}" '
    f'"$d/{engines.TRAIN_CONFIG_FILE}" "$d/{runfiles.WEIGHTS_DIR}" '
    f'"$d/{runfiles.WEIGHTS_DIR}"/* '
    f'"${{d%/*}}/{engines.BESIDE_DIR}/${{d##*/}}.{runfiles.HUB_FILE}"; '
    """done < "$r"; stat -L -c '%n %s %i %.9Y %.9Z' -- "$@\"""")
_STAMP_LINE = re.compile(r"(.+) \d+ \d+ \d+\.\d{9} \d+\.\d{9}")
_KEEP_NAME = re.compile(r"[A-Za-z0-9._+-]+")
#: Seconds the stamp's shell may take before the answer is not kept.
STAMP_TIMEOUT = 20.0

#: ``verify(ledger_entries, sha256, size) -> Verified(confirmed, where or why, failure)``.
Verify = Callable[[Sequence[dict[str, Any]], str, Optional[int]], Verified]


class NotARun(ValueError):
    """A path named as a run is not a run directory; the message is one line."""


def is_run_dir(path: Path) -> bool:
    """Whether ``path`` holds a run (one of ``RUN_MARKERS``)."""
    return path.is_dir() and any((path / name).is_file() for name in RUN_MARKERS)


def registry_path() -> Path:
    """The box's list of runs launched through gpurent."""
    override = os.environ.get(runfiles.RUN_REGISTRY_ENV)
    return Path(override) if override else Path.home() / runfiles.RUN_REGISTRY


def registered_runs() -> list[Path]:
    """The registered run directories that still exist, oldest first, once each."""
    try:
        lines = registry_path().read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    return [Path(p) for p in dict.fromkeys(ln.strip() for ln in lines)
            if p.startswith("/") and Path(p).is_dir()]


def find_runs(run_dirs: Iterable[str | os.PathLike[str]] = (),
              projects: Iterable[str | os.PathLike[str]] = (),
              registry: bool = False) -> dict[Path, list[str]]:
    """Every run to look at (absolute, symlinks resolved) and why it is included.

    Raises ``NotARun`` for a named run that is not a run directory, or a project that
    is not a directory."""
    found: dict[Path, list[str]] = {}

    def add(path: Path, source: str) -> None:
        sources = found.setdefault(path.resolve(), [])
        if source not in sources:
            sources.append(source)

    for item in run_dirs:
        path = Path(item)
        if not is_run_dir(path):
            what = "does not exist" if not path.exists() else "is not a run directory"
            raise NotARun(f"{path} {what} (no {', '.join(RUN_MARKERS)}): name the run "
                          "itself, not its project or weights/ folder")
        add(path, "run")
    for item in projects:
        project = Path(item)
        if not project.is_dir():
            raise NotARun(f"project {project} is not a directory")
        for child in sorted(project.iterdir()):
            if is_run_dir(child):
                add(child, "project")
    if registry:
        for path in registered_runs():
            add(path, "registry")
    return found


def weight_files(run_dir: Path) -> list[tuple[str, os.stat_result]]:
    """``(name, stat)`` of every ``*.pt`` file in ``RUN/weights/``, by name."""
    out = []
    weights = run_dir / runfiles.WEIGHTS_DIR
    with contextlib.suppress(OSError):
        for path in sorted(weights.iterdir()):
            if path.name.endswith(".pt") and path.is_file():
                with contextlib.suppress(OSError):
                    out.append((path.name, path.stat()))
    return out


def required_names(files: Sequence[tuple[str, os.stat_result]],
                   final: bool = False) -> set[str]:
    """The files that must be off the box: ``best.pt``; ``last.pt`` when newer than
    ``best.pt`` (or there is none), or always with ``final`` (an ended run whose final
    push must hold both); without either, the newest file."""
    stats = dict(files)
    best, last = stats.get("best.pt"), stats.get("last.pt")
    need = set()
    if best is not None:
        need.add("best.pt")
    if last is not None and (final or best is None or last.st_mtime_ns > best.st_mtime_ns):
        need.add("last.pt")
    if not need and files:
        need.add(max(files, key=lambda item: item[1].st_mtime_ns)[0])
    return need


def _same_file(record: Any, identity: dict[str, int]) -> bool:
    return isinstance(record, dict) and all(record.get(k) == identity[k]
                                            for k in _IDENTITY_KEYS)


def file_sha256(run_dir: Path, name: str, entries: Sequence[dict[str, Any]]) -> str:
    """The sha256 of ``weights/NAME``, hashed only when neither the ledger nor the cache
    knows the file by its identity (``file_identity``: size, inode, mtime and ctime; a
    record without a ctime, from an older version, never matches)."""
    path = run_dir / runfiles.WEIGHTS_DIR / name
    identity = file_identity(path)
    for entry in reversed(entries):
        if entry.get("file") == name and isinstance(entry.get("sha256"), str) \
                and _same_file(entry, identity):
            return str(entry["sha256"])
    cache_path = engines.run_cache(run_dir, HASH_CACHE)
    cache: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(cache_path.read_text(encoding="utf-8"))
        if isinstance(loaded, dict) and isinstance(loaded.get("files"), dict):
            cache = loaded["files"]
    if _same_file(cache.get(name), identity) and isinstance(cache[name].get("sha256"), str):
        return str(cache[name]["sha256"])
    digest = sha256_file(path)
    if file_identity(path) == identity:  # not replaced while we read it
        cache[name] = {**identity, "sha256": digest}
        with contextlib.suppress(OSError):
            runfiles.atomic_write_json(cache_path, {"files": cache})
    return digest


def final_commits(status: runfiles.StatusRead,
                  entries: Sequence[dict[str, Any]]) -> set[str]:
    """The commits of the run's final push (one per repository it went to): those whose
    ``status.json`` was this one (the same state, pid and epoch count,
    ``ledger.status_mark``; our trainer writes its status once more after that push, with
    the push's outcome). Empty while there is none."""
    want = status_mark(status.fields)
    return {str(e["commit"]) for e in entries
            if e.get("file") == runfiles.STATUS_FILE and e.get("status") == want
            and isinstance(e.get("commit"), str)}


def describe_run(run_dir: Path, sources: list[str]) -> dict[str, Any]:
    """One run's entry of the answer (see the module docstring). Every file it reads is
    stamped by ``STAMP_LINES``: one it starts to read must be added there."""
    status = runfiles.read_status(run_dir)
    run: dict[str, Any] = {"run_dir": str(run_dir), "sources": sources, "error": None,
                           "best_epoch": status.get("best_epoch"), "files": []}
    try:
        entries = read_ledger(run_dir)
    except LedgerError as exc:
        entries, run["error"] = [], str(exc)
    ended = status.get("state") in ENDED_STATES and bool(entries)
    final = final_commits(status, entries) if ended else set()
    found = weight_files(run_dir)
    need = required_names(found, final=ended)
    for name, st in found:
        item: dict[str, Any] = {"file": name, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                                "path": str(run_dir / runfiles.WEIGHTS_DIR / name),
                                "required": name in need}
        if name in need:
            try:
                sha = file_sha256(run_dir, name, entries)
            except OSError as exc:  # replaced or removed while we looked: unknown
                item["error"] = f"cannot read it: {exc.strerror or exc}"
            else:
                item["sha256"] = sha
                item["hub"] = [e for e in reversed(entries)
                               if e.get("file") == name and e.get("sha256") == sha
                               and (not ended or e.get("commit") in final)]
                if ended and not final:
                    item["pending"] = (f"the run ended ({status.get('state')}) but its "
                                       "final push (that status, its history and weights) "
                                       "is not in the Hub ledger yet: the Hub's copy of the "
                                       "run is an earlier one")
                elif ended and not item["hub"]:
                    commits = ", ".join(sorted(c[:12] for c in final))
                    item["pending"] = (
                        f"not in the run's final push ({commits}): an earlier copy is on "
                        "the Hub" if any(e.get("file") == name for e in entries)
                        else "never pushed")
        run["files"].append(item)
    return run


def inventory(run_dirs: Iterable[str | os.PathLike[str]] = (),
              projects: Iterable[str | os.PathLike[str]] = (),
              registry: bool = False) -> dict[str, Any]:
    """The ``--json`` answer. Raises ``NotARun`` (see ``find_runs``)."""
    runs = find_runs(run_dirs, projects, registry)
    return {"schema": SCHEMA,
            "runs": [describe_run(path, sources) for path, sources in runs.items()]}


def stamp_lines() -> bytes | None:
    """What ``STAMP_LINES`` prints now (``None`` when it cannot run in time)."""
    try:
        return subprocess.run(["sh", "-c", STAMP_LINES], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                              timeout=STAMP_TIMEOUT).stdout
    except (OSError, subprocess.SubprocessError):
        return None


def stamp_covers(lines: bytes, answer: dict[str, Any]) -> bool:
    """Whether stamp ``lines`` are GNU ``stat`` lines with nanosecond times (at least the
    registry's) that name every run and weight file of ``answer``."""
    rows = lines.decode("utf-8", "surrogateescape").split("\n")
    if len(rows) < 2 or rows[-1]:
        return False
    named = set()
    for row in rows[:-1]:
        match = _STAMP_LINE.fullmatch(row)
        if match is None:
            return False
        named.add(match.group(1))
    return all(run["run_dir"] in named and all(f["path"] in named for f in run["files"])
               for run in answer["runs"])


def keep_answer(name: str, lines: bytes, answer: dict[str, Any]) -> None:
    """Keep ``answer`` under the ``cksum`` of its stamp ``lines`` and ``name`` (see the
    module docstring), unless the stamp does not cover it."""
    if not stamp_covers(lines, answer):
        return
    try:
        summed = subprocess.run(["cksum"], input=lines, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, timeout=STAMP_TIMEOUT,
                                check=True).stdout.decode("ascii").rstrip("\n")
    except (OSError, subprocess.SubprocessError, UnicodeDecodeError):
        return
    if re.fullmatch(r"\d+ \d+", summed):
        with contextlib.suppress(OSError):
            runfiles.atomic_write_bytes(engines.cache_dir() / KEPT_FILE, (
                f"{summed} {name}\n{runfiles.dumps(answer)}\n").encode(errors="surrogateescape"))


def verified_safety(run_dir: Path, verify: Verify | None = None,
                    repos: Sequence[str] = ()) -> dict[str, Any]:
    """``{"safe": bool, "reason": str}`` for every run the guard's box knows (the run, its
    project, the registry): safe when each required file's Hub ledger entry for one of
    ``repos`` (the user's, given by the laptop) is confirmed by the Hub
    (``trainer.hub.client.verify_pushed``, with the box's token if any)."""
    if verify is None:
        from trainer.hub.client import read_token, verify_pushed

        token = read_token(use_stdin=False)

        def verify(entries: Sequence[dict[str, Any]], sha: str,
                   size: int | None) -> Verified:
            return verify_pushed(entries, sha, size, repos=repos, token=token)

    answer = inventory([run_dir], [run_dir.parent], registry=True)
    unsafe: list[str] = []
    safe: list[str] = []
    count = 0
    for run in answer["runs"]:
        for item in run["files"]:
            count += 1
            if not item["required"]:
                continue
            if "sha256" not in item:
                unsafe.append(f"{item['path']} ({item.get('error')})")
                continue
            if item.get("pending"):
                unsafe.append(f"{item['path']} ({item['pending']})")
                continue
            said = verify(item["hub"], item["sha256"], item["size"])
            (safe if said.ok else unsafe).append(f"{item['path']} ({said.said})")
    if unsafe:
        return {"safe": False, "reason": "not safe: " + "; ".join(unsafe)}
    if not count:
        return {"safe": True, "reason": "no weights yet: nothing to lose"}
    return {"safe": True, "reason": "on the Hub: " + "; ".join(safe)}


def push_in_flight(run_dir: Path) -> bool:
    """Whether a push of this run is under way or still to come: a snapshot directory of
    ``trainer.hub.push`` whose process is alive (a killed push leaves a stale one), or a
    live push watcher of the run (``trainer push --watch``: its final push follows the
    end of the run)."""
    from trainer.hub.autopush import live_watchers
    from trainer.hub.push import SNAPSHOT_PREFIX, SNAPSHOT_RE, snapshot_parent

    for entry in snapshot_parent(Path(run_dir)).glob(f"{SNAPSHOT_PREFIX}*"):
        match = SNAPSHOT_RE.match(entry.name)
        if match and entry.is_dir() and local_pid_alive(int(match.group(1))):
            return True
    return bool(live_watchers(Path(run_dir)))


def main(argv: list[str]) -> int:
    """Run ``trainer safe``; exit 0 with an answer, 2 for a RUN_DIR that is not a run."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer safe",
        description="List the weight files of the runs on this box, which of them must be "
        "off the box before a destroy, their sha256 and the Hub ledger entries holding "
        "that content (the Hub itself is asked by the caller).")
    p.add_argument("run_dirs", nargs="*", metavar="RUN_DIR")
    p.add_argument("--project", action="append", default=[], metavar="DIR",
                   help="also every run directly under DIR (repeatable)")
    p.add_argument("--registry", action="store_true",
                   help="also every run launched here through gpurent")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--keep", metavar="NAME",
                   help="with --registry alone: also keep the answer, marked NAME, in the "
                   "box's cache directory under a stamp of what it depends on")
    args = p.parse_args(argv)
    if args.keep is not None and (args.run_dirs or args.project or not args.registry
                                  or not _KEEP_NAME.fullmatch(args.keep)):
        print("trainer safe: --keep goes with --registry alone, its NAME made of letters, "
              "digits and . _ + -", file=sys.stderr)
        return 2
    lines = stamp_lines() if args.keep else None  # before the inventory: see the docstring
    try:
        answer = inventory(args.run_dirs, args.project, args.registry)
    except (NotARun, OSError) as exc:
        print(f"trainer safe: {exc}", file=sys.stderr)
        return 2
    if args.keep and lines is not None:
        keep_answer(args.keep, lines, answer)
    if args.json:
        print(runfiles.dumps(answer))
        return 0
    for run in answer["runs"]:
        for item in run["files"]:
            mark = "must leave" if item["required"] else "also here"
            pushed = "in the Hub ledger" if item.get("hub") else "not in the Hub ledger"
            print(f"{mark}: {item['path']} ({item['size']} bytes"
                  + (f", {pushed})" if item["required"] else ")"))
    return 0
