"""``python3 -m trainer log RUN_DIR``: the parts of ``train.log`` the follower did not
send, and search over the whole file, on the box (the laptop gets matches, not the file).

The follower starts a fresh watch at the log's tail (``tail_start``); scrolling up asks
for the bytes before the first one shown (``--before OFFSET``), cut at a line start.
``--search TEXT`` scans the whole file in large blocks and returns the matching lines
(case-insensitive for ASCII, as the log pane's search) with their line numbers and
offsets. Standard library only; the document is ``gpurent.log/1`` in
``docs/SCHEMAS.md``.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from pathlib import Path
from typing import Any

from trainer import runfiles

SCHEMA = "gpurent.log/1"
#: Bytes asked for by default when scrolling up.
BEFORE_BYTES = 256 * 1024
#: Most bytes one ``--before`` answer carries.
MAX_BEFORE_BYTES = 4 << 20
#: Matching lines returned at most (the total is still counted).
MAX_MATCHES = 1000
#: Characters of a matching line returned.
MATCH_TEXT = 500
SEARCH_BLOCK = 4 << 20


def tail_start(path: str | os.PathLike[str], nbytes: int) -> int:
    """The offset at which the last ``nbytes`` of the file begin, moved forward to the
    start of a line (0 when the file is that short or missing)."""
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            return line_start_after(fh, size - nbytes) if size > nbytes else 0
    except OSError:
        return 0


def line_start_after(fh: Any, offset: int) -> int:
    """The first line start at or after ``offset`` of the open file ``fh`` (``offset``
    itself when no newline follows within 64 KiB: a runaway line is cut there)."""
    if offset <= 0:
        return 0
    fh.seek(offset - 1)
    window = fh.read(64 * 1024 + 1)
    nl = window.find(b"\n")
    return offset if nl < 0 else offset + nl


def read_before(path: Path, end: int, nbytes: int) -> tuple[int, bytes, int, int]:
    """``(start, bytes, inode, size)``: up to ``nbytes`` of the file ending at ``end``,
    starting at a line start."""
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        end = max(0, min(end, st.st_size))
        start = line_start_after(fh, end - nbytes) if end > nbytes else 0
        fh.seek(start)
        return start, fh.read(end - start), st.st_ino, st.st_size


def search(path: Path, term: str, limit: int = MAX_MATCHES) -> dict[str, Any]:
    """The lines of the file holding ``term`` (ASCII case-insensitive), first ``limit``
    of them with ``line`` (1-based), ``offset`` and ``text``, and the ``total`` count."""
    needle = term.encode("utf-8").lower()
    matches: list[dict[str, Any]] = []
    total, line_no, base = 0, 1, 0
    with open(path, "rb") as fh:
        st = os.fstat(fh.fileno())
        carry = b""
        while True:
            block = fh.read(SEARCH_BLOCK)
            data = carry + block
            cut = len(data) if not block else data.rfind(b"\n") + 1
            if cut == 0 and block:  # no newline yet: wait for one, 4 blocks at most
                if len(data) < 4 * SEARCH_BLOCK:
                    carry = data
                    continue
                cut = len(data)
            chunk, carry = data[:cut], data[cut:]
            lower, counted, pos = chunk.lower(), 0, chunk.lower().find(needle)
            while needle and pos >= 0:
                start = chunk.rfind(b"\n", 0, pos) + 1
                stop = chunk.find(b"\n", pos)
                stop = len(chunk) if stop < 0 else stop
                line_no += chunk.count(b"\n", counted, start)
                counted = start
                total += 1
                if len(matches) < limit:
                    text = chunk[start:stop][:MATCH_TEXT * 4].decode("utf-8", "replace")
                    matches.append({"line": line_no, "offset": base + start,
                                    "text": text[:MATCH_TEXT]})
                pos = lower.find(needle, stop)
            line_no += chunk.count(b"\n", counted)
            base += len(chunk)
            if not block:
                break
    return {"term": term, "matches": matches, "total": total,
            "truncated": total > len(matches), "ino": st.st_ino, "size": st.st_size}


def main(argv: list[str]) -> int:
    """Print one ``gpurent.log/1`` document; exit 2 when the log cannot be read."""
    p = argparse.ArgumentParser(prog="python3 -m trainer log",
                                description="Read part of a run's train.log, or search "
                                "all of it, and print one JSON document.")
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--before", type=int, metavar="OFFSET",
                   help="the bytes before this offset (up to --bytes), from a line start")
    p.add_argument("--bytes", type=int, default=BEFORE_BYTES)
    p.add_argument("--search", metavar="TEXT", help="the lines holding TEXT")
    p.add_argument("--max", type=int, default=MAX_MATCHES, help="matches returned at most")
    args = p.parse_args(argv)
    path = Path(args.run_dir) / runfiles.LOG_FILE
    out: dict[str, Any] = {"schema": SCHEMA, "run_dir": args.run_dir}
    try:
        if args.search is not None:
            out.update(search(path, args.search, max(0, args.max)))
        else:
            want = max(1, min(args.bytes, MAX_BEFORE_BYTES))
            start, data, ino, size = read_before(
                path, args.before if args.before is not None else 1 << 62, want)
            try:
                body = {"text": data.decode("utf-8")}
            except UnicodeDecodeError:
                body = {"b64": base64.b64encode(data).decode("ascii")}
            out.update(offset=start, end=start + len(data), ino=ino, size=size, **body)
    except OSError as exc:
        print(f"trainer log: cannot read {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    sys.stdout.write(json.dumps(out, ensure_ascii=True) + "\n")
    return 0
