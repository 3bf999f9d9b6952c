"""Opening an SSH connection with paramiko: TCP (retrying the SYN), the handshake with a
host key checked against ``known_hosts``, authentication with agent keys and key files,
and keepalives. ``remote.transport.ssh.connect`` puts these steps together."""

from __future__ import annotations

import errno
import os
import shlex
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import paramiko

from remote.transport.base import LoginRefused, TransportError, Unreachable
from remote.transport.hostkeys import (
    AskUnknown,
    host_key_name,
    load_known_hosts,
    verify_host_key,
)
from remote.transport.sshconfig import HostSpec, identity_candidates
from trainer.text import one_line

#: ``progress("one line")`` while connecting.
StepProgress = Callable[[str], None]

#: Flow-control window per channel. A long link needs window >= bandwidth x RTT; 2 MiB
#: (paramiko's default) caps a 80 ms link at ~25 MB/s.
WINDOW_SIZE = 16 * 1024 * 1024
MAX_PACKET_SIZE = 32768
KEEPALIVE_SECONDS = 15.0
TCP_RETRY_SECONDS = 2.0


@dataclass(frozen=True, kw_only=True)
class HandshakeOptions:
    accept_new: bool
    ask_unknown: AskUnknown | None
    timeout: float
    known_hosts: str | None
    identity_files: tuple[str, ...]
    allow_agent: bool
    keepalive: float | None
    say: StepProgress


def open_connection(spec: HostSpec, via: paramiko.Transport | None,
                    opts: HandshakeOptions) -> paramiko.Transport:
    """TCP (or a channel of ``via``), handshake, host key check, auth, keepalive."""
    where = f"{spec.hostname}:{spec.port}"
    timeout = opts.timeout
    sock: socket.socket | paramiko.Channel | paramiko.ProxyCommand
    opts.say(f"connecting to {where}" + (" through a jump host" if via else ""))
    try:
        if via is not None:
            sock = via.open_channel("direct-tcpip", (spec.hostname, spec.port),
                                    ("127.0.0.1", 0), timeout=timeout)
        elif spec.proxy_command:
            # Through a shell, as OpenSSH runs it (pipes, quotes and variables work).
            sock = paramiko.ProxyCommand(shlex.join(["/bin/sh", "-c",
                                                     f"exec {spec.proxy_command}"]))
        else:
            sock = _tcp_connect(spec.hostname, spec.port, spec.connect_timeout or timeout)
            _tune_socket(sock)
    except socket.gaierror as exc:
        raise Unreachable(f"cannot resolve {spec.hostname}: {exc.strerror}") from None
    except TimeoutError:
        raise Unreachable(f"timed out connecting to {where} after {timeout:g}s") from None
    except OSError as exc:
        raise Unreachable(f"cannot connect to {where}: {exc.strerror or exc}") from None
    except paramiko.ChannelException as exc:
        raise TransportError(f"jump host could not reach {where}: {exc.text}") from None
    except paramiko.SSHException as exc:
        raise TransportError(f"cannot connect to {where}: {one_line(exc)}") from None
    transport = paramiko.Transport(sock, default_window_size=WINDOW_SIZE,
                                   default_max_packet_size=MAX_PACKET_SIZE)
    leave_rekeying_to_the_server(transport)
    try:
        transport.banner_timeout = timeout
        transport.handshake_timeout = timeout
        transport.auth_timeout = timeout
        known_hosts = opts.known_hosts or spec.known_hosts or os.path.expanduser(
            "~/.ssh/known_hosts")
        _prefer_known_key_types(transport, spec, known_hosts)
        try:
            transport.start_client(timeout=timeout)
        except (paramiko.SSHException, EOFError, OSError) as exc:
            why = "the connection was closed" if isinstance(exc, EOFError) else one_line(exc)
            raise Unreachable(f"SSH handshake with {where} failed: {why}") from None
        opts.say(f"checking the host key of {where}")
        verify_host_key(transport.get_remote_server_key(), *spec.key_name,
                        known_hosts, accept_new=opts.accept_new, ask_unknown=opts.ask_unknown)
        opts.say(f"authenticating as {spec.user}")
        _authenticate(transport, spec, opts)
        transport.set_keepalive(int(opts.keepalive or spec.keepalive or KEEPALIVE_SECONDS))
    except BaseException:
        transport.close()
        raise
    return transport


def _tcp_connect(host: str, port: int, timeout: float) -> socket.socket:
    """``socket.create_connection`` that sends a fresh SYN every ``TCP_RETRY_SECONDS``
    while the link is dead, instead of waiting out the kernel's exponential SYN backoff,
    so a connect started during an outage succeeds soon after the link is back."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no answer within {timeout:g}s")
        try:
            return socket.create_connection((host, port), timeout=min(left, TCP_RETRY_SECONDS))
        except TimeoutError:
            continue
        except OSError as exc:
            if exc.errno not in (errno.ENETUNREACH, errno.EHOSTUNREACH) or left < 1.0:
                raise
            time.sleep(1.0)


def _tune_socket(sock: socket.socket) -> None:
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in (("TCP_KEEPIDLE", 30), ("TCP_KEEPINTVL", 10), ("TCP_KEEPCNT", 6)):
        if hasattr(socket, name):
            sock.setsockopt(socket.IPPROTO_TCP, getattr(socket, name), value)


def leave_rekeying_to_the_server(transport: paramiko.Transport) -> None:
    """Never start a key re-exchange from this side; the server still does (OpenSSH
    after 1-4 GB it sends, by its ``RekeyLimit``). paramiko's own trigger (512 MB)
    races with the server closing a channel meanwhile: its transport thread then waits
    on itself until the exchange times out and the connection drops (paramiko issue
    822) - a pull of a 1 GB file over several SFTP sessions failed so, now and then."""
    packetizer = transport.packetizer
    packetizer.REKEY_BYTES = packetizer.REKEY_PACKETS = 1 << 62


def _prefer_known_key_types(transport: paramiko.Transport, spec: HostSpec,
                            known_hosts: str) -> None:
    """Ask for the key type already on file first, as OpenSSH does, so that a box with
    several host keys is not reported as unknown for a type we never saw."""
    on_file = load_known_hosts(known_hosts).lookup(host_key_name(*spec.key_name))
    if not on_file:
        return
    options = transport.get_security_options()
    known = [t for t in options.key_types if t in on_file or
             (t.startswith("rsa-sha2") and "ssh-rsa" in on_file)]
    options.key_types = known + [t for t in options.key_types if t not in known]


def _authenticate(transport: paramiko.Transport, spec: HostSpec, opts: HandshakeOptions) -> None:
    tried: list[str] = []
    skipped: list[str] = []
    agent = paramiko.Agent() if opts.allow_agent and os.environ.get("SSH_AUTH_SOCK") else None
    try:
        # (key, its file): an agent's key has none, a file's key is read when its turn comes
        keys: list[tuple[paramiko.PKey | None, str]] = []
        if agent is not None and not spec.identities_only:
            keys += [(key, "") for key in agent.get_keys()]
        keys += [(None, path) for path in identity_candidates(spec, opts.identity_files)]
        for key, path in keys:
            if key is None:
                try:
                    key = paramiko.PKey.from_path(path)
                except paramiko.PasswordRequiredException:
                    skipped.append(f"{path} (encrypted: add it to ssh-agent)")
                    continue
                except (paramiko.SSHException, OSError, ValueError) as exc:
                    skipped.append(f"{path} ({one_line(exc)})")
                    continue
            tried.append(path)
            try:
                transport.auth_publickey(spec.user, key)
            except paramiko.BadAuthenticationType as exc:
                raise LoginRefused(
                    f"{spec.label} does not accept keys (allows: {', '.join(exc.allowed_types)})"
                ) from None
            except paramiko.AuthenticationException:
                continue
            except (paramiko.SSHException, EOFError, OSError) as exc:
                raise TransportError(f"authentication with {spec.label} failed: "
                                     f"{one_line(exc)}") from None
            if transport.is_authenticated():
                return
    finally:
        if agent is not None:
            agent.close()
    agent_keys = tried.count("")
    named = [f"{agent_keys} key{'s' * (agent_keys != 1)} from ssh-agent"] * bool(agent_keys) \
        + [path for path in tried if path]
    detail = f"tried {', '.join(named)}" if tried else "no usable key (none in ssh-agent, " \
        "no IdentityFile, no ~/.ssh/id_*)"
    if skipped:
        detail += "; skipped " + ", ".join(skipped)
    raise LoginRefused(f"permission denied for {spec.label}: {detail}; give -i KEY, or User "
                       f"and IdentityFile under `Host {spec.config_host}` in ~/.ssh/config")
