"""``VolumeTransport``: the ``Transport`` interface on a Modal Volume, read with the
``modal`` client's Volume API, for watching a serverless run (``modal:APP``) with the
panes and commands that watch a box.

A Volume holds files and runs nothing: ``stat``, ``read``, ``listdir`` and ``download``
read it (only what the container committed is seen outside it); a command answers exit
127, as a box without the program would, and there is no stream, so a watcher polls the
files (``remote.watch.polling``). Whether the trainer's pid lives is not visible from
outside the container: ``pid_alive`` answers whether the app still runs, which the
caller tells through ``alive``. Paths are relative to the Volume's root.
"""

from __future__ import annotations

import os
import posixpath
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

from remote.transport.base import (
    FileStat,
    NeedsSetup,
    Progress,
    RunResult,
    TransportError,
    Unreachable,
)

#: How long one directory listing answers ``stat`` for the files in it (a poll asks for
#: several files of one directory; one listing answers them all).
LIST_TTL = 0.5
#: The block size of a Modal Volume (v2): a ranged read's URLs are one per block.
BLOCK_SIZE = 8 * 1024 * 1024
#: How long one block may take to come.
BLOCK_TIMEOUT = 60.0


def _volume(name: str) -> Any:
    try:
        import modal
    except ImportError as exc:
        raise NeedsSetup("the Modal client is not installed: pip install "
                         "'gpurent-tui[modal]'") from exc
    return modal.Volume.from_name(name)


def read_range(volume: Any, path: str, start: int, length: int) -> bytes:
    """Bytes ``start`` to ``start + length`` of ``path`` in ``volume`` (a ``modal.Volume``;
    fewer at the end of the file): ``VolumeGetFile2`` with ``start``/``len`` gives the
    URLs of only the blocks of that range, which are fetched here.

    The public ``Volume.read_file`` reads files whole; this asks through the client's
    internal stub (``_Volume.client._stub``, reached with ``synchronizer._translate_in``),
    as ``read_file`` does, which is pinned to modal 1.6.4."""
    from modal._utils.async_utils import synchronizer
    from modal_proto import api_pb2

    volume.hydrate()
    raw = synchronizer._translate_in(volume)

    async def ask() -> Any:
        req = api_pb2.VolumeGetFile2Request(volume_id=raw.object_id, path=path, start=start,
                                            len=length, client_pads_blocks=True)
        return await raw.client._stub.VolumeGetFile2(req)

    answer = synchronizer.create_blocking(ask)()
    # The range as the file holds it: a length past the end must never become zeros.
    stop = answer.start + answer.len
    if answer.size:
        stop = min(stop, answer.size)
    out = bytearray()
    pos = answer.start
    for url in answer.get_urls:
        end = min(stop, (pos // BLOCK_SIZE + 1) * BLOCK_SIZE)
        if end <= pos:
            break
        with urllib.request.urlopen(url, timeout=BLOCK_TIMEOUT) as got:  # noqa: S310 (Modal's URL)
            body = got.read(end - pos + 1)
        if len(body) > end - pos:
            raise TransportError(f"Modal sent a block longer than {end - pos} bytes")
        out += body.ljust(end - pos, b"\0")  # trailing zeros may be left out of a block
        pos = end
    return bytes(out[:length])


class VolumeTransport:
    """Modal Volume ``volume`` as a read-only box; ``alive()`` says whether the app that
    writes it still runs (``None``: unknown)."""

    def __init__(self, volume: str, *, label: str | None = None,
                 alive: Callable[[], bool | None] | None = None) -> None:
        self.volume_name = volume
        self.label = label or f"modal volume {volume}"
        self.trainer_prefix = ""
        self._alive = alive
        self._volume = _volume(volume)
        self._lock = threading.Lock()
        self._listed: dict[str, tuple[float, dict[str, FileStat] | None]] = {}

    # ------------------------------------------------------------------ reading

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except FileNotFoundError:
            raise
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise Unreachable(f"Modal did not answer ({what}): {exc}") from exc
        except Exception as exc:  # noqa: BLE001 (modal's own errors: one line for the user)
            if type(exc).__name__ == "NotFoundError":
                raise FileNotFoundError(str(exc)) from exc
            raise TransportError(f"Modal refused {what}: {exc}") from exc

    def _listing(self, directory: str) -> dict[str, FileStat] | None:
        directory = directory.strip("/") or "/"
        now = time.monotonic()
        with self._lock:
            cached = self._listed.get(directory)
        if cached is not None and now - cached[0] < LIST_TTL:
            return cached[1]
        try:
            entries = self._call("a listing", lambda: self._volume.listdir(directory))
            listing: dict[str, FileStat] | None = {
                posixpath.basename(e.path.rstrip("/")): FileStat(int(e.size), float(e.mtime))
                for e in entries}
        except FileNotFoundError:
            listing = None
        with self._lock:
            self._listed[directory] = (now, listing)
        return listing

    def stat(self, path: str) -> FileStat | None:
        """The file's size and mtime as committed, or ``None``."""
        parent, name = posixpath.split(path.strip("/"))
        listing = self._listing(parent)
        return None if listing is None else listing.get(name)

    def listdir(self, path: str) -> list[str]:
        """Names in a directory of the Volume (``[]`` when it does not exist)."""
        return sorted(self._listing(path) or {})

    def _chunks(self, path: str) -> Iterator[bytes]:
        try:
            yield from self._call("a read", lambda: self._volume.read_file(path.strip("/")))
        except FileNotFoundError:
            return

    def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> bytes:
        """Up to ``max_bytes`` of the file from ``offset``, as committed (``b""`` past the
        end or when it does not exist): only that range is asked of Modal and fetched."""
        if max_bytes <= 0:
            return b""
        try:
            return self._call("a read", lambda: read_range(
                self._volume, path.strip("/"), max(0, offset), max_bytes))
        except FileNotFoundError:
            return b""

    def download(self, remote: str, local: str, progress: Progress | None = None,
                 resume: bool = True) -> None:
        """Copy a file of the Volume here (whole, atomically: temp name, then rename)."""
        st = self.stat(remote)
        if st is None:
            raise TransportError(f"{remote}: not in Modal volume {self.volume_name}")
        tmp = f"{local}.part"
        done = 0
        with open(tmp, "wb") as f:
            for chunk in self._chunks(remote):
                f.write(chunk)
                done += len(chunk)
                if progress is not None:
                    progress(done, st.size)
        os.replace(tmp, local)

    # ------------------------------------------------------------ what it cannot

    def run(self, command: str, *, stdin: bytes | None = None, timeout: float = 60.0,
            max_bytes: int = 0) -> RunResult:
        """Nothing runs on a Volume: exit 127, as for a program that is not there."""
        return RunResult(127, b"", b"a Modal Volume runs no commands\n")

    def stream(self, command: str, *, stdin: bytes | None = None) -> Any:
        """No stream: a Volume is read by polling its files."""
        raise TransportError("a Modal Volume runs no commands: its files are polled")

    def spawn_detached(self, command: str, *, cwd: str, log_path: str,
                       stdin: bytes | None = None) -> int:
        """Nothing starts on a Volume (a Modal run starts with ``gpurent launch``)."""
        raise TransportError("a Modal Volume runs no commands")

    def absolute(self, path: str) -> str:
        """Paths are the Volume's own, from its root."""
        return path.strip("/") or "/"

    def signal_group(self, pgid: int, sig: int) -> bool:
        """No process of the container can be signalled from here."""
        return False

    def pid_alive(self, pid: int) -> bool:
        """Whether the app that writes the Volume still runs (a pid inside its container
        cannot be seen from outside)."""
        return bool(self._alive()) if self._alive is not None else False

    def upload(self, local: str, remote: str, progress: Progress | None = None) -> None:
        """The runs Volume is the container's to write."""
        raise TransportError("gpurent does not write to a Modal Volume")

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> VolumeTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
