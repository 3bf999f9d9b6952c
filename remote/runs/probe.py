"""What a box is doing, in one exec of ``sh`` with no bootstrap: for the fleet list and
the watchdog, where each of many boxes gets one round trip.

The script prints sections after a random boundary (as ``remote.runs.status`` does, and
split by its ``split_sections``): the box's clock; ``nvidia-smi``'s utilisation and
memory per GPU (or that there is none), which it also appends to the box's GPU ring
(``trainer.guard.ring``, when nvidia-smi succeeded), and the ring's tail: what the GPUs
did over the last hour, as the guard's polls and earlier probes saw it; the lease file
(``CACHE/lease.json``); and for the last ``MAX_RUNS`` runs of the box's registry
(``runs.txt``: every run launched through gpurent) their ``status.json`` (or
``launch.pid``; for a run that ended, the end of its ``metrics.jsonl``, whose last row
fills in what LibreYOLO's final status leaves out), ``guard.json`` and what ``/proc``
says about the pids those name.
Then the pids of Hub pushes under way (``trainer.hub.safe.push_in_flight``'s: a
push's snapshot directory, a push watcher's mark) that ``/proc`` has alive.
Health is judged with the same rules as everywhere (``trainer.health.judge_health``)
against the box's clock; nothing here is guessed: a box without ``nvidia-smi`` has no
GPU figures, a run without a status says so. A caller may add sections of its own to
the same exec (``extra``: the fleet's weights check,
``remote.fleet.boxweights.folded_check``).
"""

from __future__ import annotations

import posixpath
import re
import secrets
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from remote.runs.guard import GuardState
from remote.runs.processes import started_at
from remote.runs.read import finish
from remote.runs.status import MAX_GUARD_BYTES, json_object, split_sections
from remote.transport.base import Transport, TransportError
from trainer import engines, procid, runfiles, smi
from trainer.guard.lease import LEASE_FILE, parse_lease
from trainer.guard.ring import (
    FIELDS,
    KEEP,
    MAX_GPUS,
    MAX_READ_BYTES,
    QUIET_PERCENT,
    RING_FILE,
    GpuUse,
    Sample,
    Summary,
    summarize,
)
from trainer.guard.ring import parse as parse_ring
from trainer.guard.state import GUARD_FILE
from trainer.health import GOING, LaunchRead, judge_health, parse_launch_pid
from trainer.hub.push import SNAPSHOT_PREFIX
from trainer.text import one_line

#: Runs of the registry looked at (the newest entries).
MAX_RUNS = 8
#: The GPU fields asked of nvidia-smi (those of the box's GPU ring).
GPU_FIELDS = FIELDS
#: What a box's reply may hold (a few KiB per run).
MAX_PROBE_BYTES = 4 << 20
_PIDS = r'"pid"[[:space:]]*:[[:space:]]*[0-9][0-9]*'
_RUNNING = r'"state"[[:space:]]*:[[:space:]]*"running"'
#: How much of the end of an ended run's ``metrics.jsonl`` is read (its last row fills
#: what a final LibreYOLO status leaves out).
LAST_ROW_BYTES = 16384


#: One GPU as nvidia-smi reports it now (``None``: not reported).
GpuNow = GpuUse


@dataclass(frozen=True)
class BoxRun:
    """One registered run: its directory and health verdict (``trainer.health``)."""

    run_dir: str
    health: str
    reason: str = ""
    #: When its status.json was last written (epoch s; ``None`` without one).
    updated: float | None = None
    #: Its completed epochs, as its status.json says (``None`` without one), or for an
    #: ended run as its history's last row does (a resumed LibreYOLO run's status
    #: counts only its last invocation's).
    epoch: int | None = None
    #: When it started (its status.json's ``started_at``, the box's clock; epoch s).
    started: float | None = None
    #: Its last push to the Hub failed: the error and the epoch (status.json's ``hub``
    #: key as our trainer writes it; ``""`` when it did not fail).
    push_error: str = ""
    push_epoch: int | None = None

    @property
    def live(self) -> bool:
        """Whether the run is still going (live, starting, slow, stalled)."""
        return self.health in GOING


@dataclass(frozen=True)
class BoxReport:
    """What one exec saw on a box."""

    now: float | None
    #: ``None`` when the box has no nvidia-smi (or it failed: ``gpu_error``).
    gpus: list[GpuNow] | None
    runs: list[BoxRun] = field(default_factory=list)
    guards: list[GuardState] = field(default_factory=list)
    lease: dict[str, Any] | None = None
    gpu_error: str = ""
    #: The box's GPU ring (its tail, oldest first; the sample this probe took among them).
    history: list[Sample] = field(default_factory=list)
    #: Pids of Hub pushes under way (or still to come: a live push watcher).
    pushes: list[int] = field(default_factory=list)
    #: Every section the script printed, raw (a caller's ``extra`` sections among them).
    sections: dict[str, bytes] = field(default_factory=dict, repr=False, compare=False)

    @property
    def live_runs(self) -> list[BoxRun]:
        """The runs still going."""
        return [run for run in self.runs if run.live]

    @property
    def guard_watching(self) -> bool:
        """Whether a guard is armed and its process alive on one of the runs."""
        return any(guard.watching for guard in self.guards)

    def runs_by_name(self) -> dict[str, dict[str, Any]]:
        """Each run's completed epochs and health, by run name (the folder's name)."""
        return {posixpath.basename(r.run_dir.rstrip("/")): {"epoch": r.epoch,
                                                            "health": r.health}
                for r in self.runs}

    def gpu_busiest(self) -> float | None:
        """The highest GPU utilisation now (``None`` without figures)."""
        utils = [g.util for g in self.gpus or [] if g.util is not None]
        return max(utils) if utils else None

    def gpu_history(self, threshold: float = QUIET_PERCENT) -> Summary | None:
        """What the ring says about the last hour up to the box's clock (its quiet
        stretch under ``threshold`` percent); ``None`` when the clock was not read."""
        return None if self.now is None else \
            summarize(self.history, self.now, threshold=threshold)

    def gpu_words(self) -> list[str]:
        """``GPU 3% now, 1.2/80 GiB`` and ``25 min: avg 2%, max 7%, 1.3/80 GiB at
        most`` (or ``no GPU history yet``): short phrases for a cell or a line."""
        said = []
        if self.gpus is not None:
            utils = "/".join("?" if g.util is None else f"{g.util:.0f}" for g in self.gpus)
            said.append(f"GPU {utils}% now{_memory(self.gpus)}")
        past = self.gpu_history()
        if past is not None and past.span > 0 and past.util_mean is not None:
            span = f"{past.span // 60:.0f} min" if past.span >= 60 else f"{past.span:.0f} s"
            most = "" if past.memory_used_mib is None else \
                f", {_gib(past.memory_used_mib, past.memory_total_mib)} at most"
            said.append(f"{span}: avg {past.util_mean:.0f}%, max {past.util_max:.0f}%{most}")
        elif self.gpus is not None or self.history:
            said.append("no GPU history yet")
        return said

    def to_dict(self, idle_gpu: float = QUIET_PERCENT) -> dict[str, Any]:
        """A JSON-ready dict (the ring summarised with ``idle_gpu`` as the quiet
        threshold)."""
        past = self.gpu_history(idle_gpu)
        return {"now": self.now, "gpu_error": self.gpu_error or None,
                "gpus": None if self.gpus is None else [g.__dict__ for g in self.gpus],
                "gpu_history": None if past is None else past.to_dict(),
                "runs": [{**r.__dict__, "live": r.live} for r in self.runs],
                "guard_watching": self.guard_watching, "pushes": self.pushes,
                "guards": [g.summary() for g in self.guards], "lease": self.lease}


def _gib(used: float, total: float | None) -> str:
    return f"{used / 1024:.1f}/{'?' if total is None else f'{total / 1024:.0f}'} GiB"


def _memory(gpus: list[GpuUse]) -> str:
    known = [g for g in gpus if g.memory_used_mib is not None]
    if not known:
        return ""
    most = max(known, key=lambda g: g.memory_used_mib or 0.0)
    return f", {_gib(most.memory_used_mib or 0.0, most.memory_total_mib)}"


def cache_dir_expr() -> str:
    """The box's cache directory as a shell expression (``trainer.engines.cache_dir``)."""
    return engines.CACHE_DIR_SHELL


def registry_expr() -> str:
    """The box's run registry (``runs.txt``) as a shell expression."""
    return runfiles.REGISTRY_SHELL


def _ring() -> str:
    return f"{cache_dir_expr()}/{RING_FILE}"


def _record() -> str:
    """Shell that appends the sample in ``$g`` (taken at ``$now``) to the ring, cut back
    as ``trainer.guard.ring.trim`` cuts it."""
    return (f'{{ r={_ring()}; mkdir -p {cache_dir_expr()} && '
            f'printf "%s %s\\n" "$now" "$(printf "%s" "$g" | head -n {MAX_GPUS} | '
            "tr '\\n' ';')\" >> \"$r\" && "
            f'if [ "$(wc -l < "$r")" -gt {2 * KEEP} ] || '
            f'[ "$(wc -c < "$r")" -gt {2 * MAX_READ_BYTES} ]; then '
            f'tail -c {MAX_READ_BYTES} "$r" | tail -n {KEEP} > "$r.$$" && '
            'mv -f "$r.$$" "$r"; fi; } 2>/dev/null')


def _pushes(registry: str) -> str:
    """Shell printing the live pids of pushes: ``.hub-push-PID-*`` snapshots (in a run,
    or under ``CACHE/push``) and ``CACHE/watchers/RUN/PID`` marks."""
    cache = cache_dir_expr()
    return (f'{{ ls -d {cache}/watchers/*/* {cache}/push/*/{SNAPSHOT_PREFIX}* 2>/dev/null; '
            f'tail -n 200 {registry} 2>/dev/null | while IFS= read -r r; do '
            f'ls -d "$r"/{SNAPSHOT_PREFIX}* 2>/dev/null; done; }} | '
            'while IFS= read -r f; do p=${f##*/}; p=${p#' + SNAPSHOT_PREFIX + '}; '
            'p=${p%%-*}; case "$p" in ""|*[!0-9]*) continue;; esac; '
            '[ -d "/proc/$p" ] && echo "$p"; done | sort -u | head -n 64')


def section(boundary: str, name: str, body: str) -> str:
    """Shell that starts the section ``name`` and then runs ``body`` (its content)."""
    return f'printf "\\n%s\\n" "{boundary} {name}"; {body}'


def script(boundary: str, extra: Callable[[str], str] | None = None) -> str:
    """The shell script (see the module doc); ``extra(boundary)``: more shell, run last,
    that prints sections of its own (``section``)."""

    def part(name: str, body: str) -> str:
        return section(boundary, name, body)

    registry = registry_expr()
    gpu = shlex.join(smi.query_command("nvidia-smi", GPU_FIELDS))
    return "; ".join([
        "now=$(date +%s)",
        part("now", 'echo "$now"'),
        "if command -v nvidia-smi >/dev/null 2>&1; then "
        f'g=$( {{ timeout 10 {gpu} 2>&1; echo "rc=$?"; }} | tail -c 65536 ); '
        'rc=${g##*rc=}; g=${g%rc=*}; '
        + part("gpu", 'printf "%s" "$g"') + "; "
        f'if [ "$rc" = 0 ] && [ -n "$g" ]; then {_record()}; fi; else '
        + part("nogpu", ":") + "; fi",
        part("gpu ring", f"tail -c {MAX_READ_BYTES} {_ring()} 2>/dev/null | tail -n {KEEP}"),
        part("lease", f"head -c 4096 {cache_dir_expr()}/{LEASE_FILE} 2>/dev/null"),
        part("boot", "cat /proc/sys/kernel/random/boot_id 2>/dev/null || echo -; "
             "grep '^btime ' /proc/stat 2>/dev/null || echo -; "
             "getconf CLK_TCK 2>/dev/null || echo -"),
        "n=0",
        f"tail -n 200 {registry} 2>/dev/null | awk '!seen[$0]++' | tail -n {MAX_RUNS} | "
        "{ while IFS= read -r r; do [ -d \"$r\" ] || continue; n=$((n+1)); "
        + part("run $n", 'printf "%s" "$r"') + "; "
        + part("status $n", f'head -c {runfiles.MAX_STATUS_BYTES + 1} "$r/'
               f'{runfiles.STATUS_FILE}" 2>/dev/null || echo')
        + "; " + part("launch $n", f'head -c 256 "$r/{runfiles.LAUNCH_PID_FILE}" '
                      "2>/dev/null")
        + "; " + part("guard $n", f'head -c {MAX_GUARD_BYTES} "$r/{GUARD_FILE}" 2>/dev/null')
        + f"; grep -q '{_RUNNING}' \"$r/{runfiles.STATUS_FILE}\" 2>/dev/null || {{ "
        + part("lastrow $n", f'tail -c {LAST_ROW_BYTES} "$r/{runfiles.METRICS_FILE}" '
               "2>/dev/null") + "; }"
        + f"; for p in $(head -c 256 \"$r/{runfiles.LAUNCH_PID_FILE}\" 2>/dev/null | "
        f"grep -o '^[0-9]*'; grep -ho '{_PIDS}' \"$r/{runfiles.STATUS_FILE}\" "
        f"\"$r/{GUARD_FILE}\" 2>/dev/null | grep -o '[0-9]*$'); do "
        + part("proc $n $p", 'cat /proc/"$p"/stat 2>/dev/null || echo gone') + "; done; "
        "done; }",
        part("pushes", _pushes(registry)),
        *([extra(boundary)] if extra is not None else []),
        part("end", ":"),
    ])



def _gpus(text: str) -> tuple[list[GpuNow] | None, str]:
    rows = smi.parse(text, GPU_FIELDS)
    if not rows:
        lines = text.strip().splitlines()
        return None, (lines[0][:200] if lines else "nvidia-smi printed nothing")
    return [GpuNow(r["index"], r["utilization.gpu"], r["memory.used"], r["memory.total"])
            for r in rows], ""


def parse_report(parts: dict[str, bytes]) -> BoxReport:
    """A ``BoxReport`` from the script's sections."""
    now_words = parts.get("now", b"").split()
    now = float(now_words[0]) if now_words and now_words[0].isdigit() else None
    gpus: list[GpuNow] | None = None
    gpu_error = ""
    if "gpu" in parts:
        gpus, gpu_error = _gpus(parts["gpu"].decode("utf-8", "replace"))
    boot = parts.get("boot", b"")
    runs: list[BoxRun] = []
    guards: list[GuardState] = []
    for key in sorted((k for k in parts if re.fullmatch(r"run \d+", k)),
                      key=lambda k: int(k.split()[1])):
        n = key.split()[1]
        identities = {int(k.split()[2]): procid.parse_identity(v + b"\n" + boot)
                      for k, v in parts.items()
                      if k.startswith(f"proc {n} ") and k.split()[2].isdigit()}

        def alive(pid: int,
                  identities: dict[int, procid.ProcessIdentity | None] = identities) -> bool:
            found = identities.get(pid)
            return found is not None and found.alive

        run_dir = parts[key].decode("utf-8", "replace")
        status = parts.get(f"status {n}", b"")
        read = runfiles.parse_status(status) if status.strip() else \
            runfiles.StatusRead(None, "no status.json", missing=True)
        launch = None
        if read.missing:
            pid = parse_launch_pid(parts.get(f"launch {n}", b""))
            launch = LaunchRead(pid, "") if pid is not None else None
        health = judge_health(read, now=now or time.time(), pid_alive=alive, launch=launch)
        read, health = finish(read, health, last_row(parts.get(f"lastrow {n}", b"")), None)
        updated = runfiles.parse_iso(str(read.get("updated_at") or "")) if read.ok else None
        epoch = read.get("completed_epochs") if read.ok else None
        began = runfiles.parse_iso(str(read.get("started_at") or "")) if read.ok else None
        hub = read.get("hub") if read.ok else None
        failed = hub if isinstance(hub, dict) and hub.get("error") else {}
        runs.append(BoxRun(run_dir, health.verdict, health.reason, updated,
                           epoch if isinstance(epoch, int) else None, began,
                           one_line(failed.get("error", ""), 300),
                           failed.get("epoch") if isinstance(failed.get("epoch"), int)
                           else None))
        data = json_object(parts.get(f"guard {n}"))
        if data is not None:
            pid = data.get("pid")
            ok = isinstance(pid, int) and not isinstance(pid, bool) and pid > 1 and \
                procid.mismatch(identities.get(pid), data, started_at(data)) is None
            guards.append(GuardState.from_dict(data, ok))
    pushes = sorted({int(w) for w in parts.get("pushes", b"").split() if w.isdigit()})
    return BoxReport(now, gpus, runs, guards, parse_lease(json_object(parts.get("lease"))),
                     gpu_error, parse_ring(parts.get("gpu ring", b"")), pushes, dict(parts))


def last_row(tail: bytes) -> dict[str, Any] | None:
    """The last whole row in the end of a ``metrics.jsonl`` (``LAST_ROW_BYTES`` of it at
    most; a cut first line is dropped)."""
    if len(tail) >= LAST_ROW_BYTES:
        tail = tail[tail.find(b"\n") + 1:]
    rows = runfiles.parse_metrics(tail).rows
    return rows[-1] if rows else None


def probe_box(transport: Transport, timeout: float = 20.0,
              extra: Callable[[str], str] | None = None) -> BoxReport:
    """Run the probe on ``transport``'s box (with the caller's ``extra`` sections, see
    ``script``). ``TransportError`` (one line) when it cannot be run or its answer is
    cut short."""
    boundary = f"--gpurent-{secrets.token_hex(8)}"
    result = transport.run(script(boundary, extra), timeout=timeout,
                           max_bytes=MAX_PROBE_BYTES)
    parts = split_sections(result.stdout, boundary)
    if "end" not in parts:
        err = result.stderr.decode("utf-8", "replace").strip().splitlines()
        raise TransportError(f"the probe of {transport.label} failed: "
                             f"{err[-1][:200] if err else f'exit {result.rc}'}")
    return parse_report(parts)
