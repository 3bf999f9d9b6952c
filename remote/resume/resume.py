"""Back after a stop, in one step: start the instance through its provider's API, wait
until it runs, find where its SSH server answers now (``remote.link.connector.Connector``
locates an instance on every connection), wait for SSH, and relaunch the interrupted run
with ``resume=True``. Each step is reported with the seconds since the start and the
$/h that is billed from then on. Used by ``gpurent resume`` and the TUI's resume key.
"""

from __future__ import annotations

import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from remote.billing.intents import want_running
from remote.link.connector import Connector
from remote.runs.launch import LaunchSpec, RunIsLive, launch_run
from remote.runs.read import console_path, list_runs, read_run, read_status
from remote.transport.base import Transport, TransportError, Unreachable
from trainer.providers import Provider
from trainer.providers.confirm import start_and_confirm
from trainer.text import clean_text

#: Health verdicts of a run that stopped before its end: what a resume takes back up.
INTERRUPTED = ("dead", "stopped", "failed")
#: Health verdicts of a run that is still going: resuming it only watches it.
LIVE = ("live", "slow", "stalled")


class ResumeFailed(TransportError):
    """A step of the resume did not work out; the message says which and why."""


@dataclass(frozen=True)
class Step:
    """One step: ``seconds`` since the resume began; ``rate``: $/h billed from now on."""

    seconds: float
    text: str
    rate: float | None = None

    def line(self) -> str:
        """``[  12.3s] text  ($0.4520/h)``."""
        money = "" if self.rate is None else f"  (${self.rate:.4f}/h)"
        return f"[{self.seconds:6.1f}s] {clean_text(self.text)}{money}"

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict."""
        return {"seconds": round(self.seconds, 3), "text": clean_text(self.text),
                "rate_per_hour": self.rate}


@dataclass
class Resumed:
    """The box is back: an open ``transport``, the run and how it was resumed (``pid``
    is ``None`` when the run was still live and was only watched)."""

    transport: Transport
    run_dir: str
    pid: int | None
    command: str | None
    steps: list[Step] = field(default_factory=list)


def _money(rate: float | None) -> str:
    return "an unknown price" if rate is None else f"${rate:.4f}/h"


def wait_for_ssh(connector: Connector, *, timeout: float, interval: float = 2.0,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> Transport:
    """Open ``connector`` once its SSH server answers, trying again every ``interval``
    seconds while nothing answers (``Unreachable``); a refused login or host key, or
    ``timeout`` seconds of silence, raise."""
    deadline = clock() + timeout
    while True:
        try:
            return connector.open()
        except Unreachable as exc:
            if clock() + interval > deadline:
                raise ResumeFailed(f"no SSH server answered within {timeout:g}s: "
                                   f"{exc}") from None
        sleep(interval)


def wait_for_takeover(transport: Transport, run_dir: str, pid: int, *, timeout: float,
                      interval: float = 1.0, clock: Callable[[], float] = time.monotonic,
                      sleep: Callable[[float], None] = time.sleep) -> dict[str, object]:
    """Wait until the relaunched trainer (``pid``) writes its own status.json (until then
    it still holds the interrupted run's, which reads as dead); its fields. Raises
    ``ResumeFailed`` with the end of its console log when it exits first."""
    deadline = clock() + timeout
    while True:
        read = read_status(transport, run_dir)
        if read.get("pid") == pid:
            return dict(read.fields or {})
        if not transport.pid_alive(pid):
            path = console_path(transport, run_dir)
            tail = transport.read(path, max(0, (transport.stat(path) or _Empty).size - 300))
            last = clean_text(tail.decode("utf-8", "replace")).strip().splitlines()
            raise ResumeFailed(f"the relaunched trainer exited before training: "
                               f"{last[-1] if last else 'no output'} (see {path})")
        if clock() + interval > deadline:
            raise ResumeFailed(f"the relaunched trainer (pid {pid}) wrote no status within "
                               f"{timeout:g}s")
        sleep(interval)


class _Empty:
    size = 0


def pick_interrupted(transport: Transport, project: str) -> str:
    """The newest run in ``project`` that stopped before its end (``INTERRUPTED``)."""
    for run in list_runs(transport, project):
        if run.health in INTERRUPTED:
            return run.run_dir
    raise ResumeFailed(f"no interrupted run in {clean_text(project)} (dead, stopped or "
                       "failed): name the run to resume")


def resume_run(provider: Provider, instance_id: str, connector: Connector,
               run_dir: str | None = None, *, project: str = "runs/train",
               engine: str = "trainer", say: Callable[[Step], None] = lambda _s: None,
               start_timeout: float = 600.0, ssh_timeout: float = 300.0,
               interval: float = 5.0, clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep) -> Resumed:
    """Start the instance (unless it runs), wait for SSH and relaunch ``run_dir`` (default:
    the newest interrupted run in ``project``) with ``resume=True``; ``say`` gets each
    step. Raises ``ResumeFailed``/``TransportError``, ``ProviderError`` from the API, and
    ``ValueError`` for a run that cannot be resumed (completed)."""
    began = clock()
    steps: list[Step] = []

    def step(text: str, rate: float | None = None) -> None:
        steps.append(Step(clock() - began, text, rate))
        say(steps[-1])

    name = f"{provider.title} instance {instance_id}"
    want_running(f"{provider.name}:{instance_id}")  # a stop after this is a surprise
    instance = provider.get_instance(instance_id)
    if instance.state == "running":
        step(f"{name} is running", instance.billing_per_hour)
    else:
        price = instance.price_per_hour
        step(f"{name} is {instance.state}; starting it"
             + (f" (running bills {_money(price)})" if price is not None else ""),
             instance.billing_per_hour)
        outcome = start_and_confirm(provider, instance_id, timeout=start_timeout,
                                    interval=interval, sleep=sleep, clock=clock)
        if not outcome.confirmed:
            raise ResumeFailed(outcome.message)
        step(f"{name} is running: billing {_money(outcome.billing_per_hour)} again",
             outcome.billing_per_hour)
    transport = wait_for_ssh(connector, timeout=ssh_timeout, interval=min(interval, 2.0),
                             clock=clock, sleep=sleep)
    step(f"SSH answers at {transport.label}")
    try:
        run_dir = (run_dir or pick_interrupted(transport, project)).rstrip("/")
        run = read_run(transport, run_dir)
        verdict = run.health.verdict
        if verdict == "completed":
            raise ValueError(f"{run_dir} has completed: nothing to resume")
        if verdict == "unreadable":
            raise ValueError(f"{run_dir}: {run.health.reason}")
        if verdict in LIVE:
            step(f"{run_dir} is still going ({verdict}): watching it")
            return Resumed(transport, run_dir, None, None, steps)
        spec = LaunchSpec(engine, posixpath.dirname(run_dir) or ".",
                          posixpath.basename(run_dir), {"resume": "True"})
        try:
            result = launch_run(transport, spec)
        except RunIsLive as exc:
            step(f"{exc}: watching it")
            return Resumed(transport, run_dir, None, None, steps)
        step(f"relaunched {run_dir} with resume=True (pid {result.pid}, was {verdict} at "
             f"epoch {run.read.get('completed_epochs') or 0}/"
             f"{run.read.get('total_epochs') or '?'})")
        status = wait_for_takeover(transport, run_dir, result.pid, timeout=ssh_timeout,
                                   interval=min(interval, 1.0), clock=clock, sleep=sleep)
        step(f"training again from epoch {status.get('start_epoch', '?')} of "
             f"{status.get('total_epochs', '?')}")
    except BaseException:
        transport.close()
        raise
    return Resumed(transport, run_dir, result.pid, result.command, steps)
