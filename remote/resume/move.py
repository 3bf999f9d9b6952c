"""Resumed anywhere: a run whose box was taken away continues on another box from its last
push to the Hub (``gpurent resume ORG/REPO:NAME --on TARGET``).

The run is named by its Hub repository (where its milestones went) and its name (the
run directory ``PROJECT/NAME`` on the new box). In order, each step said as it happens:
the new box is checked (``trainer preflight``), the dataset is found there or staged
from a Hub dataset tar (``trainer stage``), the last checkpoint and the history are put
in place from the Hub (``trainer restore``, the token on stdin), or from this laptop's
verified pulled copy when it is newer (``remote.resume.fromlaptop``: uploaded over SFTP,
the step says which source and why), and the run is launched
with ``resume=True``, the same name and the same ``hub=``, so its pushes go on to the same
repository: our trainer, or ``libreyolo train`` with its push watcher when the Hub holds
a LibreYOLO run (``train_config.yaml``; its resume takes the restored ``last.pt`` as
``model=``). The history ends at the checkpoint's epoch (our trainer trims it, restore
does for LibreYOLO): the metrics continue with no gap and no duplicate. The money: the
epochs the interruption cost, exact when this laptop saw the old box's run at its last
epoch (the fleet's probe), else bounded by the milestone interval, at the old box's
$/epoch (``--old-price``, else the price the fleet saw), and the new box's price against
the old one's. The lease and the
guard the laptop knows of on the old box move to the new one (``remote.resume.carry``),
or the step says what to arm.
"""

from __future__ import annotations

import posixpath
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from remote.billing.intents import intent_for
from remote.billing.providers import (
    ConfigError,
    parse_instance_target,
    provider_for,
    split_instance_target,
)
from remote.fields import obj
from remote.fleet.interrupted import ENDED
from remote.link.connector import Connector
from remote.link.tools import ask_tool
from remote.resume.carry import carry_over, old_instance
from remote.resume.fromlaptop import choose, upload_copy
from remote.resume.resume import Resumed, ResumeFailed, Step, wait_for_takeover
from remote.runs.dataset import StageFailed, stage_dataset
from remote.runs.launch import make_spec
from remote.runs.start import start_run
from remote.transport.base import Transport
from remote.weights.lastsafe import hub_copy
from trainer import runfiles
from trainer.providers import Provider, ProviderError
from trainer.runfiles import epoch_count, milestone_period
from trainer.text import clean_text, money, rate

#: ``ORG/REPO:NAME``: the run's Hub repository and its name.
RUN_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*):"
                    r"([A-Za-z0-9][A-Za-z0-9._-]*)$")
TOOL_TIMEOUT = 3600.0
#: Where a moved run goes on the new box unless told: the project ``gpurent-tui BOX``
#: opens, so that its tab shows the run.
DEFAULT_PROJECT = "runs/train"
#: Seconds an epoch may take in a status believed (a month); more is a lie.
MAX_EPOCH_SECONDS = 30 * 86400


@dataclass(frozen=True)
class Moving:
    """What to move: the Hub ``repo``, the run ``name``, the ``project`` on the new box,
    its dataset (``data``, or ``stage``: a Hub dataset ``(repo, file)`` to stage into
    ``stage_dest`` when ``data`` is missing there) and the prices known (``$/h``)."""

    repo: str
    name: str
    project: str = DEFAULT_PROJECT
    data: str | None = None
    stage: tuple[str, str] | None = None
    stage_dest: str = "datasets"
    old_rate: float | None = None
    new_rate: float | None = None


def parse_run(text: str) -> tuple[str, str]:
    """``ORG/REPO:NAME``, or ``PROVIDER:ID:PROJECT/NAME`` (the run's path on its old
    instance, launched from this laptop with ``hub=``: the intents know its repository),
    or ``PROVIDER:ID`` alone when this laptop launched one such run there -> ``(repo,
    name)``; ``ValueError`` otherwise (with several runs there: the ones to choose from)."""
    split = split_instance_target(text)
    if split is not None and split[1]:
        return _run_at(split[0].text, split[1])
    if split is not None:
        return _only_run(split[0].text)
    match = RUN_RE.match(text)
    if not match or ".." in text:
        raise ValueError(f"{text!r} is not a run named as ORG/REPO:NAME (its Hub repository "
                         "and its name) or PROVIDER:ID:RUN_DIR (its path on its old box)")
    return match.group(1), match.group(2)


def _run_at(instance: str, path: str) -> tuple[str, str]:
    """The Hub repository and name of the run launched from here at ``path`` on
    ``instance``, from the intents."""
    intent = intent_for(instance)
    want = posixpath.normpath(path)
    runs = [r for r in (intent.runs if intent is not None else ())
            if posixpath.normpath(posixpath.join(r.project, r.name)) == want]
    if not runs:
        raise ValueError(f"this laptop launched no run at {path} on {instance}: name it as "
                         "ORG/REPO:NAME")
    if not runs[0].repo:
        raise ValueError(f"{instance}:{path} was launched without hub=: no milestone to "
                         "resume it from elsewhere")
    return runs[0].repo, runs[0].name


def launched_here(instance: str) -> list[str]:
    """The run directory (``PROJECT/NAME``) of each run this laptop launched on
    ``instance``, from the intents."""
    intent = intent_for(instance)
    return [posixpath.join(r.project, r.name) for r in (intent.runs if intent else ())]


def _only_run(instance: str) -> tuple[str, str]:
    """The Hub repository and name of the one run launched from here on ``instance``
    with ``hub=``; ``ValueError`` naming the runs to choose from when there are several
    (a run is never picked for the user: each resumes from its own checkpoint)."""
    intent = intent_for(instance)
    runs = [r for r in (intent.runs if intent is not None else ()) if r.repo]
    if len(runs) == 1:
        return runs[0].repo, runs[0].name
    if not runs:
        raise ValueError(f"this laptop launched no run with hub= on {instance}: name the "
                         "run as ORG/REPO:NAME")
    named = "; ".join(f"{instance}:{posixpath.join(r.project, r.name)} ({r.repo}:{r.name})"
                      for r in runs)
    raise ValueError(f"{len(runs)} runs were launched on {instance}: name the one to "
                     f"resume, one of: {named}")


def money_lines(status: dict[str, object], moving: Moving,
                seen: dict[str, object] | None = None) -> list[str]:
    """What the interruption cost and what the new box costs, in words. The epochs lost
    are exact when ``seen`` (what the laptop last saw of the run on the old box) is its
    last epoch (the run was seen dead, failed, stopped or completed), else bounded by
    one milestone interval; the line says which."""
    # The status comes from the Hub: a count out of range (401 digits) is no count.
    epoch = epoch_count(status.get("completed_epochs"))
    total = epoch_count(status.get("total_epochs"))
    args = obj(status.get("args"))
    hub_period = epoch_count(args.get("hub_period")) or 0
    seen = seen or {}
    last, health = epoch_count(seen.get("epoch")), seen.get("health")
    lines = []
    if last is not None and epoch is not None and health in ENDED:
        lost = max(0, last - epoch)
        text = (f"work after epoch {epoch} is lost: {lost} epoch(s), exact (this laptop saw "
                f"the old box's run {health} at epoch {last}), plus the epoch in progress")
    elif total is not None:
        lost = milestone_period(total, hub_period)
        text = (f"work after epoch {epoch} is lost: at most {lost} epoch(s), one milestone "
                "(the bound: this laptop did not see the old box's last epoch)")
    else:
        lost, text = None, ""
    seconds = status.get("mean_epoch_seconds")
    if text and lost is not None and isinstance(seconds, (int, float)) \
            and 0 <= seconds <= MAX_EPOCH_SECONDS and moving.old_rate is not None:
        per_epoch = seconds * moving.old_rate / 3600
        text += (f", {'at most ' if 'at most' in text else ''}{money(lost * per_epoch)} "
                 f"({money(per_epoch)}/epoch at {rate(moving.old_rate)})")
    if text:
        lines.append(text)
    if moving.new_rate is not None:
        text = f"the new box bills {rate(moving.new_rate)}"
        if moving.old_rate is not None:
            diff = moving.new_rate - moving.old_rate
            text += (f", {rate(abs(diff))} {'more' if diff > 0 else 'less'} than the old one"
                     if diff else ", as the old one did")
        lines.append(text)
    return lines


def new_box_rate(target: str, client: Provider | None = None) -> float | None:
    """What the box ``target`` a run moves to bills per hour, asked of its provider now
    (through ``client``, a listed account's, else one made from this laptop's key);
    ``None`` when it is no instance or the provider does not say (the price is a nicety:
    the move does not need it)."""
    try:
        named = parse_instance_target(target)
        if named is None:
            return None
        ask = client if client is not None else provider_for(named.provider)
        return ask.get_instance(named.instance).price_per_hour
    except (ConfigError, ProviderError, ValueError):
        return None


def last_seen(moving: Moving, target: str) -> tuple[dict[str, object], float | None]:
    """What this laptop last saw of the run on its old box, and the old box's running
    price (the one seen by the fleet), from the intents; empty when unknown."""
    old = old_instance(moving.repo, moving.name, target)
    intent = intent_for(old) if old is not None else None
    run = intent.run(moving.repo, moving.name) if intent is not None else None
    return (dict(run.seen) if run is not None else {},
            intent.price_per_hour if intent is not None else None)


def move_run(connector: Connector, moving: Moving, token: str, *, target: str = "TARGET",
             instance: tuple[str, str] | None = None,
             say: Callable[[Step], None] = lambda _s: None, start_timeout: float = 300.0,
             clock: Callable[[], float] = time.monotonic) -> Resumed:
    """Continue ``moving``'s run on ``connector``'s box (named ``target``; ``instance``:
    its ``(provider, id)`` when it is a rented instance), then move the guard and lease
    of the old box to it (``remote.resume.carry``); each step goes to ``say``.
    Raises ``ResumeFailed`` (a step did not work out) or ``TransportError``."""
    began = clock()
    steps: list[Step] = []
    secret = (token.strip() + "\n").encode()

    def step(text: str, rate_: float | None = None) -> None:
        steps.append(Step(clock() - began, text, rate_))
        say(steps[-1])

    transport = connector.open()
    try:
        step(f"SSH answers at {transport.label}", moving.new_rate)
        check = ask_tool(transport, ["preflight", "--json"], timeout=600.0)
        if check.report is None or not check.ok:
            failed = ", ".join(str(f) for f in (check.report or {}).get("failed") or [])
            raise ResumeFailed(f"the box failed its preflight: {failed or check.why}")
        step("preflight passed")
        data = _dataset(transport, moving, token.strip(), step)
        run_dir = f"{moving.project.rstrip('/')}/{moving.name}"
        hub = hub_copy(moving.repo, moving.name, token.strip())
        source = choose(hub, moving.name, old_project(moving, target))
        step(f"from {'this laptop' if source.copy else 'the Hub'}: {source.why}")
        if source.copy is None or not hub.error:
            report = _restore(transport, moving, run_dir, secret,
                              "" if hub.error else hub.commit)
            step(f"restored {moving.repo} at {str(report.get('commit'))[:12]} into "
                 f"{run_dir}: last.pt of epoch {report.get('epoch')}")
        else:
            report = _empty(transport, run_dir)
        status = obj(report.get("status"))
        if source.copy is not None:
            upload_copy(transport, source.copy, run_dir)
            status = {**status, "completed_epochs": source.copy.epoch}
            step(f"uploaded the laptop's verified copy into {run_dir}: last.pt of epoch "
                 f"{source.copy.epoch}, its history to that epoch")
        seen, old_rate = last_seen(moving, target)
        if moving.old_rate is None and old_rate is not None:
            moving = replace(moving, old_rate=old_rate)
        for line in money_lines(status, moving, seen):
            step(line)
        engine = "libreyolo" if report.get("engine") == "libreyolo" else "trainer"
        spec = make_spec(engine, moving.project, moving.name,
                         {"resume": "True", "data": data, "hub": moving.repo})
        started = start_run(transport, spec, stdin=secret, wait=0)
        step(f"launched {run_dir} with resume=True (pid {started.result.pid}"
             f"{', LibreYOLO, its push watcher beside it' if spec.push else ''})")
        fields = wait_for_takeover(transport, started.result.run_dir, started.result.pid,
                                   timeout=start_timeout)
        step(f"training again from epoch {fields.get('start_epoch', '?')} of "
             f"{fields.get('total_epochs', '?')}, pushing to {moving.repo}")
        for line in carry_over(transport, started.result.run_dir, moving.repo, moving.name,
                               target, instance):
            step(line)
    except BaseException:
        transport.close()
        raise
    return Resumed(transport, started.result.run_dir, started.result.pid,
                   started.result.command, steps)


def old_project(moving: Moving, target: str) -> str:
    """The run's project on its old box, from the intents; ``""`` when unknown."""
    old = old_instance(moving.repo, moving.name, target)
    intent = intent_for(old) if old is not None else None
    run = intent.run(moving.repo, moving.name) if intent is not None else None
    return run.project if run is not None else ""


def _restore(transport: Transport, moving: Moving, run_dir: str, secret: bytes,
             commit: str = "") -> dict[str, Any]:
    """``trainer restore`` of the Hub's milestone into ``run_dir`` (as of ``commit``, the
    one this laptop found to be the run's own, when it found one): its report."""
    pinned = ["--revision", commit] if commit else []
    restored = ask_tool(transport, ["restore", moving.repo, "--run-dir", run_dir, *pinned,
                                    "--token-stdin", "--json"],
                        timeout=TOOL_TIMEOUT, stdin=secret)
    report = restored.report or {}
    if not restored.ok or not report.get("ok"):
        raise ResumeFailed(f"restore from {moving.repo} failed: "
                           f"{clean_text(str(report.get('error') or restored.why))}")
    return report


def _empty(transport: Transport, run_dir: str) -> dict[str, Any]:
    """Refuse a ``run_dir`` that already holds a run (as restore does); an empty report."""
    for held in (runfiles.STATUS_FILE, runfiles.METRICS_FILE, "weights/last.pt"):
        if transport.stat(f"{run_dir}/{held}") is not None:
            raise ResumeFailed(f"{run_dir} already holds a run: resume it there, or pick "
                               "another name")
    return {}


def _dataset(transport: Transport, moving: Moving, token: str,
             step: Callable[[str], None]) -> str:
    """The dataset's data.yaml on the new box: ``data`` when it is there, else staged
    (``remote.runs.dataset.stage_dataset``, as ``gpurent stage``: each of the box's
    progress lines is a step as it comes)."""
    if moving.data is not None and transport.stat(moving.data) is not None:
        step(f"dataset found at {moving.data}")
        return moving.data
    if moving.stage is None:
        raise ResumeFailed(f"no dataset at {moving.data or '(none given)'} on the box: give "
                           "--data PATH, or --stage REPO:FILE to stage it from the Hub")
    repo, file = moving.stage
    try:
        report = stage_dataset(transport, repo, file, moving.stage_dest, token=token,
                               progress=lambda text: step(f"staging {file}: {text}"))
    except StageFailed as exc:
        raise ResumeFailed(f"staging {repo}/{file} failed: {exc}") from None
    if not report.get("data_yaml"):
        raise ResumeFailed(f"staging {repo}/{file} failed: no data.yaml in it")
    step(f"dataset staged from {repo}/{file}: {report['data_yaml']}")
    return str(report["data_yaml"])
