"""The resume key of a box (a mixin of ``tui.box.view.BoxView``): start a stopped instance
through its provider's API, wait for SSH at its new address, relaunch the interrupted run
with ``resume=True`` and watch it (``remote.billing.resume``). Each step appears on the connection
badge and as a notification, with its time and the $/h billed from then on."""

from __future__ import annotations

import posixpath
from typing import Any

from rich.text import Text
from textual import work

from remote.billing import Resumed, Step, money, resume_run
from remote.runs import list_runs
from tui.dialogs.confirm import ConfirmDialog
from tui.fmt import safe


class ResumeActions:
    """The resume action (``self`` is the ``BoxView``)."""

    #: Seconds between polls of the provider's API while the instance starts.
    resume_interval = 5.0

    def do_resume(self) -> None:
        """Ask the provider about the instance, then confirm with the money figures."""
        self.provider()  # refuses without a provider instance
        self.begin("resume_figures", "asking the provider")
        self.resume_figures()

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance",
          name="resume_figures")
    def resume_figures(self) -> None:
        """Fetch the instance (state, prices) for the question."""
        instance = self.provider().get_instance(self.spec.instance)
        self.app.call_from_thread(self._ask_resume, instance)

    def resume_target(self) -> str | None:
        """The run to resume: the watched one, else ``--run``, else ``None`` (the newest
        interrupted run, found once the box answers)."""
        if self.run_dir:
            return self.run_dir
        return posixpath.join(self.project, self.spec.run) if self.spec.run else None

    def _ask_resume(self, instance: Any) -> None:
        self.instance = instance
        run = self.resume_target()
        body = Text()
        body.append(f"{self.spec.instance} is {instance.state}")
        if instance.state != "running":
            body.append(f" and bills {money(instance.billing_per_hour)}/h; running bills ")
            price = instance.price_per_hour
            body.append(f"{money(price)}/h" if price is not None else "its GPU price",
                        style="bold")
            body.append(" again once it starts.")
        body.append("\nThen resume ")
        body.append_text(safe(run or f"the newest interrupted run in {self.project}", 120,
                              "bold"))
        body.append(" with resume=True and watch it. Its SSH address is asked of the "
                    "provider (it often changes after a stop).")
        self.app.push_screen(ConfirmDialog("Start and resume", body, "Start and resume",
                                           variant="warning"),
                             lambda yes: self._resume(run) if yes else None)

    def _resume(self, run: str | None) -> None:
        self.begin("resume", f"starting instance {self.spec.instance}")
        self.resume(run)

    @work(thread=True, exclusive=True, exit_on_error=False, group="resume", name="resume")
    def resume(self, run_dir: str | None) -> None:
        """Start, wait for SSH, relaunch; then the run is watched again."""

        def say(step: Step) -> None:
            self.tell(self.Progress(step.line()))
            self.app.call_from_thread(self.app.notify, step.line(), title=self.spec.title,
                                      timeout=8)

        resumed = resume_run(self.provider(), str(self.spec.instance), self.connector,
                             run_dir, project=self.project, say=say,
                             interval=self.resume_interval)
        project = posixpath.dirname(resumed.run_dir) or self.project
        runs = list_runs(resumed.transport, project)
        self.app.call_from_thread(self._resumed, resumed, project, runs)

    def _resumed(self, resumed: Resumed, project: str, runs: list[Any]) -> None:
        name = posixpath.basename(resumed.run_dir)
        watching = self.watcher if self.run_dir == resumed.run_dir else None
        self.on_box_view_connected(self.Connected(resumed.transport, project, runs, name,
                                                  []))
        if watching is not None and watching is self.watcher:
            watching.reconnect_now()  # it was retrying the old address with backoff
        self.refresh_instance()
