"""``nvidia-smi --query-gpu=... --format=csv,noheader,nounits``: the one parser of its
lines, for preflight, the follower's GPU samples and the guard's idleness test; and the
box's CPU and RAM load from ``/proc`` (what the follower shows when there is no GPU);
and the follower's sampler, which keeps nvidia-smi running in its own loop mode.
Standard library only."""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from typing import Any

#: The format every query uses.
CSV_FORMAT = "--format=csv,noheader,nounits"
#: Fields that are text; every other field is a number (``None`` when not reported).
TEXT_FIELDS = frozenset({"name", "driver_version", "uuid", "pci.bus_id", "serial"})
_INDEX = re.compile(r"[0-9]{1,6}")


def number(text: str) -> float | None:
    """A reported number, or ``None`` for ``[N/A]``, ``[Not Supported]``, NaN, infinity."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def parse_line(line: str, fields: Sequence[str]) -> dict[str, Any] | None:
    """One query line as ``{field: value}``, or ``None`` when it is not one (a message
    such as "No devices were found"). A ``name`` field takes the cells a comma inside a
    GPU name adds; ``index`` must be an integer."""
    cells = [cell.strip() for cell in line.strip().split(",")]
    extra = len(cells) - len(fields)
    if extra < 0 or (extra and "name" not in fields):
        return None
    if extra:
        at = list(fields).index("name")
        cells[at:at + extra + 1] = [", ".join(cells[at:at + extra + 1])]
    row = {field: (cells[i] if field in TEXT_FIELDS else number(cells[i]))
           for i, field in enumerate(fields)}
    if "index" in row:
        index = cells[list(fields).index("index")]
        if not _INDEX.fullmatch(index):  # ASCII only: "²".isdigit(), yet int("²") fails
            return None
        row["index"] = int(index)
    return row


def parse(text: str, fields: Sequence[str]) -> list[dict[str, Any]]:
    """Every GPU row of a query's output."""
    rows = (parse_line(line, fields) for line in text.splitlines() if line.strip())
    return [row for row in rows if row is not None]


def query_command(executable: str, fields: Sequence[str]) -> list[str]:
    """The argv of a query for ``fields``."""
    return [executable, f"--query-gpu={','.join(fields)}", CSV_FORMAT]


def query(fields: Sequence[str], timeout: float = 15.0
          ) -> tuple[list[dict[str, Any]] | None, str | None]:
    """``(rows, error)``: ``(None, None)`` when nvidia-smi is not installed; rows ``None``
    with a one-line error when it failed."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None, None
    try:
        out = subprocess.run(query_command(exe, fields), capture_output=True, text=True,
                             timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"nvidia-smi failed: {exc}"
    if out.returncode != 0:
        lines = (out.stdout + out.stderr).strip().splitlines()
        return None, lines[0] if lines else "nvidia-smi failed"
    return parse(out.stdout, fields), None


class HostLoad:
    """CPU busy % (over the time since the previous sample) and RAM in use, read from
    ``/proc/stat`` and ``/proc/meminfo``. ``sample()`` is ``None`` where ``/proc`` is
    missing (not Linux)."""

    def __init__(self, proc: str = "/proc") -> None:
        self.proc = proc
        self._last: tuple[int, int] | None = None

    def _cpu_times(self) -> tuple[int, int]:
        with open(f"{self.proc}/stat", encoding="ascii") as fh:
            values = [int(v) for v in fh.readline().split()[1:]]
        idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
        return sum(values), idle

    def _memory_mib(self) -> tuple[float, float]:
        found = {}
        with open(f"{self.proc}/meminfo", encoding="ascii") as fh:
            for line in fh:
                key, _, rest = line.partition(":")
                if key in ("MemTotal", "MemAvailable"):
                    found[key] = int(rest.split()[0]) / 1024.0
        total = found["MemTotal"]
        return total - found.get("MemAvailable", total), total

    def sample(self) -> dict[str, Any] | None:
        """``{"cpu": %, "cpus": N, "mem_used_mib": ..., "mem_total_mib": ...}``; ``cpu``
        is ``None`` on the first sample (a rate needs two)."""
        try:
            total, idle = self._cpu_times()
            used, mem_total = self._memory_mib()
        except (OSError, ValueError, IndexError, KeyError):
            return None
        cpu = None
        if self._last is not None and total > self._last[0]:
            busy = (total - self._last[0]) - (idle - self._last[1])
            cpu = round(100.0 * busy / (total - self._last[0]), 1)
        self._last = (total, idle)
        return {"cpu": cpu, "cpus": os.cpu_count(), "mem_used_mib": round(used, 1),
                "mem_total_mib": round(mem_total, 1)}


# ------------------------------------------------------------ the follower's sampler

#: What the follower samples, in this order (its ``gpu`` messages' rows).
GPU_FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total",
              "temperature.gpu", "power.draw")

#: How long to wait before starting nvidia-smi again after it ended.
GPU_RESTART_SECONDS = 30.0


def parse_gpu_line(line: str) -> list[Any] | None:
    """One nvidia-smi line of :data:`GPU_FIELDS` as ``[index, name, util, mem_used,
    mem_total, temp, power]``; ``None`` when it is not one. Fields nvidia-smi cannot
    report (``[N/A]``) become ``None``."""
    row = parse_line(line, GPU_FIELDS)
    return None if row is None else [row[field] for field in GPU_FIELDS]


class GpuSampler:
    """Runs ``nvidia-smi`` in its own loop mode (``-lms``), which costs far less than
    starting it every interval, and hands its lines back as ``gpu`` messages."""

    def __init__(self, interval: float, executable: str | None = None) -> None:
        self.interval = interval
        self.executable = executable or shutil.which("nvidia-smi")
        self.proc: subprocess.Popen[bytes] | None = None
        self._buffer = b""
        self._pending: list[list[Any]] = []
        self._next_start = 0.0
        self._errors: list[str] = []
        self._last_sent: list[list[Any]] | None = None

    @property
    def available(self) -> bool:
        """Whether there is an ``nvidia-smi`` to ask."""
        return bool(self.executable) and self.interval > 0

    def fileno(self) -> int | None:
        """The pipe to wait on, when nvidia-smi is running."""
        if self.proc is None or self.proc.stdout is None:
            return None
        return self.proc.stdout.fileno()

    def ensure_running(self, now: float) -> Iterator[dict[str, Any]]:
        """Start nvidia-smi when it is not running and its restart delay has passed."""
        if not self.available or self.proc is not None or now < self._next_start:
            return
        command = [*query_command(str(self.executable), GPU_FIELDS), "-lms",
                   str(max(100, int(self.interval * 1000)))]
        try:
            self.proc = subprocess.Popen(command, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        except OSError as exc:
            self._next_start = now + GPU_RESTART_SECONDS
            yield {"t": "gpu", "error": f"cannot run nvidia-smi: {exc.strerror or exc}"}
            return
        os.set_blocking(self.proc.stdout.fileno(), False)  # type: ignore[union-attr]

    def read(self, now: float) -> Iterator[dict[str, Any]]:
        """Read what nvidia-smi printed; a message per complete sample."""
        if self.proc is None or self.proc.stdout is None:
            return
        try:
            data = os.read(self.proc.stdout.fileno(), 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            yield from self._ended(now)
            return
        self._buffer += data
        *lines, self._buffer = self._buffer.split(b"\n")
        for raw in lines:
            text = raw.decode("utf-8", "replace").strip()
            if not text:
                continue
            row = parse_gpu_line(text)
            if row is None:
                self._errors = (self._errors + [text])[-3:]
            elif self._pending and row[0] <= self._pending[-1][0]:
                yield from self._flush()
                self._pending = [row]
            else:
                self._pending.append(row)
        if self._pending and not self._buffer:
            yield from self._flush()

    def _flush(self) -> Iterator[dict[str, Any]]:
        # An unchanged sample is not sent again: the reader keeps showing the last one.
        if self._pending != self._last_sent:
            self._last_sent = self._pending
            yield {"t": "gpu", "gpus": self._pending}
        self._pending = []

    def _ended(self, now: float) -> Iterator[dict[str, Any]]:
        self.stop()
        self._last_sent = None
        self._next_start = now + GPU_RESTART_SECONDS
        detail = self._errors[-1] if self._errors else "nvidia-smi exited"
        self._errors = []
        yield {"t": "gpu", "error": detail[:300]}

    def stop(self) -> None:
        """Stop nvidia-smi."""
        if self.proc is None:
            return
        with contextlib.suppress(OSError):
            self.proc.kill()
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            self.proc.wait(timeout=2)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self.proc = None
        self._buffer = b""
        self._pending = []


# --------------------------------------------------------------------------- loop
