"""``gpurent-tui``: parse the command line, then start the Textual app.

Nothing heavy is imported until the arguments are valid, so ``--help`` and argument
errors answer at once (textual and paramiko load only when the app starts).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from typing import TYPE_CHECKING

from tui.spec import BoxSpec

if TYPE_CHECKING:
    from tui.app import GpurentApp

PROVIDERS = ("vast", "runpod", "lambda", "manual")


def build_parser() -> argparse.ArgumentParser:
    """The ``gpurent-tui`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="gpurent-tui",
        description="Watch and control training on rented GPU boxes from the keyboard. "
        "Each HOST opens as a tab; the run keeps going on the box when you quit.",
        epilog="examples:\n"
        "  gpurent-tui                      # every instance of every account (the fleet)\n"
        "  gpurent-tui -i ~/.ssh/vast_key   # ... its boxes reached with that key\n"
        "  gpurent-tui root@203.0.113.7 -p 41022\n"
        "  gpurent-tui vast:4242            # the instance's address from the provider\n"
        "  gpurent-tui box1 box2 --project runs\n"
        "  gpurent-tui --local runs/exp1\n"
        "  gpurent-tui --demo",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("hosts", nargs="*", metavar="HOST",
                        help="user@host, host, an ~/.ssh/config alias, or an instance: "
                        "vast:ID, runpod:POD_ID, lambda:ID (one tab each); none: the "
                        "fleet, every instance of every account (F from a box)")
    parser.add_argument("-p", "--port", type=int, help="SSH port (default: 22 or ssh config)")
    parser.add_argument("-i", "--identity", action="append", metavar="KEY",
                        help="private key file to log in with, as `ssh -i` (repeatable; "
                        "also for the fleet's boxes and the tabs opened from it)")
    parser.add_argument("--project", default=None, metavar="DIR",
                        help="project directory on the box holding the runs (default: runs/train)")
    parser.add_argument("--run", metavar="NAME", help="open this run (default: the newest)")
    parser.add_argument("--provider", choices=PROVIDERS,
                        help="who rents the box (enables stop/destroy instance)")
    parser.add_argument("--instance", metavar="ID", help="the provider's instance id")
    parser.add_argument("--price", type=float, metavar="USD_PER_HOUR",
                        help="price per hour (default: from the provider's API)")
    parser.add_argument("--accept-new", action="store_true",
                        help="trust an unknown host key (like StrictHostKeyChecking=accept-new)")
    parser.add_argument("--python", metavar="PATH",
                        help="the python on the box to train with (default: [hosts.\"HOST\"] "
                        "python in the config file, else the one that has torch)")
    parser.add_argument("--local", nargs="?", const=".", default=None, metavar="PROJECT_OR_RUN",
                        help="watch runs on this machine (a project or a run directory)")
    parser.add_argument("--demo", action="store_true",
                        help="train a tiny model locally on a generated dataset and watch it")
    return parser


def specs_from_args(args: argparse.Namespace,
                    parser: argparse.ArgumentParser) -> list[BoxSpec]:
    """Turn parsed arguments into one ``BoxSpec`` per tab; ``parser.error`` on bad input."""
    modes = sum([bool(args.hosts), args.local is not None, args.demo])
    if modes > 1:
        parser.error("HOST, --local and --demo cannot be combined")
    if args.provider and args.provider != "manual" and not args.instance:
        parser.error(f"--provider {args.provider} needs --instance ID")
    if args.instance and not args.provider:
        parser.error("--instance needs --provider")
    if (args.provider or args.instance) and len(args.hosts) > 1:
        parser.error("--provider/--instance apply to a single HOST")
    if args.price is not None and not (0 <= args.price < 10_000):
        parser.error("--price must be a number of US dollars per hour, 0 to 10000")
    if args.port is not None and not (0 < args.port < 65536):
        parser.error("--port must be 1 to 65535")
    if args.python is not None and not args.python.startswith("/"):
        parser.error("--python must be an absolute path on the box")
    if args.python is not None and not args.hosts:
        parser.error("--python applies to a HOST")
    if args.run is not None and (not args.run or "/" in args.run or args.run in (".", "..")):
        parser.error("--run must be a run name, not a path")
    options = ssh_options(args, parser)
    common = {"run": args.run, "provider": args.provider, "instance": args.instance,
              "price": args.price}
    if args.demo:
        from tui.demo import demo_project, missing_for_demo

        missing = missing_for_demo()
        if missing:
            parser.error(f"--demo trains on this machine and needs the trainer's packages; "
                         f"missing here: {', '.join(missing)}. Install the app with them: "
                         "pipx install '.[train]' (torch is a large download), or run "
                         "scripts/demo.sh in the checkout")
        return [BoxSpec("local", "local", project=demo_project(), price=args.price,
                        demo=True)]
    if args.local is not None:
        project, run = _local_project(args.local, args.project, args.run)
        if not os.path.isdir(project):
            parser.error(f"--local {project}: no such directory (give a project or a run "
                         "directory on this machine)")
        return [BoxSpec("local", "local", project=project, **{**common, "run": run})]
    return [modal_spec(host, args, parser) if host.startswith("modal:") else
            BoxSpec("ssh", host, port=args.port, project=args.project or "runs/train",
                    accept_new=args.accept_new, ssh_options=options, python=args.python,
                    **{**common, **_named_instance(host, args, parser)})
            for host in args.hosts]


def modal_spec(host: str, args: argparse.Namespace,
               parser: argparse.ArgumentParser) -> BoxSpec:
    """The tab of ``modal:APP[/RUN]``, an app launched from this laptop: its runs Volume
    read through a ``ModalConnector``; ``parser.error`` for an unknown app or a missing
    ``modal`` client."""
    from remote.serverless import ModalConnector, check_app_name, need_modal
    from remote.transport import TransportError

    app, _, run = host[len("modal:"):].partition("/")
    try:
        need_modal()
        connector = ModalConnector(check_app_name(app))
    except (ValueError, TransportError) as exc:
        parser.error(str(exc))
    return BoxSpec("modal", f"modal:{app}", project=app,
                   run=run.strip("/") or args.run or connector.record.run,
                   price=connector.record.price_per_hour, connector=connector)


def _named_instance(host: str, args: argparse.Namespace,
                    parser: argparse.ArgumentParser) -> dict[str, str]:
    """``provider``/``instance`` for a HOST that names its instance (``vast:4242``);
    ``parser.error`` for a HOST that cannot be a box or contradicts the flags."""
    from remote.transport import refusal

    named = None
    if host.partition(":")[0] in PROVIDERS:  # the provider clients load only then
        from remote.billing import split_instance_target

        try:
            named = split_instance_target(host)
        except ValueError as exc:
            parser.error(str(exc))
    if named is None:
        user, at, name = host.rpartition("@")
        why = refusal(name.rsplit(":", 1)[0] if name.count(":") == 1 else name,
                      user if at else None)
        if why:
            parser.error(why)
        return {}
    instance, path = named
    if path is not None:
        parser.error(f"{host}: a HOST has no path; use --project and --run")
    if args.port is not None:
        parser.error(f"-p does not go with {instance.text}: its provider says where it "
                     "answers")
    if (args.provider or args.instance) and (args.provider, args.instance) != (
            instance.provider, instance.instance):
        parser.error(f"{host} names its instance: leave out --provider and --instance")
    return {"provider": instance.provider, "instance": instance.instance}


def ssh_options(args: argparse.Namespace,
                parser: argparse.ArgumentParser) -> tuple[tuple[str, object], ...]:
    """The connection options of ``-i`` (for every box, the fleet's too); ``parser.error``
    for a key file that is not there."""
    keys = args.identity or []
    paths = tuple(os.path.abspath(os.path.expanduser(key)) for key in keys)
    for key, path in zip(keys, paths, strict=True):
        if not os.path.isfile(path):
            parser.error(f"-i {key}: no such key file")
    return (("identity_files", paths),) if paths else ()


def _local_project(path: str, project: str | None, run: str | None) -> tuple[str, str | None]:
    """A run directory (it holds status.json) opens that run; anything else is a project."""
    full = os.path.abspath(os.path.expanduser(path))
    if run is None and os.path.isfile(os.path.join(full, "status.json")):
        return os.path.dirname(full), os.path.basename(full)
    if project is not None and path == ".":
        full = os.path.abspath(os.path.expanduser(project))
    return full, run


def connect_early(specs: list[BoxSpec]) -> list[BoxSpec]:
    """Start each box's SSH connection and its follower now, while the UI loads: the
    specs again, each SSH box's with the connector its view adopts (see
    ``remote.link.early``). The follower's words are the box view's first watcher's:
    the same run, options and function (``remote.watch.follow_words``)."""
    ready = []
    for spec in specs:
        if spec.kind == "ssh" and not spec.instance:
            from remote.link import Connector
            from remote.watch import LOG_TAIL_BYTES, FollowOptions, follow_words

            connector = Connector(spec.target, port=spec.port, accept_new=spec.accept_new,
                                  ssh_options=dict(spec.ssh_options), python=spec.python)
            project = spec.project or "."
            run = f"{project.rstrip('/')}/{spec.run}" if spec.run else None
            options = FollowOptions(project=project, log_tail=LOG_TAIL_BYTES, gated=True)
            connector.start_early(follow_words(run, options), prepare=_import_the_watcher)
            spec = dataclasses.replace(spec, connector=connector)
        ready.append(spec)
    return ready


def _import_the_watcher() -> None:
    """Load the watcher's modules while SSH waits on the link, off the app's start."""
    import remote.watch

    remote.watch.Watcher  # noqa: B018 - the face loads the module on first use


def app_from_args(argv: list[str] | None = None) -> GpurentApp:
    """The app that ``gpurent-tui ARGV`` runs, its boxes' connections started (the fleet
    reaches its boxes with the same ``-i`` and ``--accept-new``)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    specs = connect_early(specs_from_args(args, parser))
    from tui.app import GpurentApp

    return GpurentApp(specs, ssh_options=ssh_options(args, parser),
                      accept_new=args.accept_new)


def main(argv: list[str] | None = None) -> int:
    """Run ``gpurent-tui`` and return its exit code."""
    app = app_from_args(argv)
    app.run()
    if app.farewell:
        print(app.farewell)
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
