"""Where a headless command acts: a target string resolved into a ``Transport``.

``HOST:PATH`` is a box over SSH (HOST is ``user@host``, ``host``, an ``~/.ssh/config``
alias, or an instance: ``vast:ID``, ``runpod:POD_ID``, ``lambda:ID``, whose address the
provider's API gives; PATH is relative to the login directory unless absolute); a bare
``user@host`` or instance means its login directory. Anything else is a path on this
machine (``local:PATH`` forces that reading; a path that exists here is always local).
RunPod's basic SSH proxy is refused here, before any connection.

This is command-line glue, with the commands: it may import ``remote.billing`` (the
provider's address for an instance), which the rest of ``remote`` may not.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from remote.link.connector import Connector
from remote.transport.base import Transport
from remote.transport.hostpolicy import refusal

if TYPE_CHECKING:
    from remote.billing.providers import InstanceTarget

#: The providers whose instances name a target (``vast:4242``): equal to
#: ``remote.billing.providers.INSTANCE_PROVIDERS`` (a test says so), so that a command
#: for a plain host does not load the provider clients.
INSTANCE_PREFIXES = ("vast", "runpod", "lambda")


def split_instance_target(text: str) -> tuple[InstanceTarget, str | None] | None:
    """``remote.billing.providers.split_instance_target``, for targets that can be one."""
    if text.partition(":")[0] not in INSTANCE_PREFIXES:
        return None
    from remote.billing.providers import split_instance_target as split

    return split(text)


@dataclass(frozen=True)
class Target:
    """A parsed target: ``host`` is ``None`` for this machine."""

    host: str | None
    path: str

    #: Set when ``host`` names a rented instance (``vast:4242``).
    instance: InstanceTarget | None = None
    #: Set when the target is a Modal app (``modal:APP``): its name; ``path`` is then in
    #: the runs Volume (``APP`` or ``APP/RUN``).
    modal: str | None = None

    @property
    def label(self) -> str:
        """How to show the target to the user."""
        return self.path if self.host is None else f"{self.host}:{self.path}"


def parse_target(text: str, default_path: str = ".") -> Target:
    """Split a target string; raises ``ValueError`` for an empty host, a malformed
    instance id or a host that cannot be a box."""
    if text.startswith("local:"):
        return Target(None, os.path.expanduser(text[len("local:"):]) or default_path)
    if text == "local":
        return Target(None, default_path)
    if text.startswith("modal:"):
        return modal_target(text)
    if text.startswith(("/", ".", "~")) or os.path.exists(text):
        return Target(None, os.path.expanduser(text))
    named = split_instance_target(text)
    if named is not None:
        instance, path = named
        return Target(instance.text, _box_path(path or "") or default_path, instance)
    host, sep, path = text.partition(":")
    if sep or "@" in host:
        check_host(host, text)
        port, colon, rest = path.partition(":")
        if colon and port.isdigit():
            raise ValueError(f"{text!r}: a port does not go in the target; give it with -p: "
                             f"-p {port} {host}:{rest}")
        return Target(host, _box_path(path) or default_path)
    return Target(None, text)


def modal_target(text: str) -> Target:
    """``modal:APP`` or ``modal:APP/RUN``: the app's project or one run in the runs Volume;
    ``ValueError`` for a malformed name."""
    from remote.serverless import check_app_name

    app, _, run = text[len("modal:"):].partition("/")
    check_app_name(app)
    if run and ("/" in run.strip("/") or run in (".", "..")):
        raise ValueError(f"{text!r}: a Modal target is modal:APP or modal:APP/RUN")
    path = f"{app}/{run.strip('/')}" if run.strip("/") else app
    return Target(f"modal:{app}", path, modal=app)


def host_target(host: str, path: str = ".") -> Target:
    """A ``HOST`` argument (``local``, ``user@host``, an alias or an instance such as
    ``vast:4242``) with ``path`` on that box; ``ValueError`` as ``parse_target``."""
    if host == "local":
        return Target(None, path)
    path = _box_path(path) or "."
    named = split_instance_target(host)
    if named is not None:
        if named[1] is not None:
            raise ValueError(f"{host!r}: HOST is the box alone; give the path separately")
        return Target(named[0].text, path, named[0])
    check_host(host)
    return Target(host, path)


def check_host(host: str, text: str | None = None) -> None:
    """``ValueError`` (one line) when ``host`` (``[user@]host``) cannot name a box."""
    if not host or host.startswith("-"):
        raise ValueError(f"{text or host!r} names no host")
    user, at, name = host.rpartition("@")
    why = refusal(name, user if at else None)
    if why:
        raise ValueError(why)


def _box_path(path: str) -> str:
    # Commands and SFTP both start in the login directory, which is what ~ means.
    return path[2:] if path == "~" or path.startswith("~/") else path


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``-p/--port``, ``-i/--identity`` and ``--accept-new``, for commands that may reach
    a box."""
    parser.add_argument("-p", "--port", type=int, default=None,
                        help="SSH port of the box (default: from ~/.ssh/config, else 22)")
    parser.add_argument("-i", "--identity", action="append", default=None, metavar="KEY",
                        help="private key file to log in with, as `ssh -i` (repeatable)")
    parser.add_argument("--accept-new", action="store_true",
                        help="accept and save an unknown host key (never a changed one)")
    parser.add_argument("--python", metavar="PATH", default=None,
                        help="the python on the box to run the trainer with (default: "
                        "[hosts.\"HOST\"] python in the config file, else the one that "
                        "has torch)")


def _ask_on_terminal(host: str, key_type: str, fingerprint: str) -> bool:
    """Ask about an unknown host key when a person is at the terminal; else refuse."""
    if not sys.stdin.isatty():
        return False
    print(f"The host key of {host} is not known.\n{key_type} key fingerprint is "
          f"{fingerprint}.", file=sys.stderr)
    answer = input("Accept it and remember it? [y/N] ")
    return answer.strip().lower() in ("y", "yes")


def identity_files(keys: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``-i KEY`` paths, expanded; ``ValueError`` (one line) for one that is not a file."""
    found = []
    for key in keys or ():
        path = os.path.expanduser(key)
        if not os.path.isfile(path):
            raise ValueError(f"-i {key}: no such key file")
        found.append(path)
    return tuple(found)


def key_options(keys: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """The ``remote.transport.ssh.connect`` options that log in with ``keys`` (``-i``)."""
    return {"identity_files": keys} if keys else {}


def connector(target: Target, args: argparse.Namespace, *, bootstrap: bool = False,
              strict: bool = True, note: Callable[[str], None] | None = None) -> Connector:
    """A :class:`remote.link.connector.Connector` for ``target`` with the command's connection
    options (``-p``, ``-i``, ``--accept-new``); an unknown host key is asked about on the
    terminal. An instance target is located through its provider's API."""
    port = getattr(args, "port", None)
    if target.instance is not None and port is not None:
        raise ValueError(f"-p does not go with {target.instance.text}: its provider says "
                         "where it answers")
    keys = identity_files(getattr(args, "identity", None))
    return Connector(target.host, port=port,
                     accept_new=getattr(args, "accept_new", False),
                     ask_unknown=_ask_on_terminal, bootstrap=bootstrap, strict=strict,
                     ssh_options=key_options(keys),
                     locate=_locator(target.instance),
                     python=getattr(args, "python", None),
                     note=note or Connector.note)


def _locator(instance: InstanceTarget | None) -> Callable | None:
    if instance is None:
        return None
    from remote.billing.address import Locator

    return Locator(instance)


def open_transport(target: Target, args: argparse.Namespace, *, bootstrap: bool = False,
                   note: Callable[[str], None] | None = None) -> Transport:
    """Open one transport for ``target`` (see ``connector``); bootstrap failures raise."""
    return connector(target, args, bootstrap=bootstrap, note=note).open()
