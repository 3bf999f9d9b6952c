"""Reaching a box over SSH with paramiko: ``connect()`` and ``SSHTransport``.

``connect`` accepts what ``ssh`` accepts (``user@host``, ``-p PORT``, ``-i KEY``,
``~/.ssh/config`` aliases as OpenSSH resolves them: ``remote.transport.openssh``, else
paramiko's parser), with HostName, User, Port, IdentityFile, ProxyJump through a channel
of the jump host, ProxyCommand and HostKeyAlias. It refuses hosts that cannot be a box
(``remote.transport.hostpolicy``) before any traffic, authenticates with ssh-agent keys
and key files, checks the host key against ``known_hosts`` (``remote.transport.hostkeys``)
and turns on keepalives. Every blocking call has a timeout: connect, banner, key
exchange, auth, channel open, command, SFTP request.

Errors are ``remote.transport.base.TransportError`` (``Unreachable`` when nothing
answered, or ``HostKeyChanged`` / ``HostKeyRevoked`` / ``HostKeyUnknown``) with a one-line
message. Paramiko never logs channel data here (no hexdump), and its own logger is off
unless configured: its failures reach the user as our one-line errors, and secrets sent
over stdin never reach a log.
"""

from __future__ import annotations

import contextlib
import logging
import os
import posixpath
import select
import shlex
import signal
import stat as stat_mod
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import paramiko

from remote.transport import hostpolicy, openssh, ranged
from remote.transport.base import (
    MAX_REPLY,
    FileStat,
    NamedBox,
    Progress,
    ReplyTooLarge,
    RunResult,
    TransportError,
)
from remote.transport.channel import SSHStream, SSHTimeout, errors, exec_nowait, watchdog
from remote.transport.handshake import (
    MAX_PACKET_SIZE,
    WINDOW_SIZE,
    HandshakeOptions,
    StepProgress,
    open_connection,
)
from remote.transport.hostkeys import (
    AskUnknown,
    HostKeyChanged,
    HostKeyRevoked,
    HostKeyUnknown,
    fingerprint,
)
from remote.transport.sshconfig import HostSpec

__all__ = ["HostKeyChanged", "HostKeyRevoked", "HostKeyUnknown", "SSHTimeout", "SSHTransport",
           "connect"]

#: SFTP read requests in flight during a download (32 KiB each: 3 MiB, enough for
#: ~37 MB/s at 80 ms). More is slower: paramiko scans its prefetch buffers per read.
PREFETCH_REQUESTS = 96
COPY_CHUNK = 1 << 20
#: Waits before asking again for a session the server refused (see ``_open_session``).
SESSION_RETRIES = (0.05, 0.2)

# Paramiko logs its transport thread's failures at ERROR, tracebacks included (23 lines
# for a reset during the banner); each also reaches us as an exception that becomes a
# one-line error. So its logger is off unless someone configured it (to debug, say).
if logging.getLogger("paramiko").level == logging.NOTSET:
    logging.getLogger("paramiko").setLevel(logging.CRITICAL + 1)


def connect(target: str | NamedBox, *, port: int | None = None, accept_new: bool = False,
            ask_unknown: AskUnknown | None = None, timeout: float = 15.0,
            progress: StepProgress | None = None, known_hosts: str | None = None,
            ssh_config: str | None = None, identity_files: tuple[str, ...] = (),
            allow_agent: bool = True, keepalive: float | None = None) -> SSHTransport:
    """Connect to ``target`` (``user@host``, ``host`` or an ``~/.ssh/config`` alias, or
    a ``NamedBox``: ``vast:4242`` at its provider's address, with the config's
    ``Host vast:*`` settings).

    ``ask_unknown(host, key_type, fingerprint)`` decides about an unknown host key (called
    from this thread); ``accept_new`` accepts it without asking. ``known_hosts`` (default:
    the config's UserKnownHostsFile, else ``~/.ssh/known_hosts``) and ``ssh_config``
    (default ``~/.ssh/config``) are paths; ``identity_files`` (``ssh -i``) are tried
    before the config's. ``timeout`` bounds each step (TCP connect, banner, key exchange,
    auth, channel opens)."""
    say = progress or (lambda _msg: None)
    settings = openssh.resolver(ssh_config, timeout)
    spec = settings(target, port, identity_files)
    refused = hostpolicy.refusal(spec.hostname, spec.user)
    if refused:
        raise TransportError(refused)
    opts = HandshakeOptions(accept_new=accept_new, ask_unknown=ask_unknown, timeout=timeout,
                    known_hosts=known_hosts, identity_files=identity_files,
                    allow_agent=allow_agent, keepalive=keepalive, say=say)
    hops: list[paramiko.Transport] = []
    try:
        for jump in spec.proxy_jump:
            via = hops[-1] if hops else None
            hops.append(open_connection(settings(jump, None, ()), via, opts))
        transport = open_connection(spec, hops[-1] if hops else None, opts)
    except BaseException:
        for hop in reversed(hops):
            hop.close()
        raise
    say(f"connected to {spec.label}")
    return SSHTransport(transport, spec, timeout=timeout, hops=hops)


class SSHTransport:
    """``remote.transport.base.Transport`` over one authenticated paramiko connection.

    Commands run in exec channels; files move over SFTP (one shared session for small
    requests, a fresh one per upload or download so a long transfer blocks nothing)."""

    def __init__(self, transport: paramiko.Transport, spec: HostSpec, *, timeout: float = 15.0,
                 hops: list[paramiko.Transport] | None = None) -> None:
        self._transport = transport
        self._hops = hops or []
        self.spec = spec
        self.timeout = timeout
        self.label = spec.label
        self.trainer_prefix = "python3"
        self._sftp: paramiko.SFTPClient | None = None
        self._sftp_lock = threading.RLock()
        self._home: str | None = None
        self._login_dir: str | None = None

    # ---------------------------------------------------------------- commands

    @property
    def peer_ip(self) -> str | None:
        """The IP address this connection reached (``None`` through a jump host or a
        proxy command, where the socket's peer is not the box)."""
        if self._hops or self.spec.proxy_command:
            return None
        with contextlib.suppress(Exception):
            return str(self._transport.getpeername()[0])
        return None

    @property
    def box_id(self) -> str:
        """``user@`` and the box's host key fingerprint: the same box at whatever address
        or port it is reached (what the laptop remembers a box by)."""
        return f"{self.spec.user}@{fingerprint(self._transport.get_remote_server_key())}"

    @property
    def is_active(self) -> bool:
        """Whether the SSH connection is still up (as far as paramiko knows)."""
        return self._transport.is_active()

    def _open_session(self, **kwargs: object) -> paramiko.Channel:
        """``open_session``, asked up to three times when refused: a server that allows
        few sessions at a time (``MaxSessions``) refuses a new one until it has finished
        closing the last, a moment after the client closed it."""
        for wait in SESSION_RETRIES:
            try:
                return self._transport.open_session(**kwargs)  # type: ignore[arg-type]
            except paramiko.ChannelException:
                time.sleep(wait)
        return self._transport.open_session(**kwargs)  # type: ignore[arg-type]

    def _channel(self, timeout: float) -> paramiko.Channel:
        with errors(f"opening a channel to {self.label}"):
            if not self._transport.is_active():
                raise TransportError(f"the connection to {self.label} is closed")
            return self._open_session(timeout=timeout)

    def run(self, command: str, *, stdin: bytes | None = None, timeout: float = 60.0,
            max_bytes: int = MAX_REPLY) -> RunResult:
        """Run ``command`` with the login shell's ``-c`` and wait at most ``timeout`` s.
        ``stdin`` (a secret, say) is written to the command and closed. Past
        ``max_bytes`` of stdout or of stderr the channel is closed (the command on the box
        gets SIGPIPE) and ``ReplyTooLarge`` raised: a box cannot make the laptop hold an
        endless answer."""
        deadline = time.monotonic() + timeout
        chan = self._channel(min(timeout, self.timeout))
        try:
            with errors(f"running a command on {self.label}"):
                chan.settimeout(max(0.1, deadline - time.monotonic()))
                exec_nowait(chan, command)
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()
                out, err = bytearray(), bytearray()
                while True:
                    while chan.recv_ready():
                        out += chan.recv(1 << 16)
                        self._within(out, max_bytes, "output")
                    while chan.recv_stderr_ready():
                        err += chan.recv_stderr(1 << 16)
                        self._within(err, max_bytes, "error output")
                    if (chan.eof_received or chan.closed) and not chan.recv_ready() \
                            and not chan.recv_stderr_ready():
                        break
                    if not self._transport.is_active():
                        raise TransportError(f"the connection to {self.label} was lost")
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise SSHTimeout(f"command on {self.label} timed out after {timeout:g}s")
                    select.select([chan], [], [], min(remaining, 1.0))
                if chan.closed and not chan.eof_received and not chan.status_event.is_set():
                    raise TransportError(f"{self.label} refused to run the command")
                if not chan.status_event.wait(max(0.0, deadline - time.monotonic())):
                    raise SSHTimeout(f"command on {self.label} timed out after {timeout:g}s")
                return RunResult(chan.exit_status, bytes(out), bytes(err))
        finally:
            chan.close()

    def _within(self, data: bytearray, max_bytes: int, what: str) -> None:
        """``ReplyTooLarge`` once ``data`` holds more than ``max_bytes``."""
        if len(data) > max_bytes:
            raise ReplyTooLarge(f"a command on {self.label} sent more than {max_bytes:,} "
                                f"bytes of {what}: stopped reading it (the cap on a reply)")

    def spawn_detached(self, command: str, *, cwd: str, log_path: str,
                       stdin: bytes | None = None) -> int:
        """Start ``command`` with ``setsid nohup sh -c`` in ``cwd``, output to ``log_path``;
        return its pid (= its process group). ``stdin`` reaches it through a pipe fed by
        ``cat`` from this channel (never argv, never a file); the launching shell waits
        until it was all handed over, so none is lost when the channel closes."""
        cwd, log_path = self.absolute(cwd), self.absolute(log_path)
        detached = (f"setsid nohup sh -c {shlex.quote(command)} "
                    f"> {shlex.quote(log_path)} 2>&1")
        if stdin is None:
            script = f"{detached} < /dev/null & echo $!"
        else:
            # An async list's stdin defaults to /dev/null, so hand the pipe over on fd 3.
            script = f"cat | {{ exec 3<&0; {detached} <&3 3<&- & echo $!; }}"
        result = self.run(f"cd {shlex.quote(cwd)} && {{ {script}; }}", stdin=stdin or None,
                          timeout=max(self.timeout, 30.0))
        text = result.stdout.decode("utf-8", errors="replace").strip()
        if not result.ok or not text.isdigit():
            err = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
            raise TransportError(f"could not start the command on {self.label}: "
                                 f"{err[-1] if err else 'no pid printed'}")
        return int(text)

    def stream(self, command: str, *, stdin: bytes | None = None) -> SSHStream:
        """Start ``command``; its stdout comes back as lines (see ``SSHStream.lines``)."""
        chan = self._channel(self.timeout)
        try:
            with errors(f"starting a command on {self.label}"):
                chan.settimeout(self.timeout)
                exec_nowait(chan, command)
                if stdin:
                    chan.sendall(stdin)
                chan.shutdown_write()
        except BaseException:
            chan.close()
            raise
        return SSHStream(chan)

    def signal_group(self, pgid: int, sig: int) -> bool:
        """``kill -s SIG -- -PGID`` on the box; ``False`` when there is no such group (and
        for a pgid <= 1: ``kill -- -1`` would reach every process we may signal)."""
        if int(pgid) <= 1:
            return False
        name = signal.Signals(sig).name.removeprefix("SIG")
        result = self.run(f"kill -s {name} -- -{int(pgid)}", timeout=self.timeout)
        return result.ok

    def pid_alive(self, pid: int) -> bool:
        """Whether ``pid`` exists on the box and is not a zombie (from /proc/PID/stat)."""
        if int(pid) <= 0:
            return False
        result = self.run(f"cat /proc/{int(pid)}/stat 2>/dev/null", timeout=self.timeout)
        if not result.ok:
            return False
        fields = result.stdout.rsplit(b")", 1)[-1].split()
        return bool(fields) and fields[0] not in (b"Z", b"X")

    @property
    def home(self) -> str:
        """The box user's ``$HOME`` (asked once)."""
        if self._home is None:
            result = self.run('printf %s "$HOME"', timeout=self.timeout)
            home = result.stdout.decode("utf-8", errors="replace")
            if not result.ok or not home.startswith("/"):
                raise TransportError(f"cannot find the home directory on {self.label}")
            self._home = home
        return self._home

    def absolute(self, path: str) -> str:
        """``path`` on the box made absolute against the login directory (asked once)."""
        if path.startswith("/"):
            return path
        if self._login_dir is None:
            # Capped: the box's answer is a claim, and one line is all a path needs.
            result = self.run("pwd | head -c 4096", timeout=self.timeout)
            where = result.stdout.decode("utf-8", errors="replace").strip()
            if not result.ok or not where.startswith("/") or "\n" in where:
                raise TransportError(f"cannot find the login directory on {self.label}")
            self._login_dir = where
        return posixpath.normpath(posixpath.join(self._login_dir, path))

    def expand(self, path: str) -> str:
        """``path`` with a leading ``~`` replaced by the box's home directory."""
        if path == "~" or path.startswith("~/"):
            return self.home + path[1:]
        return path

    # ---------------------------------------------------------------- files

    def _new_sftp(self) -> paramiko.SFTPClient:
        with errors(f"opening SFTP on {self.label}"):
            if not self._transport.is_active():
                raise TransportError(f"the connection to {self.label} is closed")
            chan = self._open_session(timeout=self.timeout,
                                                window_size=WINDOW_SIZE,
                                                max_packet_size=MAX_PACKET_SIZE)
            chan.settimeout(self.timeout)
            try:
                with watchdog(chan, self.timeout, "starting SFTP"):
                    chan.invoke_subsystem("sftp")
                    return paramiko.SFTPClient(chan)
            except BaseException:
                chan.close()
                raise

    @contextlib.contextmanager
    def _shared_sftp(self, what: str) -> Iterator[paramiko.SFTPClient]:
        with self._sftp_lock:
            if self._sftp is None or self._sftp.sock.closed:
                self._sftp = self._new_sftp()
            with errors(f"{what} on {self.label}"):
                yield self._sftp

    def stat(self, path: str) -> FileStat | None:
        """Size and mtime of ``path``, or ``None`` when it does not exist."""
        path = self.expand(path)
        with self._shared_sftp(f"stat {path}") as sftp:
            try:
                attrs = sftp.stat(path)
            except FileNotFoundError:
                return None
        return FileStat(size=attrs.st_size or 0, mtime=float(attrs.st_mtime or 0))

    def read(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> bytes:
        """Up to ``max_bytes`` of ``path`` from ``offset``, with the reads pipelined."""
        path = self.expand(path)
        with self._shared_sftp(f"reading {path}") as sftp, sftp.open(path, "rb") as fh:
            size = fh.stat().st_size or 0
            want = min(max_bytes, size - offset)
            if want <= 0:
                return b""
            step = paramiko.SFTPFile.MAX_REQUEST_SIZE
            chunks = [(pos, min(step, offset + want - pos))
                      for pos in range(offset, offset + want, step)]
            return b"".join(fh.readv(chunks))

    def listdir(self, path: str) -> list[str]:
        """Names in directory ``path`` (``[]`` when it does not exist)."""
        path = self.expand(path)
        with self._shared_sftp(f"listing {path}") as sftp:
            try:
                return sorted(sftp.listdir(path))
            except FileNotFoundError:
                return []

    def upload(self, local: str, remote: str, progress: Progress | None = None) -> None:
        """Copy ``local`` to ``remote`` through a temp name and ``posix-rename``, so the box
        sees the old file or the whole new one. Writes are pipelined."""
        remote = self.expand(remote)
        total = os.path.getsize(local)
        tmp = f"{remote}.{uuid.uuid4().hex[:8]}.part"
        sftp = self._new_sftp()
        try:
            with errors(f"uploading to {remote} on {self.label}"):
                try:
                    with open(local, "rb") as src, sftp.open(tmp, "wb") as dst:
                        dst.set_pipelined(True)
                        done = 0
                        while chunk := src.read(COPY_CHUNK):
                            dst.write(chunk)
                            done += len(chunk)
                            if progress:
                                progress(done, total)
                    mode = stat_mod.S_IMODE(os.stat(local).st_mode)
                    sftp.chmod(tmp, mode)
                    sftp.posix_rename(tmp, remote)
                except BaseException:
                    with contextlib.suppress(Exception):
                        sftp.remove(tmp)
                    raise
            if progress and total == 0:
                progress(0, 0)
        finally:
            sftp.close()

    def download(self, remote: str, local: str, progress: Progress | None = None,
                 resume: bool = True) -> None:
        """Copy ``remote`` into ``local``. With ``resume``, bytes already in a shorter
        ``local`` are kept and the rest is appended. Reads are prefetched (many requests
        in flight), which is what makes a long link fast."""
        remote = self.expand(remote)
        sftp = self._new_sftp()
        try:
            with errors(f"downloading {remote} from {self.label}"):
                try:
                    size = sftp.stat(remote).st_size or 0
                except FileNotFoundError:
                    raise TransportError(f"{remote} does not exist on {self.label}") from None
                have = os.path.getsize(local) if resume and os.path.exists(local) else 0
                if have > size:
                    have = 0
                Path(local).parent.mkdir(parents=True, exist_ok=True)
                with sftp.open(remote, "rb") as src, open(local, "r+b" if have else "wb") as dst:
                    dst.seek(have)
                    dst.truncate()
                    done = have
                    if progress:
                        progress(done, size)
                    if done < size:
                        src.seek(done)
                        src.prefetch(size, PREFETCH_REQUESTS)
                    while done < size:
                        chunk = src.read(min(COPY_CHUNK, size - done))
                        if not chunk:
                            raise TransportError(f"{remote} shrank while downloading")
                        dst.write(chunk)
                        done += len(chunk)
                        if progress:
                            progress(done, size)
        finally:
            sftp.close()

    def download_ranges(self, remote: str, local: str, progress: Progress | None = None,
                        resume: bool = True, streams: int = ranged.STREAMS,
                        opened: Callable[[], None] | None = None) -> tuple[str, int, int]:
        """Copy ``remote`` into ``local`` over up to ``streams`` SFTP sessions at once, by
        ranges, resuming a partial ``local`` (``remote.transport.ranged``); returns its
        ``(sha256, size, sessions used)``. ``opened``: called once the first session is
        open."""
        return ranged.ranged_download(self._new_sftp, self.expand(remote), local,
                                      label=self.label, streams=streams, resume=resume,
                                      progress=progress, opened=opened)

    def close(self) -> None:
        """Close SFTP, the connection and any jump hosts. Idempotent."""
        with self._sftp_lock:
            if self._sftp is not None:
                with contextlib.suppress(Exception):
                    self._sftp.close()
                self._sftp = None
        self._transport.close()
        for hop in reversed(self._hops):
            hop.close()

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
