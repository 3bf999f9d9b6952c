"""The headless commands on a Modal app (``modal:APP[/RUN]``): launch, status, runs,
follow, stop and the fleet's Modal rows. Each existing command hands a ``modal:`` target
here; the actions themselves are ``remote.serverless``'s."""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from typing import Any

from remote.commands.errors import fail
from remote.commands.target import Target
from remote.runs.read import list_runs, read_run, run_extras
from remote.serverless import (
    BILLS,
    AppState,
    app_view,
    launch_modal,
    need_modal,
    need_record,
    record_for,
    spec_from_words,
    stop_modal,
    volume_transport,
)
from remote.serverless.record import gpu_price
from trainer.runfiles import parse_iso
from trainer.text import clean_text, format_duration


def launch(args: argparse.Namespace, target: Target, pairs: dict[str, str]) -> int:
    """``gpurent launch modal:APP ...``: refuse a missing, zero or over-24 h timeout in
    one line, launch detached, print the app id, the app file and the money bound."""
    assert target.modal is not None
    try:
        spec = spec_from_words(target.modal, pairs)
    except ValueError as exc:
        return fail("launch", exc, 2, args.json)
    need_modal()
    earlier = record_for(spec.app)
    if earlier is not None and app_view(earlier).running:
        return fail("launch", f"modal:{spec.app} still runs (app {earlier.app_id}, run "
                    f"{earlier.run}): stop it first (gpurent stop modal:{spec.app}) or "
                    "give another app name", 1, args.json)
    launched = launch_modal(spec)
    price = gpu_price(spec.gpu)
    bound = price * spec.timeout / 3600
    if args.json:
        print(json.dumps({"ok": True, "app_id": launched.app_id, "target": target.host,
                          "run_dir": spec.run_dir, "app_file": str(launched.app_file),
                          "timeout": spec.timeout, "gpu": spec.gpu, "price_per_hour": price,
                          "most_dollars": round(bound, 2)}))
        return 0
    print(f"app {launched.app_id}  run modal:{spec.run_dir}  (detached)")
    print(f"app file {launched.app_file}")
    print(f"{spec.gpu or 'CPU'} at ${price:.2f}/h, timeout {format_duration(spec.timeout)}: "
          f"at most ${bound:.2f} before Modal ends it")
    return 0


def _record_and_state(target: Target) -> tuple[Any, AppState]:
    assert target.modal is not None
    record = need_record(target.modal)
    return record, AppState(record)


def status(args: argparse.Namespace, target: Target) -> dict[str, Any]:
    """``gpurent status modal:APP[/RUN]``: the run's summary read from the Volume, with
    Modal's state of the app and the money."""
    record, state = _record_and_state(target)
    run_dir = target.path if "/" in target.path else record.run_dir
    transport = volume_transport(record, state)
    try:
        run = read_run(transport, run_dir)
        summary = run.summary()
        summary["extras"] = run_extras(transport, run_dir)
    finally:
        transport.close()
    view = state.view()
    # The bill of the run shown: its tag is its name; an older run of the app started
    # before the app's last launch (its status says when).
    name = posixpath.basename(run_dir.rstrip("/"))
    since = record.launched_at if name == record.run else \
        parse_iso(str(run.read.get("started_at") or "")) or record.launched_at
    bill = BILLS.get(since)
    billed = bill.dollars(name)
    summary["guard"] = None
    summary["run_dir"] = f"modal:{run_dir}"
    summary["modal"] = {"app_id": record.app_id, "state": view.row and view.row.state,
                        "words": view.state_words, "money": view.money_words,
                        "timed_out": view.timed_out, "timeout": record.timeout,
                        "timeout_left": view.timeout_left, "spent": round(view.spent, 4),
                        "most_more": round(view.most_more, 4),
                        "bill": bill.words(name, since),
                        "billed": None if billed is None else float(billed)}
    if view.timed_out and summary.get("state") == "running":
        summary["health"] = "timed-out"
        summary["reason"] = f"Modal ended the app at its timeout ({view.state_words})"
    return summary


def status_lines(summary: dict[str, Any]) -> list[str]:
    """The Modal lines that follow a run's summary."""
    m = summary.get("modal") or {}
    return [f"{'modal':<8}{clean_text(str(m.get('words', '')))}",
            f"{'money':<8}{clean_text(str(m.get('money', '')))}",
            f"{'':<8}{clean_text(str(m.get('bill', '')))}"]


def runs(args: argparse.Namespace, target: Target) -> list[Any]:
    """The runs of the app's project in the Volume."""
    record, state = _record_and_state(target)
    transport = volume_transport(record, state)
    try:
        return list_runs(transport, record.app)
    finally:
        transport.close()


def follow_target(target: Target) -> tuple[Any, str]:
    """A ``connect()`` for the watcher and the run directory to follow."""
    record, state = _record_and_state(target)
    run_dir = target.path if "/" in target.path else record.run_dir
    return (lambda: volume_transport(record, state)), run_dir


def stop(args: argparse.Namespace, target: Target) -> int:
    """``gpurent stop modal:APP``: ``modal app stop``, then what is safe."""
    record, _ = _record_and_state(target)
    stopped = stop_modal(record, say=say)
    saved = [f.words for f in stopped.saved]
    if args.json:
        print(json.dumps({"ok": True, "outcome": "still-running" if stopped.containers
                          else "stopped", "app_id": record.app_id,
                          "containers": stopped.containers, "words": stopped.words,
                          "run": stopped.run, "state": stopped.view.state_words,
                          "money": stopped.view.money_words, "saved": saved,
                          "run_dir": f"modal:{record.run_dir}"}))
        return 0
    print(clean_text(stopped.words))
    print(clean_text(f"{stopped.run}; Modal: {stopped.view.state_words}"))
    print(clean_text(stopped.view.money_words))
    for line in saved or ["no weight file in the Volume or on the Hub"]:
        print(f"  {clean_text(line)}")
    return 0


def say(line: str) -> None:
    """A line on stderr."""
    print(line, file=sys.stderr)
