"""``LocalTransport``: the ``Transport`` interface on this machine, for
``gpurent-tui --local``, the demo and the tests. Commands run with ``sh -c`` like they
would on a box; the trainer runs from this repository with this interpreter."""

from __future__ import annotations

import contextlib
import os
import select
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from remote.transport.base import (
    MAX_REPLY,
    FileStat,
    LineSplitter,
    Progress,
    ReplyTooLarge,
    RunResult,
    TransportError,
)
from trainer import runfiles
from trainer.health import local_pid_alive

#: The directory that holds the ``trainer`` package: the checkout, or the site-packages
#: the app was installed into.
PACKAGE_ROOT = Path(runfiles.__file__).resolve().parents[1]

_COPY_CHUNK = 1 << 20


def _popen_group(command: str, **kwargs: object) -> subprocess.Popen[bytes]:
    """Start ``sh -c command`` as the leader of a new session (and process group)."""
    return subprocess.Popen(["sh", "-c", command], start_new_session=True, **kwargs)  # type: ignore[call-overload]


def _kill_group(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


class LocalStream:
    """The stdout of a local command, line by line (``remote.transport.base.Stream``)."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self._proc = proc
        self._split = LineSplitter("the command wrote")
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._reading = False

    @property
    def pid(self) -> int:
        """The pid of the ``sh`` that runs the command (its process group id)."""
        return self._proc.pid

    def lines(self, timeout: float, max_line: int | None = None) -> Iterator[bytes]:
        """Yield stdout lines (without the newline); ``TimeoutError`` after ``timeout``
        seconds without any byte, ``LineTooLong`` past ``max_line`` bytes without a
        newline; ends at EOF or when ``close`` is called."""
        assert self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        with self._lock:
            self._reading = True
        split = self._split
        try:
            last = time.monotonic()
            while not self._closed.is_set():
                line = split.take(max_line)
                if line is not None:
                    yield line
                    last = time.monotonic()
                    continue
                if self._closed.is_set():
                    return
                silent = time.monotonic() - last
                if silent >= timeout:
                    raise TimeoutError(f"no output for {silent:.1f}s")
                # Short ticks so that close() from another thread is noticed promptly.
                ready, _, _ = select.select([fd], [], [], min(0.2, timeout - silent))
                if not ready:
                    continue
                data = os.read(fd, 65536)
                if not data:
                    rest = split.rest()
                    if rest:
                        yield rest
                    return
                split.add(data)
                last = time.monotonic()
        finally:
            with self._lock:
                self._reading = False
                if self._closed.is_set():
                    self._release()

    def close(self) -> None:
        """Kill the command's process group and release the pipe. Idempotent."""
        self._closed.set()
        # SIGKILL: the command may hang or be stopped, and owes nobody a clean exit.
        _kill_group(self._proc)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=5)
        with self._lock:
            if not self._reading:
                self._release()

    def _release(self) -> None:
        if self._proc.stdout is not None and not self._proc.stdout.closed:
            self._proc.stdout.close()


class LocalTransport:
    """Runs everything on this machine; see ``remote.transport.base.Transport``."""

    def __init__(self, python: str | None = None) -> None:
        self.label = "local"
        exe = python or sys.executable
        self.trainer_prefix = (f"PYTHONPATH={shlex.quote(str(PACKAGE_ROOT))} "
                               f"{shlex.quote(exe)}")

    def run(self, command: str, *, stdin: bytes | None = None, timeout: float = 60.0,
            max_bytes: int = MAX_REPLY) -> RunResult:
        """Run ``command`` with ``sh -c`` and wait; ``TransportError`` on timeout,
        ``ReplyTooLarge`` for a reply over ``max_bytes`` (checked once it is in: this
        machine is not a stranger's, so its replies are not read in bounded steps)."""
        proc = _popen_group(command, stdin=subprocess.PIPE if stdin is not None
                            else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        try:
            out, err = proc.communicate(stdin, timeout=timeout)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.communicate(timeout=5)
            raise TransportError(f"command timed out after {timeout:g}s") from None
        if max(len(out), len(err)) > max_bytes:
            raise ReplyTooLarge(f"a command here sent more than {max_bytes:,} bytes: "
                                "the cap on a reply")
        return RunResult(proc.returncode, out, err)

    def spawn_detached(self, command: str, *, cwd: str, log_path: str,
                       stdin: bytes | None = None) -> int:
        """Start ``command`` in a new session with output to ``log_path`` and return its
        pid (= its process group id). ``stdin`` is written once, then closed."""
        try:
            with open(self.absolute(log_path), "ab") as log:
                # ``trap '' HUP`` is nohup: an ignored signal stays ignored across exec.
                proc = _popen_group(f"trap '' HUP; {command}", cwd=self.absolute(cwd),
                                    stdout=log,
                                    stderr=subprocess.STDOUT,
                                    stdin=subprocess.PIPE if stdin is not None
                                    else subprocess.DEVNULL)
        except OSError as exc:
            raise TransportError(f"cannot start the command: {exc.strerror or exc}") from exc
        if stdin is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin)
            proc.stdin.close()
        # Reap it when it ends, so that it never lingers as a zombie of ours.
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
        return proc.pid

    def stream(self, command: str, *, stdin: bytes | None = None) -> LocalStream:
        """Start ``command`` and return its stdout as a line stream."""
        proc = _popen_group(command, stdout=subprocess.PIPE,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL)
        if stdin is not None:
            assert proc.stdin is not None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin)
            proc.stdin.close()
        return LocalStream(proc)

    def stat(self, path: str) -> FileStat | None:
        """Size and mtime of ``path``, or ``None`` when it does not exist."""
        try:
            st = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            raise TransportError(f"cannot stat {path}: {exc.strerror or exc}") from exc
        return FileStat(st.st_size, st.st_mtime)

    def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> bytes:
        """Up to ``max_bytes`` of ``path`` from ``offset``."""
        try:
            with open(path, "rb") as fh:
                fh.seek(offset)
                return fh.read(max_bytes)
        except OSError as exc:
            raise TransportError(f"cannot read {path}: {exc.strerror or exc}") from exc

    def listdir(self, path: str) -> list[str]:
        """Names in ``path`` (``[]`` when it does not exist)."""
        try:
            return sorted(os.listdir(path))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise TransportError(f"cannot list {path}: {exc.strerror or exc}") from exc

    def signal_group(self, pgid: int, sig: int) -> bool:
        """Send ``sig`` to process group ``pgid``; ``False`` when there is none."""
        if pgid <= 1:
            return False
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return False
        except PermissionError as exc:
            raise TransportError(f"not allowed to signal process group {pgid}") from exc
        return True

    def absolute(self, path: str) -> str:
        """``path`` made absolute against this process's working directory (where the
        commands it runs start)."""
        return os.path.abspath(os.path.expanduser(path))

    def pid_alive(self, pid: int) -> bool:
        """Whether ``pid`` is a live, non-zombie process here."""
        return local_pid_alive(pid)

    def upload(self, local: str, remote: str, progress: Progress | None = None) -> None:
        """Copy ``local`` to ``remote`` atomically (temp name, then rename)."""
        try:
            total = os.path.getsize(local)
            with open(local, "rb") as src:
                def save(tmp: str) -> None:
                    with open(tmp, "wb") as dst:
                        _copy(src, dst, 0, total, progress)
                runfiles.atomic_save(remote, save)
        except OSError as exc:
            raise TransportError(f"cannot upload {local}: {exc.strerror or exc}") from exc

    def download(self, remote: str, local: str, progress: Progress | None = None,
                 resume: bool = True) -> None:
        """Copy ``remote`` to ``local``, continuing a partial ``local`` when ``resume``."""
        try:
            total = os.path.getsize(remote)
            done = os.path.getsize(local) if resume and os.path.exists(local) else 0
            if done > total:
                done = 0
            with open(remote, "rb") as src, open(local, "r+b" if done else "wb") as dst:
                src.seek(done)
                dst.seek(done)
                dst.truncate()
                _copy(src, dst, done, total, progress)
        except OSError as exc:
            raise TransportError(f"cannot download {remote}: {exc.strerror or exc}") from exc

    def close(self) -> None:
        """Nothing to release for this machine."""

    def __enter__(self) -> LocalTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _copy(src: object, dst: object, done: int, total: int, progress: Progress | None) -> None:
    while True:
        block = src.read(_COPY_CHUNK)  # type: ignore[attr-defined]
        if not block:
            break
        dst.write(block)  # type: ignore[attr-defined]
        done += len(block)
        if progress is not None:
            progress(done, total)
