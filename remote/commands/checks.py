"""``gpurent preflight|doctor|profile HOST ...``: the box-side checks, from a script.

Each prints the box's JSON report with ``--json``, else a few readable lines; the exit
code is 0 when the report found nothing wrong, 1 when it did or the box could not be
reached, 2 for bad input."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from remote import fields
from remote.billing.cost import money
from remote.commands.errors import fail
from remote.commands.target import add_connection_options, host_target, open_transport
from remote.runs import checks
from trainer.text import clean_text


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``preflight``, ``doctor`` and ``profile`` subcommands."""
    p = sub.add_parser("preflight", help="check a box before training (CUDA, disk, HF_HOME)",
                       description="Run `trainer preflight` on HOST (or `local`): a real "
                       "CUDA kernel on every GPU, the driver, free disk, RAM, HF_HOME.")
    p.add_argument("host", metavar="HOST")
    p.add_argument("--project", help="the project directory the disk check is for")
    p.add_argument("--data", help="a data.yaml or dataset folder, to size the disk need")
    p.add_argument("--require-gpu", action="store_true", help="fail without a usable GPU")
    _common(p, "preflight")
    d = sub.add_parser("doctor", help="check a YOLO-format dataset on a box",
                       description="Run `trainer doctor` on HOST (or `local`): labels, "
                       "images, duplicates, class balance. The dataset is not modified.")
    d.add_argument("host", metavar="HOST")
    d.add_argument("data", metavar="DATA_YAML")
    _common(d, "doctor")
    f = sub.add_parser("profile", help="profile training steps and say if a faster GPU helps",
                       description="Run `trainer profile` on HOST (or `local`) with train "
                       "arguments as KEY=VALUE (model= data= batch= imgsz= workers= ...) "
                       "plus steps= warmup= price=USD_PER_HOUR. Options go before HOST. "
                       "On modal:APP (with gpu= data= or stage=, as `gpurent launch` takes "
                       "them) a probe app measures a few steps on that GPU (it bills: at "
                       "most 15 minutes) and proposes the run's timeout= for its epochs=.")
    f.add_argument("host", metavar="HOST")
    f.add_argument("pairs", nargs="*", metavar="KEY=VALUE")
    _common(f, "profile")


def _common(parser: argparse.ArgumentParser, name: str) -> None:
    add_connection_options(parser)
    parser.add_argument("--json", action="store_true", help="print the box's JSON report")
    parser.set_defaults(func=run, tool=name)


def run(args: argparse.Namespace) -> int:
    """Run one box tool and print its report."""
    pairs = dict(_pair(word) for word in getattr(args, "pairs", []))
    if args.tool == "profile" and args.host.startswith("modal:"):
        return modal_profile(args, pairs)
    target = host_target(args.host)
    transport = open_transport(target, args, bootstrap=True)
    try:
        if args.tool == "preflight":
            report = checks.preflight(transport, args.project, args.data, args.require_gpu)
        elif args.tool == "doctor":
            report = checks.doctor(transport, args.data)
        else:
            report = checks.profile(transport, pairs)
    except checks.BoxToolFailed as exc:
        return fail(args.tool, exc, 1, args.json)
    finally:
        transport.close()
    print(json.dumps(report) if args.json else "\n".join(readable(report)))
    return 0 if report.get("ok", True) is True else 1


def _pair(word: str) -> tuple[str, str]:
    key, sep, value = word.partition("=")
    if not sep or not key:
        raise ValueError(f"{word!r} is not KEY=VALUE")
    return key, value


def readable(report: dict[str, Any]) -> list[str]:
    """A few lines for people from any of the three reports (a wrongly typed field is
    shown as unreadable)."""
    t = fields.text
    lines: list[str] = []
    for check in fields.objs(report.get("checks")):
        lines.append(f"{t(check.get('status')):<5} {t(check.get('name'))}: "
                     f"{t(check.get('message'))}")
    for finding in fields.objs(report.get("findings")):
        lines.append(f"{t(finding.get('severity')):<7} {t(finding.get('kind'))}: "
                     f"{t(finding.get('message'))}")
        lines += [f"          {example}" for example in fields.texts(finding.get("examples"))]
    if "verdict" in report:
        lines.append(f"verdict: {t(report.get('verdict'))} ({t(report.get('why'))})")
        for verdict in fields.objs(report.get("verdicts")):
            lines += [f"  lever: {lever}" for lever in fields.texts(verdict.get("levers"))]
            if verdict.get("faster_gpu"):
                lines.append(f"  faster GPU? {t(verdict['faster_gpu'])}")
        cost = fields.obj(report.get("cost"))
        per_epoch = fields.num(cost.get("cost_per_epoch"))
        if per_epoch is not None:
            lines.append(f"cost: {money(per_epoch, 2)}/epoch, "
                         f"{money(fields.num(cost.get('cost_per_100_epochs')), 2)} per 100 "
                         "epochs")
    if "ok" in report:
        lines.append("ok" if report["ok"] is True else "problems found")
    return [clean_text(line) for line in lines]


def modal_profile(args: argparse.Namespace, pairs: dict[str, str]) -> int:
    """``gpurent profile modal:APP ...``: a probe app measures a few steps on the GPU
    asked for; print its report and the timeout proposed for the run's epochs."""
    from remote.serverless import (
        ModalError,
        check_app_name,
        estimate_bound,
        estimate_on_modal,
        need_modal,
        propose_timeout,
        spec_from_words,
    )

    app = args.host[len("modal:"):]
    try:
        spec = spec_from_words(check_app_name(app),
                               {"timeout": "15m", "name": "probe", **pairs})
    except ValueError as exc:
        return fail("profile", exc, 2, args.json)
    need_modal()
    if not args.json:
        print(f"gpurent profile: {estimate_bound(spec)}", file=sys.stderr)
    try:
        probed = estimate_on_modal(spec, progress=None if args.json else
                             lambda line: print(clean_text(line), file=sys.stderr))
    except ModalError as exc:
        return fail("profile", exc, 1, args.json)
    proposal = propose_timeout(probed, pairs.get("epochs", ""))
    if args.json:
        print(json.dumps({"ok": True, "report": probed.report, "app_id": probed.app_id,
                          "waited": round(probed.waited, 1),
                          "proposal": {"seconds": proposal.seconds, "timeout": proposal.value,
                                       "words": proposal.words}}))
        return 0
    print("\n".join(readable(probed.report)))
    print(f"timeout={proposal.value} proposed ({proposal.words})" if proposal.seconds
          else f"no timeout proposed: {proposal.words}")
    return 0
