"""Turning what the user typed (``user@host``, ``-p PORT``, an ``~/.ssh/config`` alias)
into where and how to connect, the way OpenSSH's ``ssh`` would.

A box known by a name (``remote.transport.base.NamedBox``: ``vast:4242``, at the address
its provider gives) gets what the config says for the name (``Host vast:*``).

When an ``ssh`` client is installed, ``remote.transport.openssh`` asks it (``ssh -G``).
Without one, the config file is read here with ``paramiko.SSHConfig`` (which ignores
``Include`` and most of ``Match``); the keys used are HostName, User, Port, IdentityFile,
IdentitiesOnly, ProxyJump, ProxyCommand, ServerAliveInterval, ConnectTimeout,
UserKnownHostsFile and HostKeyAlias.
"""

from __future__ import annotations

import getpass
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path

import paramiko

from remote.transport.base import NamedBox, TransportError

#: Keys OpenSSH tries when the config names no IdentityFile.
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")

_HOST_RE = re.compile(r"^[A-Za-z0-9._%+-]+$|^\[[0-9A-Fa-f:.%a-z]+\]$")


@dataclass(frozen=True)
class HostSpec:
    """Where and as whom to connect, after ``~/.ssh/config`` was applied."""

    #: The host as typed (an alias or a name/address).
    alias: str
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...] = ()
    identities_only: bool = False
    #: Jump hosts in the order they are passed through (``ProxyJump a,b``: a, then b).
    proxy_jump: tuple[str, ...] = ()
    proxy_command: str | None = None
    keepalive: float | None = None
    connect_timeout: float | None = None
    known_hosts: str | None = None
    #: The name the host key is filed under instead of the host and port.
    host_key_alias: str | None = None

    @property
    def label(self) -> str:
        """``user@host:port`` for the UI."""
        return f"{self.user}@{self.hostname}:{self.port}"

    @property
    def config_host(self) -> str:
        """The ``Host`` line of ``~/.ssh/config`` to suggest for this box: ``vast:*`` for
        an instance's name (``vast:4242``), else the host as typed."""
        kind, colon, ident = self.alias.partition(":")
        return f"{kind}:*" if colon and kind.isalpha() and ident and ":" not in ident \
            else self.alias

    @property
    def key_name(self) -> tuple[str, int]:
        """``(host, port)`` the host key is filed under in ``known_hosts`` (port 22 means
        no port in the name, as for a ``HostKeyAlias``)."""
        return (self.host_key_alias, 22) if self.host_key_alias else (self.hostname,
                                                                      self.port)


def parse_target(target: str) -> tuple[str | None, str, int | None]:
    """Split ``[ssh://][user@]host[:port]`` into its parts (IPv6 hosts in brackets).

    Raises ``ValueError`` with a one-line message for anything else."""
    text = target.strip()
    if text.startswith("ssh://"):
        text = text[len("ssh://"):].rstrip("/")
    if not text or any(c.isspace() for c in text):
        raise ValueError(f"not an SSH target: {target!r} (expected user@host or an alias)")
    user: str | None = None
    if "@" in text:
        user, text = text.rsplit("@", 1)
        if not user or not re.fullmatch(r"[A-Za-z0-9._-]+", user):
            raise ValueError(f"bad user name in {target!r}")
    port: int | None = None
    if text.startswith("["):
        host, sep, rest = text.partition("]")
        host += "]"
        if rest:
            port = _port(rest.removeprefix(":"), target) if rest.startswith(":") else -1
    elif text.count(":") == 1:
        host, _, rest = text.partition(":")
        port = _port(rest, target)
    else:
        host = text
    if port == -1 or not _HOST_RE.match(host):
        raise ValueError(f"bad host name in {target!r}")
    return user, host, port


def _port(text: str, target: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"bad port in {target!r}")
    return int(text)


def load_config(path: str | os.PathLike[str] | None = None) -> paramiko.SSHConfig:
    """Read an OpenSSH client config (default ``~/.ssh/config``; none is fine)."""
    config_path = Path(path).expanduser() if path else Path("~/.ssh/config").expanduser()
    if not config_path.exists():
        if path:
            raise TransportError(f"ssh config {config_path} does not exist")
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(config_path))
    except (OSError, ValueError, paramiko.SSHException) as exc:
        raise TransportError(f"cannot read ssh config {config_path}: {exc}") from exc


def resolve(target: str, *, port: int | None = None,
            config: paramiko.SSHConfig | None = None) -> HostSpec:
    """Apply ``config`` (see ``load_config``) to ``target``. An explicit user or port in
    the target, or ``port``, wins over the config, as with ``ssh``."""
    user, host, target_port = parse_target(target)
    bare_host = host.strip("[]")
    entry = _lookup(config, bare_host)
    return _spec(bare_host, entry, entry.get("hostname", bare_host),
                 port or target_port or int(entry.get("port", 22)),
                 user or entry.get("user") or getpass.getuser())


def resolve_named(box: NamedBox, config: paramiko.SSHConfig | None = None) -> HostSpec:
    """Apply ``config`` to the box's name (``Host vast:*``) at the box's address: the
    config's User, else ``box.user``; the host key under the name unless the config
    gives a HostKeyAlias. Unlike ``ssh -G``, paramiko expands ``%h`` and ``%p`` in a
    ProxyCommand from the config alone."""
    entry = _lookup(config, box.name)
    spec = _spec(box.name, entry, box.host, box.port, entry.get("user") or box.user)
    return spec if spec.host_key_alias else replace(spec, host_key_alias=box.name)


def _lookup(config: paramiko.SSHConfig | None, host: str) -> paramiko.SSHConfigDict:
    try:
        return (config or paramiko.SSHConfig()).lookup(host)
    except Exception as exc:  # paramiko raises assorted errors for Match/exec lines
        raise TransportError(f"ssh config for {host}: {exc}") from exc


def _spec(alias: str, entry: paramiko.SSHConfigDict, hostname: str, port: int,
          user: str) -> HostSpec:
    """The ``HostSpec`` of ``entry`` (paramiko's lookup of ``alias``), reaching
    ``hostname:port`` as ``user`` (chosen by the caller: the target's, the config's...)."""
    jump = entry.get("proxyjump", "")
    jumps = () if not jump or jump.lower() == "none" else tuple(
        j.strip() for j in jump.split(",") if j.strip())
    command = entry.get("proxycommand")
    known = (entry.get("userknownhostsfile") or "").split()
    return HostSpec(
        alias=alias,
        hostname=hostname,
        port=port,
        user=user,
        identity_files=tuple(entry.get("identityfile", ())),
        identities_only=entry.get("identitiesonly", "no").lower() == "yes",
        proxy_jump=jumps,
        proxy_command=None if not command or command.lower() == "none" else command,
        keepalive=_float(entry.get("serveraliveinterval")),
        connect_timeout=_float(entry.get("connecttimeout")),
        known_hosts=os.path.expanduser(known[0]) if known else None,
        host_key_alias=entry.get("hostkeyalias") or None,
    )


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value is not None else None
    except ValueError:
        return None


def identity_candidates(spec: HostSpec, extra: tuple[str, ...] = ()) -> list[str]:
    """Key files to try, in order: ``extra``, the config's IdentityFile entries, then the
    default key names (unless the config named its own). Only files that exist."""
    names = list(extra) + list(spec.identity_files)
    if not spec.identity_files:
        names += DEFAULT_IDENTITIES
    seen: list[str] = []
    for name in names:
        path = os.path.expanduser(name)
        if path not in seen and os.path.isfile(path):
            seen.append(path)
    return seen
