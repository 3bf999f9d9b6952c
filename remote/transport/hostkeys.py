"""Checking a box's host key against ``known_hosts``, the way OpenSSH does.

A key that differs from the one on file is refused (both fingerprints shown), and so is a
key on a ``@revoked`` line whose host patterns match (whatever else the file says). An
unknown key is accepted only when the user says so (a callback) or asked for
``accept-new``; it is then appended to the file, which is otherwise left as it is
(comments, markers, hashed names). Fingerprints are OpenSSH's ``SHA256:`` form.

The file is read as a stranger's data could be: a line that cannot be read (a key cut
short, a field missing) is skipped with a one-line warning naming the file and line
(once per process), and a ``known_hosts`` that is not a regular file (a directory, a
device such as ``/dev/zero``, a FIFO) or is larger than ``MAX_KNOWN_HOSTS`` is refused
in one line (``KnownHostsUnusable``) instead of a traceback or a hang.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import paramiko

from remote.transport.base import NeedsSetup, TransportError

#: ``ask_unknown(host, key_type, sha256_fingerprint) -> bool``.
AskUnknown = Callable[[str, str, str], bool]

_append_lock = threading.Lock()

#: Largest ``known_hosts`` read (OpenSSH's files of thousands of hosts are a few MB).
MAX_KNOWN_HOSTS = 16 << 20

_warned: set[tuple[str, int, str]] = set()
_warned_lock = threading.Lock()


class HostKeyChanged(TransportError):
    """The box presented a key that differs from the one in ``known_hosts``: ``name``
    is what the old key is filed under in the file ``known_hosts`` (``forget_host_key``
    removes it)."""

    def __init__(self, message: str, name: str = "", known_hosts: str = "") -> None:
        super().__init__(message)
        self.name = name
        self.known_hosts = known_hosts


class HostKeyUnknown(TransportError):
    """The box's key is not in ``known_hosts`` and was not accepted."""


class HostKeyRevoked(TransportError):
    """The box's key is marked ``@revoked`` in ``known_hosts``."""


class KnownHostsUnusable(NeedsSetup):
    """``known_hosts`` is not a file we can read (a directory, a device, too large): a
    setting of this laptop, so trying the connection again cannot help."""


def known_hosts_lines(path: str | os.PathLike[str]) -> list[tuple[int, str]]:
    """``(line number, text)`` of the file's lines (``[]`` when it does not exist).
    ``KnownHostsUnusable`` (one line) for anything but a regular file of at most
    ``MAX_KNOWN_HOSTS`` bytes; it is opened without blocking, so a FIFO cannot hang us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise KnownHostsUnusable(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise KnownHostsUnusable(f"{path} is {kind}: known_hosts must be a file of "
                                     "host keys; move it aside to connect")
        chunks: list[bytes] = []
        size = 0
        while size <= MAX_KNOWN_HOSTS and (chunk := os.read(fd, 1 << 20)):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise KnownHostsUnusable(f"cannot read {path}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    data = b"".join(chunks)
    if len(data) > MAX_KNOWN_HOSTS:
        raise KnownHostsUnusable(f"{path} is larger than {MAX_KNOWN_HOSTS >> 20} MiB: not "
                                 "a known_hosts file; move it aside to connect")
    text = data.decode("utf-8", errors="replace")
    return list(enumerate(text.splitlines(), 1))


def _skip(path: str | os.PathLike[str], number: int, text: str, why: str) -> None:
    """Warn, once per process, that line ``number`` of ``path`` is skipped."""
    key = (str(path), number, text)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    print(f"gpurent: warning: {path} line {number} cannot be read ({why}): skipped",
          file=sys.stderr)


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's fingerprint of a public key: ``SHA256:`` and unpadded base64."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def host_key_name(hostname: str, port: int) -> str:
    """The name a host is filed under: ``host`` on port 22, else ``[host]:port``."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


def load_known_hosts(path: str | os.PathLike[str]) -> paramiko.HostKeys:
    """Parse a ``known_hosts`` file (missing file: empty). A line that cannot be read is
    skipped with a warning; ``KnownHostsUnusable`` as ``known_hosts_lines``."""
    keys = paramiko.HostKeys()
    for number, line in known_hosts_lines(path):
        line = line.strip()
        # Markers (@cert-authority, @revoked) are not host keys; paramiko would misread them.
        if not line or line.startswith(("#", "@")):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except Exception as exc:  # paramiko raises several unrelated types for bad keys
            _skip(path, number, line, f"a bad key: {type(exc).__name__}")
            continue
        if entry is None:
            _skip(path, number, line, "fewer than three fields, or an unknown key type")
            continue
        for name in entry.hostnames:
            keys.add(name, entry.key.get_name(), entry.key)
    return keys


def host_matches(patterns: str, name: str) -> bool:
    """Whether ``name`` (``host`` or ``[host]:port``) matches a ``known_hosts`` host field:
    comma-separated patterns with ``*`` and ``?``, ``!`` negation, or a hashed name."""
    matched = False
    for pattern in patterns.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            hit = paramiko.HostKeys.hash_host(name, pattern) == pattern
        else:
            glob = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c)
                           for c in pattern.lower())
            hit = re.fullmatch(glob, name.lower()) is not None
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def revoked_keys(path: str | os.PathLike[str], name: str) -> list[paramiko.PKey]:
    """The keys of ``@revoked`` lines in ``known_hosts`` whose patterns match ``name``
    (a line that cannot be read is skipped with a warning)."""
    found = []
    for number, line in known_hosts_lines(path):
        fields = line.split()
        if len(fields) < 4 or fields[0] != "@revoked" or not host_matches(fields[1], name):
            continue
        try:
            found.append(paramiko.PKey.from_type_string(fields[2], base64.b64decode(fields[3])))
        except Exception as exc:  # as in load_known_hosts
            _skip(path, number, line, f"a bad revoked key: {type(exc).__name__}")
    return found


def append_known_host(path: str | os.PathLike[str], name: str, key: paramiko.PKey) -> None:
    """Append ``name keytype base64`` to ``known_hosts`` (created 0600, its dir 0700)."""
    file = Path(path)
    file.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    line = f"{name} {key.get_name()} {key.get_base64()}\n"
    with _append_lock:
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as fh:
            fh.write(line)


def forget_command(name: str, known_hosts: str) -> str:
    """The OpenSSH command that removes ``name``'s keys from ``known_hosts``."""
    quoted = f"'{name}'" if "'" not in name else shlex.quote(name)
    return f"ssh-keygen -R {quoted} -f {shlex.quote(known_hosts)}"


def forget_host_key(name: str, known_hosts: str) -> None:
    """Remove every key filed under ``name`` from ``known_hosts`` with OpenSSH's own
    ``ssh-keygen -R`` (hashed names included; it keeps the old file as ``.old``), the
    command a changed key's message gives: the next connection then meets the box's key
    as unknown and asks. ``TransportError`` in one line when it fails."""
    try:
        done = subprocess.run(["ssh-keygen", "-R", name, "-f", known_hosts],
                              capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TransportError(f"{forget_command(name, known_hosts)} failed: {exc}") from None
    if done.returncode != 0:
        said = " ".join((done.stderr or done.stdout).split()) or f"exit {done.returncode}"
        raise TransportError(f"{forget_command(name, known_hosts)} failed: {said}")


def verify_host_key(key: paramiko.PKey, hostname: str, port: int, known_hosts: str, *,
                    accept_new: bool = False, ask_unknown: AskUnknown | None = None) -> str:
    """Check ``key`` for ``hostname:port`` against the ``known_hosts`` file.

    Returns ``"known"`` or ``"added"``; raises ``HostKeyRevoked`` when the key is on a
    matching ``@revoked`` line, ``HostKeyChanged`` when the host is on file
    with other keys (of any type: a box that now shows only another key type is treated as
    changed) and ``HostKeyUnknown`` when the key is new and was not accepted."""
    name = host_key_name(hostname, port)
    new_fp = fingerprint(key)
    if any(k.asbytes() == key.asbytes() for k in revoked_keys(known_hosts, name)):
        raise HostKeyRevoked(f"host key for {name} ({key.get_name()} {new_fp}) is marked "
                             f"@revoked in {known_hosts}; refusing to connect")
    on_file = load_known_hosts(known_hosts).lookup(name)
    if on_file:
        if any(k.asbytes() == key.asbytes() for k in on_file.values()):
            return "known"
        old = on_file.get(key.get_name()) or next(iter(on_file.values()))
        raise HostKeyChanged(
            f"host key for {name} has CHANGED: the box shows {key.get_name()} {new_fp}, "
            f"{known_hosts} has {old.get_name()} {fingerprint(old)}; refusing to connect "
            f"(if the box was re-created: {forget_command(name, known_hosts)})",
            name, known_hosts)
    if accept_new or (ask_unknown is not None and ask_unknown(name, key.get_name(), new_fp)):
        append_known_host(known_hosts, name, key)
        return "added"
    raise HostKeyUnknown(
        f"unknown host key for {name}: {key.get_name()} {new_fp}; not accepted "
        f"(confirm it, or pass --accept-new to trust it on first use)"
    )
