"""Downloading one file over several SFTP sessions at once, by ranges, resumably.

One SFTP session over a long link is capped by what it keeps in flight (and paramiko's
prefetch scans its buffers at every read), so a pull opens ``streams`` sessions (each
its own channel of the same connection), cuts the file into blocks of ``BLOCK_BYTES``
and lets each session fetch the next block with ``IN_FLIGHT`` read requests in flight.
Where the server refuses more sessions (``MaxSessions``), the ones that opened carry on:
at worst one stream, as before.

The reads use paramiko's own asynchronous request interface (``SFTPClient._async_request``
and ``_read_response``, the machinery behind its ``prefetch``) with a small callback
object per session: each answer is written at its offset as it arrives, and a short
answer asks again for the rest. Blocks done are recorded beside the partial file
(``NAME.ranges``, with the remote file's size and mtime), so an interrupted pull resumes
where it stopped, and a partial file of the old single-stream kind resumes from its
length. The sha256 of the result is computed in order while the blocks arrive.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paramiko
from paramiko.sftp import CMD_DATA, CMD_READ, CMD_STATUS, int64

from remote.transport.base import Progress, TransportError
from remote.transport.channel import errors

BLOCK_BYTES = 8 << 20
REQUEST_BYTES = 128 * 1024
#: Read requests kept in flight per session (4 MiB; the channel window is 16 MiB).
IN_FLIGHT = 32
STREAMS = 4
STATE_SUFFIX = ".ranges"


class _Blocks:
    """Which blocks are done, which are next, and the state file that remembers it."""

    def __init__(self, path: str, identity: dict[str, Any], size: int, resume: bool) -> None:
        self.path = path
        self.state = path + STATE_SUFFIX
        self.identity = identity
        self.count = (size + BLOCK_BYTES - 1) // BLOCK_BYTES
        self.done: set[int] = set()
        #: The first byte still missing, for a block a single-stream partial file
        #: filled in part.
        self.starts: dict[int, int] = {}
        self.cond = threading.Condition()
        self.error: BaseException | None = None
        if resume:
            self.done = self._resumed(size)
        self.todo = deque(i for i in range(self.count) if i not in self.done)

    def resumed_bytes(self, size: int) -> int:
        """Bytes already on disk when the download starts."""
        whole = sum(min(BLOCK_BYTES, size - i * BLOCK_BYTES) for i in self.done)
        return whole + sum(start - i * BLOCK_BYTES for i, start in self.starts.items())

    def _resumed(self, size: int) -> set[int]:
        if not os.path.exists(self.path):
            return set()
        try:
            saved = json.loads(Path(self.state).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            saved = None
        if isinstance(saved, dict) and saved.get("identity") == self.identity:
            return {i for i in saved.get("done") or () if isinstance(i, int)
                    and 0 <= i < self.count}
        if saved is None and not os.path.exists(self.state):
            # A partial file of the single-stream kind: its bytes are good.
            have = min(os.path.getsize(self.path), size)
            if have % BLOCK_BYTES and have < size:
                self.starts[have // BLOCK_BYTES] = have
            return {i for i in range(self.count) if min((i + 1) * BLOCK_BYTES, size) <= have}
        return set()

    def next(self) -> int | None:
        """The next block to fetch (``None``: none left, or a stream failed)."""
        with self.cond:
            return self.todo.popleft() if self.todo and self.error is None else None

    def finished(self, index: int) -> None:
        """Record block ``index`` as written (and remember it on disk: one writer at a
        time, so the record is always whole)."""
        with self.cond:
            self.done.add(index)
            self.cond.notify_all()
            with contextlib.suppress(OSError):
                with open(self.state + ".tmp", "w", encoding="utf-8") as fh:
                    json.dump({"identity": self.identity, "done": sorted(self.done)}, fh)
                os.replace(self.state + ".tmp", self.state)

    def fail(self, exc: BaseException) -> None:
        """A stream failed: the others stop taking blocks."""
        with self.cond:
            self.error = self.error or exc
            self.cond.notify_all()

    def wait_for(self, index: int) -> bool:
        """Block until ``index`` is done (``False``: a stream failed first)."""
        with self.cond:
            while index not in self.done and self.error is None:
                self.cond.wait(1.0)
            return index in self.done


class _Session:
    """One SFTP session fetching blocks into the open file ``fd`` with requests in
    flight (paramiko calls ``_async_response`` for each answer)."""

    def __init__(self, sftp: paramiko.SFTPClient, remote: str, fd: int, size: int) -> None:
        self.sftp = sftp
        self.fd = fd
        self.size = size
        self.file = sftp.open(remote, "rb")
        self.pending: dict[int, tuple[int, int, int]] = {}
        self.left: dict[int, int] = {}
        self.queue: deque[tuple[int, int, int]] = deque()
        self.completed: list[int] = []
        self.problem: TransportError | None = None
        #: Blocks this session took.
        self.fetched = 0

    def fetch(self, blocks: _Blocks) -> None:
        """Take blocks until none is left, keeping ``IN_FLIGHT`` requests out."""
        while True:
            while len(self.pending) < IN_FLIGHT:
                if not self.queue:
                    index = blocks.next()
                    if index is None:
                        break
                    self.fetched += 1
                    self._plan(index, blocks)
                self._ask(*self.queue.popleft())
            if not self.pending:
                return
            self.sftp._read_response()  # type: ignore[attr-defined]  # private, unstubbed
            if self.problem is not None:
                raise self.problem
            for index in self.completed:
                blocks.finished(index)
            self.completed.clear()

    def _plan(self, index: int, blocks: _Blocks) -> None:
        start = blocks.starts.get(index, index * BLOCK_BYTES)
        end = min(index * BLOCK_BYTES + BLOCK_BYTES, self.size)
        self.left[index] = end - start
        self.queue.extend((index, off, min(REQUEST_BYTES, end - off))
                          for off in range(start, end, REQUEST_BYTES))

    def _ask(self, index: int, offset: int, length: int) -> None:
        num = self.sftp._async_request(  # type: ignore[attr-defined]  # private, unstubbed
            self, CMD_READ, self.file.handle, int64(offset), length)
        self.pending[num] = (index, offset, length)

    def _async_response(self, t: int, msg: paramiko.Message, num: int) -> None:
        index, offset, length = self.pending.pop(num)
        if t == CMD_STATUS:
            try:
                self.sftp._convert_status(msg)  # type: ignore[attr-defined]  # private
            except EOFError:
                self.problem = TransportError("the file shrank while downloading")
            except OSError as exc:
                self.problem = TransportError(f"reading failed: {exc}")
            else:
                self.problem = TransportError("the SFTP server answered a read with no data")
            return
        if t != CMD_DATA:
            self.problem = TransportError("the SFTP server answered a read with no data")
            return
        data = msg.get_string()
        if not data:
            self.problem = TransportError("the file shrank while downloading")
            return
        os.pwrite(self.fd, data, offset)
        if len(data) < length:  # a server may answer with less: ask for the rest
            self._ask(index, offset + len(data), length - len(data))
        self.left[index] -= len(data)
        if self.left[index] == 0:
            del self.left[index]
            self.completed.append(index)

    def close(self) -> None:
        """Close the remote handle and the session."""
        with contextlib.suppress(Exception):
            self.file.close()
        with contextlib.suppress(Exception):
            self.sftp.close()


def ranged_download(open_sftp: Callable[[], paramiko.SFTPClient], remote: str, local: str,
                    *, label: str, streams: int = STREAMS, resume: bool = True,
                    progress: Progress | None = None,
                    opened: Callable[[], None] | None = None) -> tuple[str, int, int]:
    """Download ``remote`` into ``local`` over up to ``streams`` sessions from
    ``open_sftp``; returns ``(sha256 of local, size, sessions used)``. ``opened`` is
    called once the first session is open (a box that allows one session at a time has
    it then). Raises ``TransportError`` (one line) when the file is missing, shrinks or a
    session fails."""
    first = open_sftp()
    if opened is not None:
        opened()
    try:
        with errors(f"downloading {remote} from {label}"):
            try:
                st = first.stat(remote)
            except FileNotFoundError:
                raise TransportError(f"{remote} does not exist on {label}") from None
    except BaseException:
        first.close()
        raise
    size = st.st_size or 0
    identity = {"remote": remote, "size": size, "mtime": st.st_mtime}
    blocks = _Blocks(local, identity, size, resume)
    kept = bool(blocks.done or blocks.starts)
    if not blocks.done:
        with contextlib.suppress(OSError):
            os.unlink(blocks.state)
    os.makedirs(os.path.dirname(os.path.abspath(local)), exist_ok=True)
    fd = os.open(local, os.O_RDWR | os.O_CREAT | (0 if kept else os.O_TRUNC), 0o644)
    workers = None
    digest = hashlib.sha256()
    try:
        os.ftruncate(fd, size)
        workers = _run_streams(first, open_sftp, remote, fd, size, blocks, streams, label)
        if progress and kept:
            progress(blocks.resumed_bytes(size), size)
        done_bytes = 0
        for data in _in_order(fd, size, blocks):
            digest.update(data)
            done_bytes += len(data)
            if progress:
                progress(done_bytes, size)
        if progress and size == 0:
            progress(0, 0)
    except BaseException as exc:
        blocks.fail(exc)  # the streams stop taking blocks; what is done stays recorded
        raise
    finally:
        if workers is not None:
            workers.join()  # before the file closes: no write may land elsewhere
        else:
            first.close()
        os.close(fd)
    if blocks.error is not None:
        raise blocks.error if isinstance(blocks.error, TransportError) else \
            TransportError(f"downloading {remote} from {label}: {blocks.error}")
    with contextlib.suppress(OSError):
        os.unlink(blocks.state)
    return digest.hexdigest(), size, workers.count


class _Workers:
    """The download threads: ``count`` sessions that fetched a block, ``join`` waits for
    them."""

    def __init__(self) -> None:
        self.threads: list[threading.Thread] = []
        self.count = 0
        self.lock = threading.Lock()

    def join(self) -> None:
        """Wait for every download thread."""
        for thread in self.threads:
            thread.join()


def _run_streams(first: paramiko.SFTPClient, open_sftp: Callable[[], paramiko.SFTPClient],
                 remote: str, fd: int, size: int, blocks: _Blocks, streams: int,
                 label: str) -> _Workers:
    workers = _Workers()

    def work(sftp: paramiko.SFTPClient | None) -> None:
        try:
            if sftp is None:
                if not blocks.todo:
                    return
                try:
                    sftp = open_sftp()
                except TransportError:
                    return  # the server limits sessions: the others carry on
            with errors(f"downloading {remote} from {label}"):
                session = _Session(sftp, remote, fd, size)
                try:
                    session.fetch(blocks)
                finally:
                    session.close()
                if session.fetched:
                    with workers.lock:
                        workers.count += 1
        except BaseException as exc:  # noqa: BLE001 (reported by the caller, once)
            blocks.fail(exc)
            if sftp is not None:
                with contextlib.suppress(Exception):
                    sftp.close()

    wanted = max(1, min(streams, len(blocks.todo)))
    for n in range(wanted):
        thread = threading.Thread(target=work, args=(first if n == 0 else None,),
                                  name=f"pull {n}", daemon=True)
        workers.threads.append(thread)
        thread.start()
    return workers


def _in_order(fd: int, size: int, blocks: _Blocks) -> Iterator[bytes]:
    """Each block's bytes, in order, as soon as it is on disk."""
    for index in range(blocks.count):
        if not blocks.wait_for(index):
            return
        start = index * BLOCK_BYTES
        yield os.pread(fd, min(BLOCK_BYTES, size - start), start)
