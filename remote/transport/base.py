"""One interface for reaching a box: over SSH (``remote.transport.ssh``) or on this machine
(``remote.transport.local``, for ``gpurent-tui --local`` and the demo).

Paths are strings in the box's own syntax (POSIX). Every call that can block on the
network takes or has a timeout. Shell commands are strings run by ``sh -c`` on the box;
callers quote every user value with ``shlex.quote`` (see ``remote.runs.launch``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol, Self

#: Most bytes of stdout, and of stderr, that ``Transport.run`` keeps by default: more
#: than the largest report a box tool sends (a 4 MiB log chunk as escaped JSON), far
#: less than a box that answers without end could make the laptop hold.
MAX_REPLY = 32 << 20

#: ``progress(done_bytes, total_bytes)`` for uploads and downloads.
Progress = Callable[[int, int], None]


class TransportError(Exception):
    """A box could not be reached or a transport operation failed; the message is one
    line a user can act on."""


class LineTooLong(TransportError):
    """A stream sent more than its line cap without a newline; the stream is closed."""


class LineSplitter:
    """Bytes in, whole lines out, for the streams' ``lines``: each byte is scanned for a
    newline once, and ``LineTooLong`` (saying ``who``) is raised past ``max_line``
    bytes without one."""

    def __init__(self, who: str) -> None:
        self.buf = bytearray()
        self.who = who
        self._scanned = 0  # bytes of buf already known to hold no newline

    def add(self, data: bytes) -> None:
        """Bytes that arrived."""
        self.buf += data

    def take(self, max_line: int | None = None) -> bytes | None:
        """The next whole line (without its newline), or ``None`` until more arrive."""
        nl = self.buf.find(b"\n", self._scanned)
        if nl >= 0:
            line = bytes(self.buf[:nl])
            del self.buf[:nl + 1]
            self._scanned = 0
            return line
        self._scanned = len(self.buf)
        if max_line is not None and self._scanned > max_line:
            raise LineTooLong(f"{self.who} a line over {max_line} bytes")
        return None

    def rest(self) -> bytes:
        """What is left without a newline (at EOF), emptied."""
        rest = bytes(self.buf)
        self.buf.clear()
        self._scanned = 0
        return rest


class Unreachable(TransportError):
    """Nothing answered as an SSH server (no route, refused, timed out, no banner yet):
    unlike a refused login or host key, trying again later may work."""


class NeedsSetup(TransportError):
    """A setting on this laptop is missing or wrong (a provider's API key, a line of the
    config file): trying again cannot work until it is set; the message says what."""


class LoginRefused(NeedsSetup):
    """The box's SSH server answered but took none of the keys offered for the user:
    the same login is refused again until it changes (``-i KEY``, the User or
    IdentityFile of ``~/.ssh/config``); the message says which keys were tried."""


@dataclass(frozen=True)
class NamedBox:
    """A box known by ``name`` (``KIND:ID``, such as ``vast:4242``) that answers SSH at
    ``host:port`` now. It is reached with what ``~/.ssh/config`` says for the name
    (``Host vast:*``: User, IdentityFile, ProxyJump...) at this address, as ``user``
    unless the config names a User, its host key filed under the name unless the config
    gives a HostKeyAlias."""

    name: str
    host: str
    port: int
    user: str


@dataclass(frozen=True)
class RunResult:
    """The outcome of a finished command on the box."""

    rc: int
    stdout: bytes
    stderr: bytes

    @property
    def ok(self) -> bool:
        """Whether the command exited 0."""
        return self.rc == 0


@dataclass(frozen=True)
class FileStat:
    """Size and modification time of a file on the box."""

    size: int
    mtime: float


class Stream(Protocol):
    """A long-running command whose stdout is read line by line (the follower)."""

    def lines(self, timeout: float, max_line: int | None = None) -> Iterator[bytes]:
        """Yield stdout lines as they arrive; stop when the command ends. Raises
        ``TimeoutError`` when nothing (not even a heartbeat) arrived for ``timeout`` s and
        ``LineTooLong`` as soon as ``max_line`` bytes came without a newline (so a box
        cannot make the laptop hold an endless line)."""
        ...

    def close(self) -> None:
        """Stop the command and release the channel. Idempotent."""
        ...


class ReplyTooLarge(TransportError):
    """A command's reply passed its cap; reading stopped there (the message says so)."""


class Transport(Protocol):
    """What the rest of ``remote`` needs from a box."""

    #: A short label for the UI: ``local`` or ``user@host:port``.
    label: str
    #: Shell words that start the box's python with our ``trainer`` importable, e.g.
    #: ``PYTHONPATH=/root/.cache/gpurent/trainer-0.1.0 /usr/bin/python3``. Set by
    #: bootstrap; ``python3 -m trainer`` commands are built from it by the door to the box
    #: tools (``remote.link.tools``) as f"{trainer_prefix} -m trainer ...".
    trainer_prefix: str

    def run(self, command: str, *, stdin: bytes | None = None, timeout: float = 60.0,
            max_bytes: int = MAX_REPLY) -> RunResult:
        """Run ``command`` with ``sh -c`` and wait for it. ``stdin`` carries secrets.
        ``ReplyTooLarge`` when stdout or stderr passes ``max_bytes``."""
        ...

    def spawn_detached(self, command: str, *, cwd: str, log_path: str,
                       stdin: bytes | None = None) -> int:
        """Start ``command`` in a new session (``setsid nohup``), stdout and stderr to
        ``log_path``, so that nothing on the laptop can kill it; return its pid (which is
        also its process group id). ``stdin`` is written to it once and closed. Relative
        ``cwd`` and ``log_path`` are taken from the login directory, as ``absolute``."""
        ...

    def absolute(self, path: str) -> str:
        """``path`` as an absolute path on the box: a relative one is taken from the login
        directory, where every command starts (so it means the same after a ``cd``)."""
        ...

    def stream(self, command: str, *, stdin: bytes | None = None) -> Stream:
        """Start ``command`` and return its stdout as a line stream."""
        ...

    def stat(self, path: str) -> FileStat | None:
        """The file's size and mtime, or ``None`` when it does not exist."""
        ...

    def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> bytes:
        """Up to ``max_bytes`` of the file from ``offset`` (``b""`` past the end)."""
        ...

    def listdir(self, path: str) -> list[str]:
        """Names in a directory (``[]`` when it does not exist)."""
        ...

    def signal_group(self, pgid: int, sig: int) -> bool:
        """Send ``sig`` to process group ``pgid``; ``False`` when no such group."""
        ...

    def pid_alive(self, pid: int) -> bool:
        """Whether ``pid`` is a live (non-zombie) process on the box."""
        ...

    def upload(self, local: str, remote: str, progress: Progress | None = None) -> None:
        """Copy a local file to the box (atomically: temp name, then rename)."""
        ...

    def download(self, remote: str, local: str, progress: Progress | None = None,
                 resume: bool = True) -> None:
        """Copy a file from the box, resuming a partial ``local`` when ``resume``."""
        ...

    def close(self) -> None:
        """Release the connection. Idempotent."""
        ...

    def __enter__(self) -> Self:
        """The transport itself, closed when the ``with`` block ends."""
        ...

    def __exit__(self, *exc: object) -> None:
        """Close it (``close``)."""
        ...
