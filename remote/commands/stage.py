"""``gpurent stage HOST REPO FILE --dest DIR`` and ``gpurent shapes HOST DIR``: a dataset
on the box (a tar from a Hub dataset repository, or generated for a first try), and the
``data=`` to launch with."""

from __future__ import annotations

import argparse
import json
import sys

from remote import fields
from remote.commands.errors import fail
from remote.commands.target import add_connection_options, host_target, open_transport
from remote.runs.checks import BoxToolFailed
from remote.runs.dataset import StageFailed, check_stage_args, shapes_dataset, stage_dataset
from remote.weights.push import NO_TOKEN, laptop_token
from trainer.text import clean_text, human_bytes

#: ``gpurent stage``'s exit code for each way the box's staging fails (``StageFailed.kind``;
#: 1: the box could not be reached, 2: bad input).
EXIT_CODES = {"hub": 3, "archive": 4, "disk": 5}
_HOST_HELP = ("HOST is user@host, an ~/.ssh/config alias, an instance such as vast:4242, "
              "or `local` for this machine")


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``stage`` and ``shapes`` subcommands."""
    p = sub.add_parser(
        "stage", help="put a dataset tar from a Hub dataset repository on a box",
        description="Run `trainer stage` on HOST (" + _HOST_HELP + "): the box downloads "
        "FILE from the Hub dataset repository REPO into its HF_HOME cache (resumable, "
        "sha256-checked; not through this laptop), refuses an archive with a member or link "
        "leading out of DIR, a device, too many files or more than the disk holds, and "
        "extracts it into DIR (relative to the login directory) once: a second call does "
        "nothing. Progress on stderr; the data.yaml found is printed as data=PATH, for "
        "`gpurent launch` or the TUI's launch form. This laptop's Hub token (HF_TOKEN or "
        "the huggingface_hub token store), when there is one, travels on stdin, for a "
        "private repository; HF_ENDPOINT here (a private Hub or a mirror) is the Hub the "
        "box downloads from. Exit 0 staged (or already), 1 the box could not be reached (or "
        "stopped answering), 2 bad input, 3 the Hub refused the token or lacks the "
        "repository or file, or the download failed, 4 the archive was refused (a member "
        "or link leading out of DIR, a device, too many files, too big) or is not a "
        "readable tar, 5 the box's disk (not enough room for the download or the files, "
        "or a write failed).")
    p.add_argument("host", metavar="HOST")
    p.add_argument("repo", metavar="REPO", help="the dataset repository, ORG/NAME")
    p.add_argument("file", metavar="FILE", help="the tar in it (.tar, .tar.gz, ...)")
    p.add_argument("--dest", required=True, metavar="DIR", help="where to extract it on HOST")
    p.add_argument("--revision", metavar="REV", help="branch, tag or commit (default main)")
    p.add_argument("--no-token", action="store_true",
                   help="send no token to the box (a public dataset)")
    add_connection_options(p)
    p.add_argument("--json", action="store_true", help="print the box's JSON report")
    p.set_defaults(func=run_stage)

    s = sub.add_parser(
        "shapes", help="generate a small shapes dataset on a box, for a first try",
        description="Run `trainer shapes` on HOST (" + _HOST_HELP + "): write a synthetic "
        "YOLO dataset of coloured shapes (4 classes) into DIR (new, empty, or an earlier "
        "shapes dataset) and print its data.yaml as data=PATH.")
    s.add_argument("host", metavar="HOST")
    s.add_argument("dir", metavar="DIR", help="where to write it on HOST")
    s.add_argument("--train", type=int, metavar="N", help="training images (default 800)")
    s.add_argument("--val", type=int, metavar="N", help="validation images (default 200)")
    s.add_argument("--imgsz", type=int, metavar="PX", help="image side (default 128)")
    add_connection_options(s)
    s.add_argument("--json", action="store_true", help="print the box's JSON report")
    s.set_defaults(func=run_shapes)


def run_stage(args: argparse.Namespace) -> int:
    """Stage the dataset and print where its data.yaml is."""
    check_stage_args(args.repo, args.file, args.dest)
    target = host_target(args.host)
    token = None if args.no_token else laptop_token()

    def note(line: str) -> None:
        print(f"gpurent stage: {clean_text(line)}", file=sys.stderr, flush=True)

    transport = open_transport(target, args, bootstrap=True, note=note)
    try:
        report = stage_dataset(transport, args.repo, args.file, args.dest, token=token,
                               revision=args.revision, progress=note)
    except StageFailed as exc:
        why = str(exc)
        if token is None and not args.no_token and "HTTP 401" in why:
            why += f"; {NO_TOKEN}"
        return fail("stage", why, EXIT_CODES.get(exc.kind, 1), args.json)
    finally:
        transport.close()
    if args.json:
        print(json.dumps(report))
        return 0
    verb = "staged" if report.get("staged") else "already staged"
    print(clean_text(f"{verb} {report.get('repo')} {report.get('file')} in {args.dest} on "
                     f"{args.host}: {report.get('files')} files, "
                     f"{human_bytes(fields.num(report.get('bytes')))} (sha256 "
                     f"{str(report.get('sha256'))[:12]}…)"))
    if not report.get("data_yaml"):
        note(f"no data.yaml in {args.dest}: the archive needs one at its top (with paths "
             "relative to it) to train on")
        return 0
    print(clean_text(f"data={report['data_yaml']}"))
    return 0


def run_shapes(args: argparse.Namespace) -> int:
    """Generate the shapes dataset and print where its data.yaml is."""
    target = host_target(args.host)
    transport = open_transport(target, args, bootstrap=True)
    try:
        report = shapes_dataset(transport, args.dir, train=args.train, val=args.val,
                                imgsz=args.imgsz)
    except BoxToolFailed as exc:
        return fail("shapes", exc, 1, args.json)
    finally:
        transport.close()
    if args.json:
        print(json.dumps(report))
        return 0
    names = ", ".join(str(n) for n in report.get("names") or [])
    print(clean_text(f"wrote {report.get('train')} train + {report.get('val')} val images "
                     f"({names}) in {args.dir} on {args.host}"))
    print(clean_text(f"data={report.get('data')}"))
    return 0
