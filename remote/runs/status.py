"""One run's status in one exec of ``sh`` on the box, with no bootstrap: as fast as
``ssh HOST cat RUN/status.json``, and everything ``gpurent status`` shows.

The script prints sections, each after a line holding a random boundary: the box's
clock, ``status.json`` (or, without one, ``launch.pid`` and the end of ``console.log``,
inside the run or beside it), the size and mtime of ``train.log``, the last rows of
``metrics.jsonl`` and ``gpurent stop``'s mark (what another engine's final status leaves
out: ``remote.runs.read.finish``), ``guard.json`` and its acknowledgement, what else the run
holds (``remote.runs.read.run_extras``), how full its disk is (``df -Pk``: a full disk
is named as the reason of a run that stopped writing), and what ``/proc`` says about
every pid those files name (found with ``grep`` on the box; the laptop parses the JSON
properly and uses the identity of the pid it finds, asking once more in the rare case the
box's ``grep`` missed it). Health is judged here with the same rules as everywhere
(``trainer.health.judge_health``), against the box's clock.
"""

from __future__ import annotations

import json
import secrets
import shlex
import time
from typing import Any

from remote.runs.guard import GuardState
from remote.runs.processes import identity_of, started_at
from remote.runs.read import CONSOLE_TAIL_BYTES, RunRead, finish
from remote.transport.base import Transport, TransportError
from trainer import engines, procid, runfiles
from trainer.guard.state import GUARD_ACK, GUARD_FILE
from trainer.health import (
    LOG_TAIL_BYTES,
    LaunchRead,
    judge_health,
    parse_df,
    parse_launch_pid,
    with_disk,
)
from trainer.text import console_tail

#: The guard's files are read up to this size.
MAX_GUARD_BYTES = 1 << 20
#: metrics.jsonl's tail read for its last row, and train_config.yaml's most read.
LAST_ROW_BYTES = 65536
CONFIG_BYTES = 256 * 1024
#: The files ``remote.runs.read.run_extras`` lists when present.
EXTRA_FILES = (runfiles.RESULTS_FILE, runfiles.SUMMARY_FILE, engines.TRAIN_CONFIG_FILE)
_PIDS = r'"pid"[[:space:]]*:[[:space:]]*[0-9][0-9]*'


def script(run_dir: str, boundary: str) -> str:
    """The shell script (see the module doc); each section starts with a line
    ``BOUNDARY NAME`` after a newline of its own (dropped again when split)."""
    q, b = shlex.quote, boundary
    d = q(run_dir.rstrip("/") or "/")
    (pid_in, con_in), (pid_by, con_by) = engines.launch_files(run_dir.rstrip("/") or "/")

    def part(name: str, body: str) -> str:
        return f'printf "\\n%s\\n" "{b} {name}"; {body}'

    def missing(name: str) -> str:
        return f'printf "\\n%s\\n" "{b} {name}"'

    status, metrics = f"{d}/{runfiles.STATUS_FILE}", f"{d}/{runfiles.METRICS_FILE}"
    return "; ".join([
        f'[ -d {d} ] || {{ echo "{b} nodir"; exit 0; }}',
        part("now", "date +%s"),
        part("status", f"head -c {runfiles.MAX_STATUS_BYTES + 1} {status} 2>/dev/null || "
             + missing("nostatus")),
        # The launcher's files: inside the run (our trainer), else beside it.
        f"lp={q(pid_in)}; cl={q(con_in)}; if [ ! -e \"$lp\" ] && [ ! -e \"$cl\" ]; then "
        f"lp={q(pid_by)}; cl={q(con_by)}; fi",
        f"if [ ! -f {status} ]; then "
        + part("launch", 'head -c 256 "$lp" 2>/dev/null || ' + missing("nolaunch")) + "; "
        + part("console", f'tail -c {CONSOLE_TAIL_BYTES} "$cl" 2>/dev/null || '
               + missing("noconsole")) + "; fi",
        part("stat", f"stat -c '%s %Y %n' {d}/{runfiles.LOG_FILE} {status} {metrics} "
             '"$cl" 2>/dev/null'),
        part("lastrow", f"tail -c {LAST_ROW_BYTES} {metrics} 2>/dev/null"),
        part("stop", f"head -c {engines.MAX_MARK_BYTES} "
             f"{q(engines.beside_path(run_dir, engines.BESIDE_STOP))} 2>/dev/null"),
        part("guard", f"head -c {MAX_GUARD_BYTES} {d}/{GUARD_FILE} 2>/dev/null"),
        part("ack", f"head -c {MAX_GUARD_BYTES} {d}/{GUARD_ACK} 2>/dev/null"),
        part("config", f"head -c {CONFIG_BYTES} {d}/{engines.TRAIN_CONFIG_FILE} 2>/dev/null "
             "|| " + missing("noconfig")),
        part("files", f"for f in {' '.join(EXTRA_FILES)}; do [ -e {d}/\"$f\" ] && "
             'echo "$f"; done'),
        part("plots", f"ls -A {d}/val/plots 2>/dev/null"),
        part("weights", f"ls -A {d}/{runfiles.WEIGHTS_DIR} 2>/dev/null"),
        part("df", f"df -Pk {d} 2>/dev/null"),
        part("logtail", f"tail -c {LOG_TAIL_BYTES} {d}/{runfiles.LOG_FILE} 2>/dev/null"),
        part("boot", "cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo -; "
             "grep '^btime ' /proc/stat 2>/dev/null || echo -; "
             "getconf CLK_TCK 2>/dev/null || echo -"),
        'p0=; [ -f "$lp" ] && read -r p0 _ < "$lp"',
        f"for p in $p0 $(grep -ho '{_PIDS}' {status} {d}/{GUARD_FILE} 2>/dev/null | "
        "grep -o '[0-9]*$'); do case $p in *[!0-9]*) continue;; esac; "
        + part("proc $p", 'cat /proc/"$p"/stat 2>/dev/null || echo gone') + "; done",
        missing("end"),
    ])


def split_sections(out: bytes, boundary: str) -> dict[str, bytes]:
    """``{name: bytes}`` of the script's output (the newline before each boundary, which
    the script adds, is dropped again)."""
    mark = b"\n" + boundary.encode() + b" "
    sections: dict[str, bytes] = {}
    chunks = (b"\n" + out).split(mark)
    for chunk in chunks[1:]:
        name, _, body = chunk.partition(b"\n")
        sections[name.decode("ascii", "replace").strip()] = body
    return sections


def json_object(data: bytes | None) -> dict[str, Any] | None:
    """A section's bytes as a JSON object; ``None`` for anything else (a box's bytes)."""
    try:
        value = json.loads((data or b"").decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _int(text: bytes | None) -> int | None:
    words = (text or b"").split()
    return int(words[0]) if words and words[0].isdigit() else None


def quick_read(transport: Transport,
               run_dir: str) -> tuple[RunRead, GuardState | None, dict[str, Any]]:
    """The run's ``RunRead``, its guard (``None``: none armed) and what else the run
    directory holds (``remote.runs.read.run_extras``), in one exec. Raises
    ``TransportError`` (one line) when the box cannot be reached or RUN_DIR is not a
    directory there."""
    boundary = f"--gpurent-{secrets.token_hex(8)}"
    result = transport.run(script(run_dir, boundary), timeout=60.0)
    parts = split_sections(result.stdout, boundary)
    if "nodir" in parts:
        raise TransportError(f"{run_dir} is not a directory on {transport.label}")
    if "end" not in parts:
        err = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise TransportError(f"reading {run_dir} on {transport.label} failed: "
                             f"{err[-1] if err else f'exit {result.rc}'}")
    boot = parts.get("boot", b"")
    identities = {int(k.split()[1]): procid.parse_identity(v + b"\n" + boot)
                  for k, v in parts.items() if k.startswith("proc ") and k.split()[1].isdigit()}

    def identity(pid: Any) -> procid.ProcessIdentity | None:
        if pid not in identities:  # a pid the box's grep did not see: ask for it alone
            identities[pid] = identity_of(transport, pid)
        return identities[pid]

    if "nostatus" in parts:
        read = runfiles.StatusRead(None, f"no status.json in {run_dir}", missing=True)
    else:
        read = runfiles.parse_status(parts.get("status", b""))
    launch = None
    if read.missing and not ("nolaunch" in parts and "noconsole" in parts):
        launch = LaunchRead(parse_launch_pid(parts.get("launch", b"")),
                            console_tail(parts.get("console", b"")))
    pid = read.get("pid") if launch is None else launch.pid
    alive = None
    if isinstance(pid, int) and not isinstance(pid, bool):
        found = identity(pid) if pid > 0 else None
        alive = found is not None and found.alive
    stats = {}  # path as printed -> (size, mtime)
    for line in parts.get("stat", b"").splitlines():
        words = line.split(b" ", 2)
        if len(words) == 3 and words[0].isdigit() and words[1].isdigit():
            stats[words[2].decode("utf-8", "replace")] = (int(words[0]), int(words[1]))
    base = run_dir.rstrip("/") or "/"
    log = stats.get(f"{base}/{runfiles.LOG_FILE}")
    history = [] if log is None else [(log[1] - 1.0, -1), (float(log[1]), log[0])]
    now = _int(parts.get("now"))
    health = judge_health(read, now=float(now) if now else time.time(),
                          pid_alive=None if alive is None else (lambda _p: alive),
                          log_history=history, launch=launch)
    st = stats.get(f"{base}/{runfiles.STATUS_FILE}")
    if st is None and launch is not None:
        st = next((v for k, v in stats.items() if k in [c for _, c in
                                                        engines.launch_files(base)]), None)
    metrics = stats.get(f"{base}/{runfiles.METRICS_FILE}")
    read, health = finish(read, health, _last_row(parts.get("lastrow", b""), metrics),
                          engines.parse_stop(parts.get("stop", b"")))
    health = with_disk(health, parse_df(parts.get("df", b"")), parts.get("logtail", b""))
    run = RunRead(run_dir, read, health, alive, None if st is None else float(st[1]), launch)
    return run, _guard(parts, identity), _extras(parts)


def _last_row(data: bytes, metrics: tuple[int, int] | None) -> dict[str, Any] | None:
    """The last whole row of metrics.jsonl from its tail (as ``remote.runs.read.last_row``)."""
    if metrics is None or not data:
        return None
    if metrics[0] > LAST_ROW_BYTES:
        data = data[data.find(b"\n") + 1:]
    rows = runfiles.parse_metrics(data).rows
    return rows[-1] if rows else None


def _extras(parts: dict[str, bytes]) -> dict[str, Any]:
    """What ``remote.runs.read.run_extras`` reads, from the script's sections."""
    def names(section: str) -> list[str]:
        return [n for n in parts.get(section, b"").decode("utf-8", "replace").splitlines()
                if n]

    config = parts.get("config", b"") if "noconfig" not in parts else None
    return {"args": {} if config is None else
            engines.parse_train_config(config.decode("utf-8", "replace")),
            "files": [n for n in names("files") if n in EXTRA_FILES],
            "plots": len(names("plots")),
            "weights": sorted(n for n in names("weights") if n.endswith(".pt"))}


def _guard(parts: dict[str, bytes], identity: Any) -> GuardState | None:
    data = json_object(parts.get("guard"))
    if data is None:
        return None
    pid = data.get("pid")
    ok = isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 and \
        procid.mismatch(identity(pid), data, started_at(data)) is None
    ack = json_object(parts.get("ack")) if isinstance(data.get("alarm"), dict) else None
    return GuardState.from_dict(data, ok, ack)
