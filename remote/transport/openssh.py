"""Asking OpenSSH's own client how it would reach a host: ``ssh -G HOST``.

``ssh -G`` prints the settings ``ssh`` would use after reading its config the way only
OpenSSH reads it: ``Include``, ``Match``, ``%h``-style tokens, ``CanonicalizeHostname``,
``IdentityFile`` lists and the system-wide file. It opens no connection. Used whenever an
``ssh`` client is installed (``$GPURENT_SSH`` names another one, or ``none`` to use
paramiko's parser in ``remote.transport.sshconfig`` instead).

A box known by a name (``remote.transport.base.NamedBox``: ``vast:4242``) is asked about
by that name with its address given (``ssh -G -o HostName=ADDRESS -p PORT vast:4242``),
so ``Host vast:*`` blocks apply; their User wins over the provider's default user.

One departure from running ``ssh`` by hand: when ``$HOME`` is not the account's home
directory (a sandbox, a test), ``$HOME/.ssh/config`` is passed with ``-F``, because
OpenSSH would read the account's own file and everything else here follows ``$HOME``.
"""

from __future__ import annotations

import dataclasses
import getpass
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from remote.transport.base import NamedBox, TransportError
from remote.transport.sshconfig import HostSpec, load_config, parse_target
from remote.transport.sshconfig import resolve as parse_with_paramiko
from remote.transport.sshconfig import resolve_named as parse_named_with_paramiko
from trainer.text import one_line

#: Names the ``ssh`` client to ask (a path or a command), or ``none``.
CLIENT_ENV = "GPURENT_SSH"

#: The file ``ssh`` reads after the user's own (where OpenSSH is built for ``/etc/ssh``).
SYSTEM_CONFIG = "/etc/ssh/ssh_config"

_TOKEN = re.compile(r"%(.)")


def find_client(env: Mapping[str, str] | None = None) -> str | None:
    """The ``ssh`` client to ask, or ``None`` (none installed, or ``$GPURENT_SSH=none``)."""
    env = os.environ if env is None else env
    chosen = env.get(CLIENT_ENV, "").strip()
    if chosen.lower() in ("none", "no", "off"):
        return None
    return shutil.which(chosen or "ssh")


def config_file(explicit: str | None) -> str | None:
    """What to pass with ``-F``: ``explicit``; else, when ``$HOME`` is not the account's
    home directory, ``$HOME/.ssh/config`` (``/dev/null`` when there is none); else
    nothing, so that ssh reads its usual user and system files."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.exists():
            raise TransportError(f"ssh config {path} does not exist")
        return str(path)
    home = os.path.expanduser("~")
    try:
        account_home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        account_home = ""
    if account_home and os.path.realpath(account_home) == os.path.realpath(home):
        return None
    user_config = Path(home, ".ssh", "config")
    return str(user_config) if user_config.exists() else os.devnull


def query(client: str, host: str, *, user: str | None = None, port: int | None = None,
          config: str | None = None, identity_files: tuple[str, ...] = (),
          timeout: float = 15.0, hostname: str | None = None) -> dict[str, list[str]]:
    """``ssh -G`` for ``host``: each setting's values, lower-case keys (repeated keys,
    such as ``identityfile``, keep every value in order). ``hostname`` is where ``host``
    answers whatever the config's HostName says."""
    argv = [client, "-G"]
    if config:
        argv += ["-F", config]
    if hostname:
        argv += ["-o", f"HostName={hostname}"]
    if user:
        argv += ["-l", user]
    if port:
        argv += ["-p", str(port)]
    for key in identity_files:
        argv += ["-i", key]
    argv += ["--", host]
    try:
        done = subprocess.run(argv, capture_output=True, stdin=subprocess.DEVNULL,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise TransportError(f"ssh -G {host} did not answer within {timeout:g}s (a Match "
                             "exec line in the ssh config?)") from None
    except OSError as exc:
        raise TransportError(f"cannot run {client}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        lines = [line for line in done.stderr.decode("utf-8", "replace").splitlines()
                 if line.strip() and "Pseudo-terminal" not in line]
        why = lines[0] if lines else f"ssh -G exit {done.returncode}"  # the cause
        raise TransportError(f"ssh config for {host}: {one_line(why)}")
    options: dict[str, list[str]] = {}
    for line in done.stdout.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(" ")
        if key:
            options.setdefault(key.lower(), []).append(value.strip())
    return options


def expand_tokens(text: str, values: Mapping[str, str], what: str) -> str:
    """OpenSSH's ``%`` tokens in ``text`` (``%h``, ``%p``, ``%r``, ``%n``, ``%d``,
    ``%u``, ``%l``, ``%L``, ``%i``, ``%k``, ``%%``); an unknown token is an error."""

    def one(match: re.Match[str]) -> str:
        token = match.group(1)
        if token not in values:
            raise TransportError(f"ssh config: {what} uses %{token}, which is not supported "
                                 "here")
        return values[token]

    return _TOKEN.sub(one, text)


def resolve(client: str, target: str, *, port: int | None = None,
            config: str | None = None, identity_files: tuple[str, ...] = (),
            timeout: float = 15.0) -> HostSpec:
    """Where and how ``ssh`` would connect to ``target`` (``[user@]host[:port]`` or an
    alias); the user or port in ``target``, then ``port``, win over the config."""
    try:
        user, host, target_port = parse_target(target)
    except ValueError as exc:
        raise TransportError(str(exc)) from None
    alias = host.strip("[]")
    opts = query(client, alias, user=user, port=port or target_port,
                 config=config_file(config), identity_files=identity_files, timeout=timeout)
    return _spec(alias, opts, (opts.get("user") or [""])[0] or getpass.getuser())


def resolve_named(client: str, box: NamedBox, *, config: str | None = None,
                  identity_files: tuple[str, ...] = (), timeout: float = 15.0) -> HostSpec:
    """Where and how ``ssh`` would reach ``box``: what the config says for its name
    (``Host vast:*``) at the box's address; the config's User, else ``box.user``; the
    host key under the name unless the config gives a HostKeyAlias."""
    chosen = config_file(config)
    opts = query(client, box.name, port=box.port, hostname=box.host, config=chosen,
                 identity_files=identity_files, timeout=timeout)
    login = (opts.get("user") or [""])[0] or _account_name()
    if login == _account_name() != box.user:
        login = _configured_user(client, box, chosen, timeout)
    spec = _spec(box.name, opts, login)
    return spec if spec.host_key_alias else dataclasses.replace(spec,
                                                                host_key_alias=box.name)


def _account_name() -> str:
    """The login ``ssh`` falls back to when the config names no User."""
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return getpass.getuser()


def _configured_user(client: str, box: NamedBox, config: str | None, timeout: float) -> str:
    """The User the ssh config names for ``box``, else ``box.user``. ``ssh -G`` prints
    this account's name both when a User line names it and when none does; asked again
    through a file that includes the config and then gives ``box.user`` to every host,
    it tells the two apart (the first value obtained wins)."""
    # No -F file: $HOME is the account's home (see config_file).
    files = [config] if config else [os.path.expanduser("~/.ssh/config"), SYSTEM_CONFIG]
    files = [f for f in files if os.path.isfile(f)]
    if not files:
        return box.user
    lines = [f'Include "{_quoted(os.path.abspath(f))}"' for f in files]
    with tempfile.NamedTemporaryFile("w", prefix="gpurent-ssh-", suffix=".conf") as wrapper:
        wrapper.write("\n".join([*lines, "Match all", f"  User {box.user}", ""]))
        wrapper.flush()
        opts = query(client, box.name, port=box.port, hostname=box.host,
                     config=wrapper.name, timeout=timeout)
    return (opts.get("user") or [box.user])[0]


def _quoted(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')


def _spec(alias: str, opts: Mapping[str, list[str]], login: str) -> HostSpec:
    """The ``HostSpec`` of ``ssh -G``'s answer for ``alias``, logging in as ``login``."""

    def first(key: str, default: str = "") -> str:
        return (opts.get(key) or [default])[0]

    hostname = first("hostname", alias)
    chosen_port = int(first("port", "22")) if first("port", "22").isdigit() else 22
    home = os.path.expanduser("~")
    tokens = {"%": "%", "h": hostname, "p": str(chosen_port), "r": login, "n": alias,
              "d": home, "u": getpass.getuser(), "l": socket.gethostname(),
              "L": socket.gethostname().split(".")[0], "i": str(os.getuid()),
              "k": first("hostkeyalias") or alias}
    jump = first("proxyjump", "none")
    command = first("proxycommand", "none")
    return HostSpec(
        alias=alias,
        hostname=hostname,
        port=chosen_port,
        user=login,
        identity_files=tuple(os.path.expanduser(expand_tokens(f, tokens, "IdentityFile"))
                             for f in opts.get("identityfile", [])),
        identities_only=first("identitiesonly", "no").lower() == "yes",
        proxy_jump=() if jump.lower() == "none" else tuple(
            j.strip() for j in jump.split(",") if j.strip()),
        proxy_command=None if command.lower() == "none"
        else expand_tokens(command, tokens, "ProxyCommand"),
        keepalive=_positive(first("serveraliveinterval")),
        connect_timeout=_positive(first("connecttimeout")),
        known_hosts=_known_hosts(opts.get("userknownhostsfile", [])),
        host_key_alias=first("hostkeyalias") or None,
    )


def _positive(value: str) -> float | None:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if number > 0 else None


def _known_hosts(values: list[str]) -> str | None:
    """The first ``UserKnownHostsFile``, or ``None`` for OpenSSH's default (which it
    prints under the account's home: ``~/.ssh/known_hosts`` is then read from ``$HOME``)."""
    files = " ".join(values).split()
    if not files:
        return None
    try:
        account_home = pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        return os.path.expanduser(files[0])
    default = [f"{account_home}/.ssh/known_hosts", f"{account_home}/.ssh/known_hosts2"]
    return None if files == default else os.path.expanduser(files[0])


#: ``settings(target, port, identity_files) -> HostSpec``; a ``NamedBox`` carries its port.
Settings = Callable[[str | NamedBox, int | None, tuple[str, ...]], HostSpec]


def resolver(ssh_config: str | None, timeout: float) -> Settings:
    """How to resolve a target: with ``ssh -G`` when an ssh client is installed, else
    with paramiko's reading of the config file."""
    client = find_client()
    if client is not None:
        def asked(target: str | NamedBox, port: int | None, keys: tuple[str, ...]
                  ) -> HostSpec:
            if isinstance(target, NamedBox):
                return resolve_named(client, target, config=ssh_config,
                                     identity_files=keys, timeout=timeout)
            return resolve(client, target, port=port, config=ssh_config,
                           identity_files=keys, timeout=timeout)

        return asked
    config = load_config(ssh_config)

    def parsed(target: str | NamedBox, port: int | None, keys: tuple[str, ...]) -> HostSpec:
        if isinstance(target, NamedBox):
            return parse_named_with_paramiko(target, config)
        try:
            return parse_with_paramiko(target, port=port, config=config)
        except ValueError as exc:
            raise TransportError(str(exc)) from None

    return parsed
