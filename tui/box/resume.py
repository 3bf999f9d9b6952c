"""The resume key of one box: start a stopped instance through its provider's API, wait
for SSH at its new address, relaunch the interrupted run with ``resume=True`` and watch it
(``remote.resume.resume``). Each step appears on the connection badge and as a
notification, with its time and the $/h billed from then on."""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from remote.billing import money
from remote.link import Connector
from remote.resume import Resumed, Step, resume_run
from remote.runs import list_runs
from tui.box.instance import provider
from tui.box.parts import BoxKey, PartMessage, handles, instance_stopped, verdict
from tui.box.ports import Notice, Ports, Progress
from tui.box.state import BoxState
from tui.dialogs.confirm import ConfirmDialog
from tui.fmt import safe


@dataclass
class ResumeFigures(PartMessage, bubble=False, namespace="box"):
    """The instance (state, prices), for the question before resuming."""

    instance: Any


@dataclass
class ResumeDone(PartMessage, bubble=False, namespace="box"):
    """The run was relaunched on the started instance: ``runs`` of ``project``."""

    resumed: Resumed
    project: str
    runs: list[Any]


def resume_rank(state: BoxState) -> int | None:
    """The resume key's footer rank: a provider's instance that is stopped, or whose run
    ended without completing."""
    if state.has_instance() and (instance_stopped(state)
                                 or verdict(state) in ("stopped", "dead", "failed")):
        return 3
    return None


class Resume:
    """The resume action of one box; ``connector`` reaches the instance once it runs.
    ``interval``: seconds between polls of the provider's API while it starts."""

    KEYS = (BoxKey("R", "resume", "ask", "resume", "Start a stopped instance and resume its "
                   "interrupted run", 120, resume_rank),)

    def __init__(self, ports: Ports, connector: Connector, interval: float = 5.0) -> None:
        self.ports = ports
        self.connector = connector
        self.interval = interval

    def ask(self) -> None:
        """Ask the provider about the instance, then confirm with the money figures."""
        provider(self.ports.state)  # refuses without a provider instance
        self.ports.work("resume_figures", self._figures, group="instance",
                        label="asking the provider")

    def _figures(self) -> None:
        """Fetch the instance (state, prices) for the question."""
        state = self.ports.state
        self.ports.post(ResumeFigures(provider(state).get_instance(state.spec.instance)))

    @handles(ResumeFigures, take=("instance",), action="resume_figures")
    def confirm(self, instance: Any) -> None:
        """The question: what starting costs, and which run is resumed."""
        state = self.ports.state
        state.instance = instance
        run = state.resume_target()
        body = Text()
        body.append(f"{state.spec.instance} is {instance.state}")
        if instance.state != "running":
            body.append(f" and bills {money(instance.billing_per_hour)}/h; running bills ")
            price = instance.price_per_hour
            body.append(f"{money(price)}/h" if price is not None else "its GPU price",
                        style="bold")
            body.append(" again once it starts.")
        body.append("\nThen resume ")
        body.append_text(safe(run or f"the newest interrupted run in {state.project}", 120,
                              "bold"))
        body.append(" with resume=True and watch it. Its SSH address is asked of the "
                    "provider (it often changes after a stop).")
        self.ports.ask(ConfirmDialog("Start and resume", body, "Start and resume",
                                     variant="warning"),
                       lambda yes: self._start(run) if yes else None)

    def _start(self, run: str | None) -> None:
        self.ports.work("resume", lambda: self._resume(run), group="resume",
                        label=f"starting instance {self.ports.state.spec.instance}")

    def _resume(self, run_dir: str | None) -> None:
        """Start, wait for SSH, relaunch; then the run is watched again."""
        state, post = self.ports.state, self.ports.post

        def say(step: Step) -> None:
            post(Progress(step.line()))
            post(Notice(step.line(), timeout=8))

        resumed = resume_run(provider(state), str(state.spec.instance), self.connector,
                             run_dir, project=state.project, say=say,
                             interval=self.interval)
        project = posixpath.dirname(resumed.run_dir) or state.project
        post(ResumeDone(resumed, project, list_runs(resumed.transport, project)))
