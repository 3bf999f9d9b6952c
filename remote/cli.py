"""``gpurent``: headless commands for scripts and agents.

Every action the TUI offers is here too, with ``--json`` where a script would want it,
one-line errors on stderr and meaningful exit codes (0 ok, 1 the action failed, 2 bad
input or an unreadable run). A command lets ``ValueError`` (exit 2) and
``TransportError`` (exit 1) propagate; :func:`main` turns them into that one line.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from remote.commands.errors import fail
from remote.transport.base import TransportError

#: Modules under ``remote.commands``, in the order ``--help`` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "status",
    "push",
    "cost",
    "instance",
    "instances",
    "lease",
    "watchdog",
    "glance",
    "providers",
    "guard",
    "runs",
    "launch",
    "follow",
    "resume",
    "stop",
    "pull",
    "checks",
    "stage",
)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``gpurent`` parser with every subcommand registered (``only`` that one: a
    command's start-up then imports its own module alone)."""
    parser = argparse.ArgumentParser(
        prog="gpurent",
        description="Train on a rented GPU without losing money or weights (headless).",
    )
    from trainer.version import __version__

    parser.add_argument("-V", "--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES if only not in COMMAND_MODULES else (only,):
        importlib.import_module(f"remote.commands.{name}").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one ``gpurent`` subcommand and return its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv[0] if argv else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    as_json = bool(getattr(args, "json", False))
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("gpurent: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `gpurent ... | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except ValueError as exc:  # bad input, an unreadable run
        return fail(args.command, exc, 2, as_json)
    except TransportError as exc:  # the box could not be reached, or failed the action
        return fail(args.command, exc, 1, as_json)


if __name__ == "__main__":
    sys.exit(main())
