"""Starting a run so that a failure shows at once, for ``gpurent launch`` and the TUI.

Before anything starts, the box is asked whether it can run the engine at all (our
trainer: ``trainer ready``, whether its python has torch, numpy, pillow, pyyaml;
LibreYOLO: whether ``libreyolo`` is on PATH and, for a model it would download, whether
huggingface.co answers); a box that cannot is refused with the fix in one line and
nothing is created. After :func:`remote.runs.launch.launch` started the run,
:func:`wait_for_start` watches it for a few seconds until it writes its first status or
dies, so a run that dies in setup (a typo in ``data=``, an unknown model, a missing
package) is reported with the last lines of its ``console.log``; when LibreYOLO says it
trains into ``NAME2`` (``NAME`` appeared meanwhile), that directory is the run.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from remote.link.tools import ask_tool
from remote.runs.launch import LaunchResult, LaunchSpec, check_run_dir, launch_run, validate
from remote.runs.read import RunRead, read_launch, read_run
from remote.transport.base import Transport, TransportError
from trainer.health import LaunchRead, judge_health
from trainer.runfiles import StatusRead
from trainer.text import clean_text, one_line

#: How long a launch waits for the run's first status.json (or its death) by default.
START_WAIT = 10.0
#: Verdicts that mean the run is over before it began.
FAILED = ("failed", "dead")


class CannotStart(Exception):
    """The box cannot run this engine; the message is one line with the fix."""


@dataclass(frozen=True)
class Started:
    """A launched run and how it stood when the wait ended (``None``: not waited for)."""

    result: LaunchResult
    run: RunRead | None

    @property
    def failed(self) -> bool:
        """Whether the run ended (failed or died) within the wait."""
        return self.run is not None and self.run.health.verdict in FAILED

    @property
    def error(self) -> str:
        """``failed to start: <the console's last lines, or the status error>``."""
        if self.run is None or not self.failed:
            return ""
        reason = self.run.health.reason
        return reason if reason.startswith("failed to start") else f"failed to start: {reason}"


#: Asked on the box: the python that resets the launched engine's signals, and for
#: LibreYOLO whether it is on PATH and whether the Hub (its pretrained weights) answers.
_FIND_PYTHON = "command -v python3 || command -v python"
_HUB_PROBE = ("import socket\ntry:\n    socket.create_connection(('huggingface.co', 443), "
              "5).close()\n    print('online')\nexcept OSError:\n    print('offline')")
#: LibreYOLO's log line naming the folder it trains into.
_SAVING_TO = re.compile(r"\| Saving to: (.+)$", re.M)


def find_python(transport: Transport) -> str:
    """The box's python for the launch command: ``python3`` when it is on PATH (the form
    shows that command), else ``python`` by absolute path; ``CannotStart`` when it has
    neither."""
    found = transport.run(_FIND_PYTHON, timeout=30.0)
    path = found.stdout.decode("utf-8", "replace").strip().splitlines()
    if not found.ok or not path or not path[0].startswith("/"):
        raise CannotStart(f"no python3 on the PATH of {transport.label}: the launcher needs "
                          "one to start the run")
    return "python3" if posixpath.basename(path[0]) == "python3" else path[0]


def hub_reachable(transport: Transport) -> bool:
    """Whether the box can open a connection to huggingface.co (pretrained weights)."""
    probe = transport.run(f"python3 -c {shlex.quote(_HUB_PROBE)}", timeout=30.0)
    return b"offline" not in probe.stdout


def needs_download(spec: LaunchSpec) -> bool:
    """Whether LibreYOLO would download pretrained weights for ``spec``: a model name
    (not a file), ``pretrained`` not turned off, not a resume."""
    model = spec.args.get("model", "yolox-s")
    off = spec.args.get("pretrained", "true").strip().lower() in ("false", "0", "no", "off")
    return (spec.engine == "libreyolo" and not off and "resume" not in spec.args
            and "/" not in model and not model.endswith(".pt"))


def require_engine(transport: Transport, spec: LaunchSpec) -> None:
    """Raise ``CannotStart`` when the box cannot run ``spec``'s engine (nothing is
    started or created either way); ``TransportError`` when the box cannot be asked."""
    if spec.engine == "libreyolo":
        found = transport.run("command -v libreyolo", timeout=30.0)
        if not found.ok:
            raise CannotStart(f"libreyolo is not on the PATH of {transport.label}: install it "
                              "there (pip install libreyolo) or launch with --engine trainer")
        if needs_download(spec) and not hub_reachable(transport):
            model = clean_text(spec.args.get("model", "yolox-s"))
            raise CannotStart(f"{transport.label} cannot reach huggingface.co to download "
                              f"{model}'s pretrained weights: add pretrained=False to "
                              "train from scratch, or give model= a .pt file on the box")
        return
    answer = ask_tool(transport, ["ready", "--json"], timeout=60.0)
    report = answer.report
    if report is None:
        raise TransportError(f"cannot run the trainer on {transport.label}: "
                             f"{one_line(answer.why) or f'exit {answer.rc}'}")
    missing = [str(m) for m in report.get("missing") or []]
    if missing:
        exe = clean_text(str(report.get("executable") or "the box's python"))
        raise CannotStart(
            f"{exe} (python {clean_text(str(report.get('python')))}) on {transport.label} "
            f"cannot import {', '.join(missing)}: install them into it ({exe} -m pip install "
            f"{shlex.join(missing)}) or choose a python that has them with --python PATH")


def wait_for_start(transport: Transport, result: LaunchResult, timeout: float = START_WAIT,
                   *, poll: float = 0.25,
                   sleep: Callable[[float], None] = time.sleep) -> RunRead:
    """Read the run until it wrote status.json, ended, or ``timeout`` s passed; the last
    read (its verdict ``starting`` when it is still starting). When the engine says it
    trains elsewhere (LibreYOLO's ``Saving to: NAME2``), that directory is read."""
    deadline = time.monotonic() + timeout
    while True:
        run = read_run(transport, result.run_dir)
        if run.read.ok and run.read.get("pid") != result.pid:
            run = earlier_status(transport, run, result)
        if run.health.verdict == "starting" and run.launch is not None:
            moved = saving_to(run.launch.console, result.run_dir)
            if moved is not None:
                there = read_run(transport, moved)
                if there.read.ok:
                    return there
        if run.health.verdict != "starting" or time.monotonic() >= deadline:
            return run
        sleep(poll)


def earlier_status(transport: Transport, run: RunRead, result: LaunchResult) -> RunRead:
    """``run`` judged by the launch when its status.json is an earlier run's (a resume
    into the folder, before the new process writes its own): ``starting`` while the
    launched pid lives, ``failed`` with the console's end once it is gone."""
    launch = read_launch(transport, result.run_dir)
    launch = LaunchRead(result.pid, "" if launch is None else launch.console)
    alive = transport.pid_alive(result.pid)
    health = judge_health(StatusRead(None, "an earlier run's status.json", missing=True),
                          now=time.time(), pid_alive=lambda _pid: alive, launch=launch)
    return dataclasses.replace(run, health=health, pid_alive=alive, launch=launch)


def saving_to(console: str, run_dir: str) -> str | None:
    """The run directory LibreYOLO's console names (``Saving to: NAME2``: it trains into
    ``NAME2`` when ``NAME`` existed) when it is ``run_dir`` renamed that way; else
    ``None``."""
    project, name = posixpath.split(run_dir.rstrip("/"))
    for said in reversed(_SAVING_TO.findall(console)):
        if re.fullmatch(re.escape(name) + r"[0-9]+", said.strip()):
            return posixpath.join(project, said.strip())
    return None


def start_run(transport: Transport, spec: LaunchSpec, stdin: bytes | None = None,
              wait: float = START_WAIT) -> Started:
    """Check the engine, launch ``spec`` detached, then wait up to ``wait`` s for its
    start (0: do not wait). ``CannotStart``, ``RunIsLive``, ``ValueError`` and
    ``TransportError`` come from the checks and the launch; a run that failed to start
    is returned (``Started.failed``), since it exists and can be looked at."""
    validate(spec)
    check_run_dir(transport, spec)  # a live run there is the more useful refusal
    require_engine(transport, spec)
    result = launch_run(transport, spec, stdin=stdin, python=find_python(transport))
    if wait <= 0:
        return Started(result, None)
    run = wait_for_start(transport, result, wait)
    if run.run_dir != result.run_dir:
        result = dataclasses.replace(result, run_dir=run.run_dir)
    return Started(result, run)
