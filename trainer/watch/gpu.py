"""GPU figures for the follower: ``nvidia-smi`` in its own loop mode, its lines turned
into ``gpu`` messages (see ``docs/SCHEMAS.md``, "follow"). Standard library only."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

from trainer import smi

GPU_FIELDS = ("index", "name", "utilization.gpu", "memory.used", "memory.total",
              "temperature.gpu", "power.draw")

#: How long to wait before starting nvidia-smi again after it ended.
GPU_RESTART_SECONDS = 30.0


def parse_gpu_line(line: str) -> list[Any] | None:
    """One nvidia-smi line of :data:`GPU_FIELDS` as ``[index, name, util, mem_used,
    mem_total, temp, power]``; ``None`` when it is not one. Fields nvidia-smi cannot
    report (``[N/A]``) become ``None``."""
    row = smi.parse_line(line, GPU_FIELDS)
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
        command = [*smi.query_command(str(self.executable), GPU_FIELDS), "-lms",
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
