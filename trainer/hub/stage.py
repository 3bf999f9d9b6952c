"""``python3 -m trainer stage REPO FILE --dest DIR``: fetch a dataset tar from a Hub
dataset repository and extract it safely, once.

1. Ask the Hub for the file's metadata (one HEAD): when DEST already holds this archive
   (a marker records its sha256 and ETag), do nothing more.
2. ``hf_hub_download`` into HF_HOME's cache: resumable (an interrupted download continues
   from its ``.incomplete`` file), with a progress bar on stderr.
3. Hash the archive (sha256, 1 MiB at a time) and check it against the Hub's LFS ETag.
4. Read every member header first and refuse the whole archive, before writing anything,
   when one member has an absolute path, a ``..`` component, a link (or a chain of links)
   leading outside DEST, lies under a link, or is a device/FIFO; cap the member count and
   the unpacked size; check DEST's free disk against it (``trainer.hub.untar``).
5. Extract through a private staging directory moved into place only once the whole
   archive is written (never with tarfile's own extraction, whose filter differs by
   Python version), then write the marker and print the data.yaml found.

With ``--events`` the steps and the download's progress are JSON lines on stdout
(``{"event": "progress", "text": ...}``) before the report, for a laptop that streams
them (``gpurent stage``): a box's exec has no terminal, so no progress bar shows there.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from trainer import runfiles
from trainer.hub.client import HubError, check_repo_id, describe_error, import_hub, read_token
from trainer.hub.ledger import sha256_file
from trainer.hub.untar import (
    MAX_MEMBERS,
    MAX_TOTAL_BYTES,
    ArchivePlan,
    UnsafeArchive,
    extract_planned,
    nearest_existing,
    plan_archive,
)
from trainer.text import clean_text, one_line

#: Head-room kept free on DEST's disk beyond the unpacked size.
DISK_MARGIN = 256 * 1024 * 1024
MAX_YAML_DEPTH = 4
#: Seconds between two lines of a download's progress (``--events``).
PROGRESS_EVERY = 5.0

#: Where a step of the staging is told, in words (``--events``).
Say = Callable[[str], None]


def _silent(_text: str) -> None:
    pass


def free_bytes(path: Path) -> int:
    """Free bytes on the filesystem holding ``path`` (or its nearest existing parent)."""
    return shutil.disk_usage(nearest_existing(path)).free


def _gb(n: float) -> str:
    return f"{n / 1e9:.2f} GB" if n >= 1e8 else f"{n / 1e6:.1f} MB"


def extract_archive(archive: Path, dest: Path, *, max_members: int = MAX_MEMBERS,
                    max_bytes: int = MAX_TOTAL_BYTES, say: Say = _silent) -> ArchivePlan:
    """Validate, check disk, then extract ``archive`` into ``dest``. Raises
    ``UnsafeArchive`` or ``OSError``/``tarfile.TarError``; nothing is left behind then."""
    with tarfile.open(archive, "r:*") as tar:
        plan = plan_archive(tar, max_members=max_members, max_bytes=max_bytes)
        need, free = plan.bytes + DISK_MARGIN, free_bytes(dest)
        if free < need:
            raise OSError(f"not enough disk in {dest}: the archive unpacks to "
                          f"{_gb(plan.bytes)}, {_gb(free)} free")
        say(f"extracting {plan.files} files ({_gb(plan.bytes)}) into {dest}")
        extract_planned(tar, plan, dest)
    return plan


def partial_bytes(blobs: Path) -> int:
    """Bytes held by the downloads under way in a repository's cache folder: the
    client writes each into ``BLOB.incomplete`` beside the blob it becomes."""
    total = 0
    for path in blobs.glob("*.incomplete"):
        try:
            total += path.stat().st_size
        except OSError:  # renamed into its blob meanwhile
            continue
    return total


class DownloadWatch:
    """While a download runs (``with``), says every ``every`` seconds how far it got,
    when that changed: ``downloaded 540.0 MB of 1.20 GB (45%)``."""

    def __init__(self, blobs: Path, total: int | None, say: Say,
                 every: float = PROGRESS_EVERY) -> None:
        self.blobs, self.total, self.say, self.every = blobs, total, say, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="download progress",
                                        daemon=True)

    def __enter__(self) -> DownloadWatch:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _watch(self) -> None:
        said = 0
        while not self._stop.wait(self.every):
            done = partial_bytes(self.blobs)
            if done != said:
                said = done
                of = f" of {_gb(self.total)} ({done * 100 // self.total}%)" \
                    if self.total else ""
                self.say(f"downloaded {_gb(done)}{of}")


def find_data_yaml(dest: Path) -> Path | None:
    """The shallowest ``data.yaml`` under ``dest`` (then by name), or ``None``."""
    found: list[tuple[int, str]] = []
    base_depth = len(dest.parts)
    for current, dirs, files in os.walk(dest):
        depth = len(Path(current).parts) - base_depth
        if depth >= MAX_YAML_DEPTH:
            dirs.clear()
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if "data.yaml" in files:
            found.append((depth, os.path.join(current, "data.yaml")))
    return Path(min(found)[1]) if found else None


def marker_path(dest: Path, repo: str, filename: str) -> Path:
    """The marker recording that ``repo/filename`` is extracted in ``dest``."""
    key = hashlib.sha1(f"{repo}/{filename}".encode()).hexdigest()[:12]
    return dest / f".gpurent-stage-{key}.json"


def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) and value.get("sha256") else None


def _lfs_sha256(etag: str | None) -> str | None:
    """The Hub's ETag of an LFS file is its sha256 (64 hex digits); else ``None``."""
    return etag if etag and re.fullmatch(r"[0-9a-f]{64}", etag) else None


def stage(repo: str, filename: str, dest: Path, *, revision: str | None = None,
          token: str | None = None, endpoint: str | None = None,
          progress_bars: bool = True, max_members: int = MAX_MEMBERS,
          max_bytes: int = MAX_TOTAL_BYTES, say: Say = _silent) -> dict[str, Any]:
    """Download and extract once; return the ``--json`` object; ``say`` is told each
    step and the download's progress. Raises ``HubError``, ``UnsafeArchive``, ``OSError``
    or ``tarfile.TarError``."""
    check_repo_id(repo)
    hub = import_hub(progress_bars)
    marker = marker_path(dest, repo, filename)
    previous = _read_marker(marker)
    try:
        url = hub.hf_hub_url(repo, filename, repo_type="dataset", revision=revision,
                             endpoint=endpoint)
        meta = hub.get_hf_file_metadata(url, token=token, endpoint=endpoint)
    except Exception as exc:  # the client raises many types; all become one line
        why = describe_error(exc, endpoint)
        raise HubError(f"cannot find {filename} in dataset {repo}: {why}") from exc
    expected = _lfs_sha256(meta.etag)
    if previous is not None and (previous.get("etag") == meta.etag
                                 or (expected and previous["sha256"] == expected)):
        return _result(previous, dest, staged=False)
    free = free_bytes(Path(hub.constants.HF_HUB_CACHE))
    if meta.size is not None and free < meta.size:
        raise OSError(f"not enough disk for the download in HF_HOME: {_gb(meta.size)} "
                      f"needed, {_gb(free)} free")
    size = f" ({_gb(meta.size)})" if meta.size is not None else ""
    say(f"downloading {filename} from {repo}{size}")
    # The client's cache folder of the repository (``repo_folder_name``).
    blobs = Path(hub.constants.HF_HUB_CACHE) / f"datasets--{repo.replace('/', '--')}" / "blobs"
    try:
        with DownloadWatch(blobs, meta.size, say):
            archive = Path(hub.hf_hub_download(repo, filename, repo_type="dataset",
                                               revision=revision, token=token,
                                               endpoint=endpoint))
    except Exception as exc:
        why = describe_error(exc, endpoint)
        raise HubError(f"download of {filename} from {repo} failed: {why}") from exc
    say(f"checking the sha256 of {filename}")
    sha = sha256_file(archive)
    if expected and sha != expected:
        raise HubError(f"{archive} has sha256 {sha[:12]}…, the Hub says {expected[:12]}…; "
                       "delete it from the cache and stage again")
    plan = extract_archive(archive, dest, max_members=max_members, max_bytes=max_bytes,
                           say=say)
    data_yaml = find_data_yaml(dest)
    record = {"repo": repo, "file": filename, "revision": revision,
              "commit": meta.commit_hash, "etag": meta.etag, "sha256": sha,
              "archive": str(archive), "files": plan.files, "bytes": plan.bytes,
              "data_yaml": str(data_yaml) if data_yaml else None,
              "time": runfiles.utc_now_iso()}
    runfiles.atomic_write_json(marker, record)
    return _result(record, dest, staged=True)


def _result(record: dict[str, Any], dest: Path, *, staged: bool) -> dict[str, Any]:
    data_yaml = record.get("data_yaml")
    if data_yaml and not Path(data_yaml).is_file():
        found = find_data_yaml(dest)
        data_yaml = str(found) if found else None
    return {"ok": True, "staged": staged, "dest": str(dest), **{
        k: record.get(k) for k in ("repo", "file", "revision", "commit", "sha256",
                                   "archive", "files", "bytes")}, "data_yaml": data_yaml}


def _event(text: str) -> None:
    print(json.dumps({"event": "progress", "text": text}), flush=True)


def main(argv: list[str]) -> int:
    """Run ``trainer stage``; exit 0 staged (or already), 1 failed, 2 bad input. The
    ``--json`` failure says which ``kind``: ``input``, ``hub`` (refused, missing, the
    download failed), ``archive`` (refused or unreadable) or ``disk``."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer stage",
        description="Download a tar from a Hub dataset repository into HF_HOME's cache "
        "(resumable) and extract it safely into DEST, once.",
    )
    p.add_argument("repo", metavar="REPO", help="dataset repository, ORG/NAME")
    p.add_argument("file", metavar="FILE", help="the archive's path in the repository")
    p.add_argument("--dest", required=True, metavar="DIR")
    p.add_argument("--revision", metavar="R", help="branch, tag or commit (default main)")
    p.add_argument("--token-stdin", action="store_true",
                   help="read a token for a private repository from stdin")
    p.add_argument("--max-members", type=int, default=MAX_MEMBERS, metavar="N",
                   help=f"refuse an archive of more members (default {MAX_MEMBERS})")
    p.add_argument("--max-gb", type=float, default=MAX_TOTAL_BYTES / 1e9, metavar="GB",
                   help="refuse an archive whose files unpack to more (default "
                   f"{MAX_TOTAL_BYTES / 1e9:.0f})")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--events", action="store_true",
                   help="print each step and the download's progress as JSON lines "
                   '({"event": "progress", "text": ...}) before the --json report')
    args = p.parse_args(argv)

    def fail(message: str, code: int, kind: str = "input") -> int:
        print(f"trainer stage: {one_line(message, 1000)}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": message, "kind": kind}))
        return code

    try:
        check_repo_id(args.repo)
    except ValueError as exc:
        return fail(str(exc), 2)
    dest = Path(args.dest).expanduser()
    if dest.exists() and not dest.is_dir():
        return fail(f"{dest} exists and is not a directory", 2)
    token = read_token(args.token_stdin) if args.token_stdin else None
    try:
        result = stage(args.repo, args.file, dest, revision=args.revision, token=token,
                       progress_bars=not (args.json or args.events),
                       max_members=args.max_members, max_bytes=int(args.max_gb * 1e9),
                       say=_event if args.events else _silent)
    except UnsafeArchive as exc:
        return fail(f"refusing {args.file}: {exc}; nothing was extracted", 1, "archive")
    except (tarfile.TarError, EOFError) as exc:
        return fail(describe_error(exc), 1, "archive")
    except HubError as exc:
        return fail(describe_error(exc), 1, "hub")
    except OSError as exc:  # the box's disk: not enough room, or a write failed
        return fail(describe_error(exc), 1, "disk")
    if args.json:
        print(runfiles.dumps(result))
        return 0
    verb = "staged" if result["staged"] else "already staged"
    print(clean_text(f"{verb} {result['repo']}/{result['file']} (sha256 "
                     f"{result['sha256'][:12]}…) in {dest}: {result['files']} files, "
                     f"{_gb(result['bytes'] or 0)}"))
    if result["data_yaml"]:
        print(clean_text(f"data.yaml: {result['data_yaml']}"))
        text = Path(result["data_yaml"]).read_text(encoding="utf-8", errors="replace")
        print(clean_text(text[:4000], keep_newlines=True).rstrip())  # the dataset's text
    else:
        print("no data.yaml found in the archive")
    return 0
