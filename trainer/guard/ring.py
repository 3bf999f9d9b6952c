"""The box's GPU ring: what its GPUs did over the last hour or so, kept on the box
(``CACHE/gpu-ring.txt``, ``CACHE`` being ``$GPURENT_CACHE_DIR`` or ``~/.cache/gpurent``)
so that a laptop that looks now can tell how long they have been quiet.

One line per sample: the box's epoch seconds, a space, then nvidia-smi's query rows of
:data:`FIELDS` (``--format=csv,noheader,nounits``) joined by ``;``::

    1722700000 0, 3, 1234, 81559;1, 0, 5, 81559

Two writers: the laptop's probe (``remote.runs.probe``, in its shell, on every listing
and watchdog pass, when nvidia-smi succeeded) and the guard (every poll). Each sample is
one small ``O_APPEND`` write; past ``2 * KEEP`` lines the file is cut back to its last
:data:`KEEP` (a sample appended by the other writer during a cut may be lost). The box is
a stranger's machine: a reader takes at most :data:`MAX_READ_BYTES` of the tail and
skips every line that is not a sample. Standard library only (Python 3.9).
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainer import engines, smi

#: The ring's file name in the box's cache directory.
RING_FILE = "gpu-ring.txt"
#: The nvidia-smi fields of each GPU row, in this order.
FIELDS = ("index", "utilization.gpu", "memory.used", "memory.total")
#: Lines kept after a cut (two hours at the guard's 30 s poll; an hour with a second
#: writer as busy); the file is cut when it passes twice as many.
KEEP = 240
#: The most of the ring's tail a reader takes.
MAX_READ_BYTES = 256 << 10
#: Longer lines, and samples of more GPUs, are not samples.
MAX_LINE = 2048
MAX_GPUS = 64
#: Utilisation (percent) under which a GPU counts as quiet.
QUIET_PERCENT = 10.0
#: The longest gap between two samples that a quiet stretch is claimed across: a hole
#: longer than this (no writer looked) ends the stretch, and so does a newest sample
#: older than this.
MAX_GAP = 360.0
#: What a summary looks back over.
WINDOW = 3600.0
_EPOCH = re.compile(r"[0-9]{1,12}")


@dataclass(frozen=True)
class GpuUse:
    """One GPU in one sample (``None``: nvidia-smi did not report it)."""

    index: int
    util: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None


@dataclass(frozen=True)
class Sample:
    """Every GPU at one moment of the box's clock (epoch seconds)."""

    at: float
    gpus: tuple[GpuUse, ...]

    def quiet(self, threshold: float) -> bool:
        """Whether every GPU reported a utilisation under ``threshold``."""
        return all(g.util is not None and g.util < threshold for g in self.gpus)


def ring_path() -> Path:
    """Where the ring is on this box."""
    return engines.cache_dir() / RING_FILE


def _cell(value: Any) -> str:
    if value is None:
        return "[N/A]"
    return str(value) if isinstance(value, int) else f"{float(value):g}"


def sample_line(at: float, rows: Iterable[Mapping[str, Any]]) -> str:
    """A ring line (with its newline) for nvidia-smi rows of :data:`FIELDS` (as
    ``trainer.smi.parse`` gives them) seen at ``at``."""
    gpus = ";".join(", ".join(_cell(row.get(f)) for f in FIELDS) for row in rows)
    return f"{int(at)} {gpus}\n"


def parse_line(line: str) -> Sample | None:
    """One ring line as a ``Sample``; ``None`` when it is not one."""
    if len(line) > MAX_LINE:
        return None
    at, _, rest = line.strip().partition(" ")
    chunks = [c for c in rest.split(";") if c.strip()]
    if not _EPOCH.fullmatch(at) or not chunks or len(chunks) > MAX_GPUS:
        return None
    gpus = []
    for chunk in chunks:
        row = smi.parse_line(chunk, FIELDS)
        if row is None:
            return None
        gpus.append(GpuUse(row["index"], row["utilization.gpu"], row["memory.used"],
                           row["memory.total"]))
    return Sample(float(at), tuple(gpus))


def parse(data: bytes | str) -> list[Sample]:
    """Every sample of a ring's text, oldest first. Only complete lines count: what
    follows the last newline (a line cut by a reader's cap) is not read."""
    text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
    complete = text[-MAX_READ_BYTES:].rpartition("\n")[0]
    found = (parse_line(line) for line in complete.split("\n"))
    return sorted((s for s in found if s is not None), key=lambda s: s.at)


def append(rows: Sequence[Mapping[str, Any]], at: float | None = None,
           path: Path | None = None, keep: int = KEEP) -> None:
    """Add a sample of ``rows`` (nothing when there are none), then cut the ring back
    to ``keep`` lines when it passed ``2 * keep``. ``OSError`` when it cannot be
    written."""
    if not rows:
        return
    where = path or ring_path()
    where.parent.mkdir(parents=True, exist_ok=True)
    line = sample_line(time.time() if at is None else at, rows).encode()
    fd = os.open(where, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    trim(where, keep)


def trim(path: Path, keep: int = KEEP) -> None:
    """Cut the file back to the last ``keep`` lines of its last ``MAX_READ_BYTES`` when
    it holds more than ``2 * keep`` lines or ``2 * MAX_READ_BYTES`` bytes (the probe's
    shell does the same with ``wc`` and ``tail``)."""
    with open(path, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        if size <= 2 * MAX_READ_BYTES and fh.read().count(b"\n") <= 2 * keep:
            return
        fh.seek(max(0, size - MAX_READ_BYTES))
        lines = fh.read(MAX_READ_BYTES).split(b"\n")[:-1][-keep:]
    temp = path.with_name(f".{path.name}.{os.getpid()}")
    temp.write_bytes(b"".join(line + b"\n" for line in lines))
    os.replace(temp, path)


@dataclass(frozen=True)
class Summary:
    """What the ring says about the window before ``now`` (the box's clock): how many
    samples, from when to when, mean and highest utilisation (over every GPU), the most
    memory any GPU used (and that GPU's total), and since when every GPU stayed under
    ``threshold`` (``quiet_since``: the first sample of the trailing quiet stretch;
    ``None`` when the newest sample is not quiet or is older than ``MAX_GAP``)."""

    samples: int
    first: float | None
    last: float | None
    util_mean: float | None
    util_max: float | None
    memory_used_mib: float | None
    memory_total_mib: float | None
    quiet_since: float | None
    threshold: float

    @property
    def span(self) -> float:
        """Seconds between the first and the last sample."""
        return 0.0 if self.first is None or self.last is None else self.last - self.first

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {**self.__dict__, "span_seconds": self.span}


def summarize(samples: Sequence[Sample], now: float, *, window: float = WINDOW,
              threshold: float = QUIET_PERCENT, max_gap: float = MAX_GAP) -> Summary:
    """The ``Summary`` of the samples taken in the ``window`` seconds up to ``now`` (a
    sample after ``now``, from a clock that was ahead, is left out)."""
    seen = sorted((s for s in samples if now - window <= s.at <= now), key=lambda s: s.at)
    utils = [g.util for s in seen for g in s.gpus if g.util is not None]
    used = [g for s in seen for g in s.gpus if g.memory_used_mib is not None]
    most = max(used, key=lambda g: g.memory_used_mib or 0.0) if used else None
    quiet_since = None
    later = now
    for sample in reversed(seen):
        if later - sample.at > max_gap or not sample.quiet(threshold):
            break
        quiet_since, later = sample.at, sample.at
    return Summary(len(seen), seen[0].at if seen else None, seen[-1].at if seen else None,
                   sum(utils) / len(utils) if utils else None, max(utils, default=None),
                   most.memory_used_mib if most else None,
                   most.memory_total_mib if most else None, quiet_since, threshold)
