"""Checking a box's host key against ``known_hosts``, the way OpenSSH does.

A key that differs from the one on file is refused (both fingerprints shown), and so is a
key on a ``@revoked`` line whose host patterns match (whatever else the file says). An
unknown key is accepted only when the user says so (a callback) or asked for
``accept-new``; it is then appended to the file, which is otherwise left as it is
(comments, markers, hashed names). Fingerprints are OpenSSH's ``SHA256:`` form.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
from collections.abc import Callable
from pathlib import Path

import paramiko

from remote.transport.base import TransportError

#: ``ask_unknown(host, key_type, sha256_fingerprint) -> bool``.
AskUnknown = Callable[[str, str, str], bool]

_append_lock = threading.Lock()


class HostKeyChanged(TransportError):
    """The box presented a key that differs from the one in ``known_hosts``."""


class HostKeyUnknown(TransportError):
    """The box's key is not in ``known_hosts`` and was not accepted."""


class HostKeyRevoked(TransportError):
    """The box's key is marked ``@revoked`` in ``known_hosts``."""


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's fingerprint of a public key: ``SHA256:`` and unpadded base64."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def host_key_name(hostname: str, port: int) -> str:
    """The name a host is filed under: ``host`` on port 22, else ``[host]:port``."""
    return hostname if port == 22 else f"[{hostname}]:{port}"


def load_known_hosts(path: str | os.PathLike[str]) -> paramiko.HostKeys:
    """Parse a ``known_hosts`` file (missing file: empty). Unparseable lines are skipped."""
    keys = paramiko.HostKeys()
    file = Path(path)
    if not file.exists():
        return keys
    for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
        line = line.strip()
        # Markers (@cert-authority, @revoked) are not host keys; paramiko would misread them.
        if not line or line.startswith(("#", "@")):
            continue
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except (paramiko.SSHException, ValueError, TypeError):
            continue
        if entry is not None:
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
    """The keys of ``@revoked`` lines in ``known_hosts`` whose patterns match ``name``."""
    file = Path(path)
    if not file.exists():
        return []
    found = []
    for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
        fields = line.split()
        if len(fields) < 4 or fields[0] != "@revoked" or not host_matches(fields[1], name):
            continue
        try:
            found.append(paramiko.PKey.from_type_string(fields[2], base64.b64decode(fields[3])))
        except (paramiko.SSHException, ValueError, TypeError):
            continue
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
            f"(if the box was re-created: ssh-keygen -R '{name}' -f {known_hosts})"
        )
    if accept_new or (ask_unknown is not None and ask_unknown(name, key.get_name(), new_fp)):
        append_known_host(known_hosts, name, key)
        return "added"
    raise HostKeyUnknown(
        f"unknown host key for {name}: {key.get_name()} {new_fp}; not accepted "
        f"(confirm it, or pass --accept-new to trust it on first use)"
    )
