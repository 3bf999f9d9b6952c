"""``python3 -m trainer <command> ...``: the box-side entry point.

Each command lives in its own module and is imported only when it is asked for, so that
``follow`` runs on a box without torch.
"""

from __future__ import annotations

import importlib
import sys

#: command name -> (module, one-line description). Each module exposes ``main(argv)``.
COMMANDS: dict[str, tuple[str, str]] = {
    "follow": ("trainer.follow", "stream a run directory as JSON lines (stdlib only)"),
    "runs": ("trainer.watch.runs", "list a project's runs with their health (stdlib only)"),
    "log": ("trainer.watch.logs", "read older parts of a run's log, or search it (stdlib only)"),
    "train": ("trainer.engine.command", "train a detector, writing the run directory contract"),
    "shapes": ("trainer.datasets.shapes", "write a synthetic YOLO dataset of coloured shapes"),
    "preflight": ("trainer.checks.preflight", "check the box: torch, CUDA, driver, disk, HF_HOME"),
    "ready": ("trainer.checks.ready", "say whether this python can start a run (stdlib only)"),
    "doctor": ("trainer.checks.doctor", "check a YOLO dataset (data.yaml) without modifying it"),
    "profile": ("trainer.profiler.command", "time real training steps and say what bounds them"),
    "stage": ("trainer.hub.stage", "download a dataset tar from the Hub and extract it safely"),
    "push": ("trainer.hub.pushcmd", "push a run's weights to the Hub (now, or --watch as it "
             "trains) and append its ledger"),
    "restore": ("trainer.hub.restore", "put a run's last checkpoint and history from its Hub "
                "repository into a run directory, to resume it here"),
    "safe": ("trainer.hub.safe", "list the weight files on the box and what left it"),
    "guard": ("trainer.guard.command", "stop or destroy this instance once the run is over"),
}


def usage() -> str:
    """The help text listing every command."""
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: python3 -m trainer <command> [args...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {desc}" for name, (_, desc) in COMMANDS.items()]
    lines += ["", "Run 'python3 -m trainer <command> --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Dispatch to a command's ``main`` and return its exit code."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if args[0] in ("-V", "--version"):
        from trainer.version import __version__

        print(__version__)
        return 0
    entry = COMMANDS.get(args[0])
    if entry is None:
        print(f"trainer: unknown command {args[0]!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(entry[0])
    return int(module.main(args[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
