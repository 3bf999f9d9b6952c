"""Where a headless command acts: a target string resolved into a ``Transport``.

``HOST:PATH`` is a box over SSH (HOST is ``user@host``, ``host`` or an ``~/.ssh/config``
alias; PATH is relative to the login directory unless absolute); a bare ``user@host``
means its login directory. Anything else is a path on this machine (``local:PATH``
forces that reading; a path that exists here is always local).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass

from remote.connect import Connector
from remote.transport.base import Transport


@dataclass(frozen=True)
class Target:
    """A parsed target: ``host`` is ``None`` for this machine."""

    host: str | None
    path: str

    @property
    def label(self) -> str:
        """How to show the target to the user."""
        return self.path if self.host is None else f"{self.host}:{self.path}"


def parse_target(text: str, default_path: str = ".") -> Target:
    """Split a target string; raises ``ValueError`` for an empty host."""
    if text.startswith("local:"):
        return Target(None, os.path.expanduser(text[len("local:"):]) or default_path)
    if text == "local":
        return Target(None, default_path)
    if text.startswith(("/", ".", "~")) or os.path.exists(text):
        return Target(None, os.path.expanduser(text))
    host, sep, path = text.partition(":")
    if sep or "@" in host:
        if not host or host.startswith("-"):
            raise ValueError(f"{text!r} names no host")
        # Commands and SFTP both start in the login directory, which is what ~ means.
        if path == "~" or path.startswith("~/"):
            path = path[2:]
        return Target(host, path or default_path)
    return Target(None, text)


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """``-p/--port`` and ``--accept-new``, for commands that may reach a box."""
    parser.add_argument("-p", "--port", type=int, default=None,
                        help="SSH port of the box (default: from ~/.ssh/config, else 22)")
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


def connector(target: Target, args: argparse.Namespace, *, bootstrap: bool = False,
              strict: bool = True, note: Callable[[str], None] | None = None) -> Connector:
    """A :class:`remote.connect.Connector` for ``target`` with the command's connection
    options (``-p``, ``--accept-new``); an unknown host key is asked about on the
    terminal."""
    return Connector(target.host, port=getattr(args, "port", None),
                     accept_new=getattr(args, "accept_new", False),
                     ask_unknown=_ask_on_terminal, bootstrap=bootstrap, strict=strict,
                     python=getattr(args, "python", None),
                     **({"note": note} if note else {}))


def open_transport(target: Target, args: argparse.Namespace, *, bootstrap: bool = False,
                   note: Callable[[str], None] | None = None) -> Transport:
    """Open one transport for ``target`` (see ``connector``); bootstrap failures raise."""
    return connector(target, args, bootstrap=bootstrap, note=note).open()
