"""The actions on one box (push, pull, stop run, stop or destroy the instance, guard) and
how their outcome reaches the screen, mixed into ``tui.box.view.BoxView``. The launch form
and the profiler are in ``tui.box.launching``.

Each action asks in a dialog (Cancel first), then calls one ``remote`` function in a
worker thread, shown in the status row while it runs. A failure raised in a worker is
reported by ``report_failure`` (called from ``BoxView.on_worker_state_changed``) as one
line with the next step, in a notification, the status row and the events history."""

from __future__ import annotations

import os
import time
from typing import Any

from rich.text import Text
from textual import work

from remote.billing import (
    box_address,
    money,
    parse_instance_target,
    provider_for,
    rate,
    resolve_safety,
    run_safety,
    run_teardown,
    warning_for,
)
from remote.runs import stop_run
from remote.transport import Transport
from remote.weights import laptop_token, pull_weights, require_token
from trainer.runfiles import parse_iso
from trainer.text import format_duration, one_line
from tui.box.activity import Activities
from tui.box.failures import BACKGROUND, ActionRefused, describe
from tui.box.guard import GuardActions
from tui.box.reports import instance_costs
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.push import PushDialog
from tui.fmt import advance_ages, safe
from tui.widgets.badges import WeightsBadge
from tui.words import ENDED

__all__ = ["ActionRefused", "BoxActions"]

#: Verdicts after which a box that still runs is idle, billing for nothing.
RUN_OVER = ("completed", "failed", "stopped", "dead")


class BoxActions(GuardActions):
    """Actions of a box view (a mixin: ``self`` is the ``BoxView``)."""

    def init_actions(self) -> None:
        """State the actions keep between calls."""
        self.preflight: dict[str, Any] | None = None
        self.instance: Any = None
        self.safety: Any = None
        self.safety_at: float | None = None
        self.last_hub_repo = ""
        self.activities = Activities()
        #: The last outcome worth keeping on screen: ``(line, severity)``.
        self.last_line: tuple[str, str] | None = None
        self._background_failures: dict[str, str] = {}

    # ------------------------------------------------------------------ outcomes

    def begin(self, name: str, label: str) -> None:
        """Action ``name`` (its worker's name) starts: show it in the status row."""
        self.activities.start(name, label, self.clock())
        self.draw_status_row()

    def end_activity(self, name: str) -> None:
        """Worker ``name`` ended (well or not): it leaves the status row."""
        if self.activities.finish(name) is not None:
            self.draw_status_row()

    def done(self, line: str) -> None:
        """An action succeeded: say so (notification, status row, history)."""
        self.last_line = (line, "information")
        self.app.notify(line, title=self.spec.title)
        self.draw_status_row()

    def report_failure(self, name: str, error: BaseException) -> None:
        """Put the failure of ``name`` on screen as one line with the next step: a
        notification (with the bell for the worst), the status row, the events history,
        and inside the launch form when it is open. A broken link starts the reconnect."""
        failure = describe(name, error, self.transport)
        if failure.link and self.transport is not None:
            self.relink()
        if name in BACKGROUND:
            if self._background_failures.get(name) == failure.line:
                self.app.record(failure.line, self.spec.title, "note")
                return
            self._background_failures[name] = failure.line
        self.last_line = (failure.line, failure.severity)
        form = getattr(self, "launch_form", None)
        if form is not None and form.is_attached and name in ("start_launch", "profile",
                                                              "run_checks", "probe"):
            form.show_error(failure.line)
        if failure.bell:
            self.app.alert(failure.line, self.spec.title, severity=failure.severity)
        else:
            self.app.notify(failure.line, title=self.spec.title, severity=failure.severity,
                            timeout=12)
        self.draw_status_row()

    def relink(self) -> None:
        """An action found the link broken: one reconnect for the control connection
        (and the watcher, unless it is already on it)."""
        if self.watcher is not None and self.down_since is None:
            self.watcher.reconnect_now()
        self.reconnect_control()

    # ------------------------------------------------------------------ helpers

    def need_transport(self) -> Transport:
        """The control connection, or ``ActionRefused`` saying why there is none."""
        if self.transport is None:
            raise ActionRefused("not connected to the box yet: wait for the connection "
                                "(r retries now)")
        if self.down_since is not None:
            raise ActionRefused(f"no link to the box ({self.stale_words()}): reconnecting "
                                "on its own; r tries now")
        return self.transport

    def need_run(self) -> str:
        """The watched run directory, or ``ActionRefused``."""
        if self.run_dir is None:
            raise ActionRefused("no run selected (l: launch, or pick one in the runs list)")
        return self.run_dir

    def price_per_hour(self) -> float | None:
        """``--price``, else the provider's price for the instance, else unknown."""
        if self.spec.price is not None:
            return self.spec.price
        return getattr(self.instance, "price_per_hour", None)

    def costs(self) -> Any:
        """``remote.billing.cost.CostReport`` for the watched run, elapsed counted up to now."""
        from remote.billing import cost_report

        status = dict(self.status.read.fields or {}) if self.status is not None else {}
        elapsed = self.header.elapsed()
        if elapsed is not None:
            status["elapsed_seconds"] = elapsed
        return cost_report(price_per_hour=self.spec.price, status=status,
                           instance=self.instance)

    def money_text(self) -> Text:
        """The header's money line: $/h, spent so far, projected to finish, and what the
        box bills after the run ended."""
        from tui.widgets.header import money_line

        report = self.costs()
        note = ""
        if report.per_epoch_usd is not None:
            note = f"{money(report.per_epoch_usd)}/epoch"
        if report.price_source:
            note = f"{note}  ({report.price_source})".strip()
        return money_line(report.price_per_hour, report.spent_usd,
                          report.projected_total_usd, note, self.after_run_text())

    def after_run_text(self) -> Text | None:
        """Once the run is over: ``idle 7 min: $0.41 and counting`` while the instance
        still runs, or how its billing ended (``None`` while the run goes on)."""
        if self.status is None or self.status.health.verdict not in RUN_OVER:
            return None
        guard, instance = self.guard, self.instance
        outcome = (guard.outcome or {}) if guard is not None and guard.state == "done" \
            else {}
        state = getattr(instance, "state", None)
        if state == "destroyed" or (outcome.get("confirmed") and
                                    outcome.get("action") == "destroy"):
            return Text("instance destroyed: billing ended", style="green")
        if state == "stopped" or (outcome.get("confirmed") and outcome.get("action") == "stop"):
            storage = getattr(instance, "storage_per_hour", None)
            if storage is None:
                storage = outcome.get("billing_per_hour")
            return Text(f"instance stopped: its disk bills {rate(storage)}", style="yellow")
        ended = parse_iso(self.status.read.get("updated_at") or "")
        if ended is None:
            return None
        idle = max(0.0, self.clock() - ended)
        price = self.price_per_hour()
        usd = None if price is None else idle * price / 3600
        when = f"{int(idle // 60)} min" if idle < 3600 else format_duration(idle)
        return Text(f"idle {when}: {money(usd)} and counting", style="bold red")

    # ------------------------------------------------------------------ safety, instance

    @work(thread=True, exclusive=True, exit_on_error=False, group="safety",
          name="refresh_safety")
    def refresh_safety(self) -> None:
        """Ask whether the weights of every run the box knows are safe off it (Hub or
        laptop) and show it on the badge."""
        if self.transport is None or self.down_since is not None:
            return
        safety = resolve_safety(self.safety_source())
        self.app.call_from_thread(self._show_safety, safety)

    def safety_source(self) -> Any:
        """``remote.weights.safety.weights_safety`` for the watched run, its project (the box's
        project when no run is watched and it exists) and the box's registry, as a
        callable for the gate: blocking, asked anew at each call."""
        transport, run_dir, project = self.need_transport(), self.run_dir, self.project

        def ask() -> Any:
            has_project = run_dir is None and transport.stat(project) is not None
            return run_safety(transport, run_dir, (project,) if has_project else ())()

        return ask

    def _show_safety(self, safety: Any) -> None:
        self.safety, self.safety_at = safety, self.clock()
        self._background_failures.pop("refresh_safety", None)
        self.draw_safety()

    @work(thread=True, exclusive=True, exit_on_error=False, group="needs",
          name="install_needs")
    def install_needs(self) -> None:
        """Install what the follower said the box tools lack (psutil, huggingface_hub),
        in the background; what happened is one notification."""
        box, transport = self.connector.box, self.transport
        if not box or not box.get("missing") or transport is None:
            return
        from remote.link import install_needs

        notes: list[str] = []
        install_needs(transport, box, notes, lambda line: self.tell(self.Progress(line)))
        for note in notes:
            self.app.call_from_thread(self.app.notify, one_line(note), title=self.spec.title,
                                      timeout=8)

    def draw_safety(self) -> None:
        """The weights badge, its reason's ages moved on to now."""
        if self.safety is None or self.safety_at is None:
            return
        s = self.safety
        reason = advance_ages(s.reason, self.clock() - self.safety_at)
        known = bool(getattr(s, "runs", True))  # no run to check: unknown, not unsafe
        self.query_one(WeightsBadge).show(s.safe if known else None, getattr(s, "where", None),
                                          getattr(s, "epoch", None), reason,
                                          nothing=bool(getattr(s, "nothing", False)),
                                          unsafe=getattr(s, "unsafe_names", ""))

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance",
          name="refresh_instance")
    def refresh_instance(self) -> None:
        """Ask the provider about the instance (price, storage, state); the guard's
        state on the box comes with the watcher's stream."""
        if not self.spec.provider or self.spec.provider == "manual" or not self.spec.instance:
            return
        instance = self.provider().get_instance(self.spec.instance)
        self.app.call_from_thread(setattr, self, "instance", instance)

    def provider(self) -> Any:
        """The provider client for ``--provider`` (its API key from the environment or
        the config file)."""
        if not self.spec.provider or self.spec.provider == "manual" or not self.spec.instance:
            raise ActionRefused("no provider instance: open the box as vast:ID / runpod:ID, "
                                "or start with --provider vast|runpod|lambda --instance ID")
        return provider_for(self.spec.provider, base_url=self.spec.provider_url)

    # ------------------------------------------------------------------ push, pull

    def do_push(self) -> None:
        """Ask for the Hub repo, then push best.pt from the box."""
        self.need_transport()
        self.need_run()
        hub = self.status.read.get("hub") if self.status is not None else None
        repo = (hub.get("repo") if isinstance(hub, dict) else None) or self.last_hub_repo
        dialog = PushDialog(str(repo or ""), laptop_token() is not None)
        self.app.push_screen(dialog, self._push_answered)

    def _push_answered(self, answer: tuple[str, bool] | None) -> None:
        if answer is not None:
            self.last_hub_repo = answer[0]
            self.begin("push", f"pushing best.pt to {answer[0]}")
            self.push(*answer)

    @work(thread=True, exclusive=True, exit_on_error=False, group="push", name="push")
    def push(self, repo: str, public: bool) -> None:
        """Push best.pt from the box to ``repo`` (the box uploads it)."""
        from remote.weights import push_from_box

        transport, run_dir = self.need_transport(), self.need_run()
        result = push_from_box(transport, run_dir, repo, require_token(), public=public)
        commit = result.get("commit") if isinstance(result, dict) else None
        self.app.call_from_thread(self.done, f"pushed best.pt to {repo}"
                                  + (f" (commit {str(commit)[:10]})" if commit else ""))
        self.refresh_safety()

    def do_pull(self) -> None:
        """Download the weights to this laptop."""
        self.need_transport()
        self.need_run()
        self.begin("pull", "pulling the weights")
        self.pull()

    @work(thread=True, exclusive=True, exit_on_error=False, group="pull", name="pull")
    def pull(self) -> None:
        """Pull best.pt and last.pt (verified by sha256) into
        ./weights/<host>/<the run's path on the box>/weights/, with progress in the
        status row."""
        transport, run_dir = self.need_transport(), self.need_run()
        dest = os.path.join(os.getcwd(), "weights")

        def progress(_name: str, done: int, total: int) -> None:
            self.app.call_from_thread(self.activities.progress, "pull", done, total,
                                      self.clock())

        started = time.monotonic()
        pulled = pull_weights(transport, run_dir, dest, progress=progress)
        seconds = max(time.monotonic() - started, 1e-3)
        size = sum(p.size for p in pulled)
        names = ", ".join(f"{p.name} ({p.size / 1e6:.1f} MB)" for p in pulled)
        where = os.path.dirname(pulled[-1].local_path) if pulled else dest
        self.app.call_from_thread(self.done, f"pulled {names} into {where} in "
                                  f"{seconds:.1f} s ({size / 1e6 / seconds:.1f} MB/s), "
                                  "sha256 verified")
        self.refresh_safety()

    # ------------------------------------------------------------------ stop run

    def do_stop_run(self) -> None:
        """Confirm, then stop the training gracefully (best.pt and status are kept)."""
        self.need_transport()
        run_dir = self.need_run()
        verdict = self.status.health.verdict if self.status is not None else None
        if verdict in ENDED and verdict != "unreadable":
            raise ActionRefused(f"nothing to stop: run {run_dir.rstrip('/').rsplit('/', 1)[-1]} "
                                f"{ENDED[verdict]}")
        body = Text("Stop training ")
        body.append_text(safe(run_dir, 120, "bold"))
        body.append("?\nOur trainer (SIGTERM) finishes its step, writes last.pt and "
                    "status 'stopped'; LibreYOLO (SIGINT, once no checkpoint is being "
                    "written) ends as 'failed: KeyboardInterrupt', shown as stopped.")
        if self.spec.kind != "local":
            body.append(" The instance keeps running and billing.")
            price = self.price_per_hour()
            if price is not None:
                body.append(f" ({money(price)}/h)", style="bold")
        self.app.push_screen(ConfirmDialog("Stop training", body, "Stop training"),
                             lambda yes: self.start_stop_run() if yes else None)

    def start_stop_run(self) -> None:
        """Stop the watched run now (no question)."""
        self.begin("stop_run", "stopping the run")
        self.stop_run()

    @work(thread=True, exclusive=True, exit_on_error=False, group="stop", name="stop_run")
    def stop_run(self) -> None:
        """Stop the run (SIGTERM, or SIGINT for LibreYOLO; SIGKILL after a timeout)."""
        transport, run_dir = self.need_transport(), self.need_run()
        result = stop_run(transport, run_dir)
        self.app.call_from_thread(self.done, f"stop: {result.outcome}. {result.detail}")
        self.refresh_runs()

    # ------------------------------------------------------------------ instance

    def do_stop_instance(self) -> None:
        """Confirm with the money figures, then stop the instance."""
        self.provider()
        self.begin("cost_figures", "asking the provider")
        self.cost_figures("stop")

    def do_destroy(self) -> None:
        """Type the id to confirm; refused while the weights are not safe."""
        self.provider()
        self.begin("cost_figures", "asking the provider")
        self.cost_figures("destroy")

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance",
          name="cost_figures")
    def cost_figures(self, what: str) -> None:
        """Fetch the instance and the weights verdict, then ask."""
        provider = self.provider()
        instance = provider.get_instance(self.spec.instance)
        safety = None
        if what == "destroy":
            safety = resolve_safety(self.safety_source() if self.transport else None)
        self.app.call_from_thread(self._ask_instance, what, provider, instance, safety)

    def _ask_instance(self, what: str, provider: Any, instance: Any, safety: Any) -> None:
        self.instance = instance
        detail = instance_costs(self.costs(), what)
        detail.append("\n")
        detail.append_text(safe(warning_for(what, provider, instance), 400, "dim"))
        if what == "stop":
            if not provider.can_stop:
                self.app.notify(warning_for("stop", provider, instance), severity="warning")
                return
            self.app.push_screen(ConfirmDialog("Stop instance", detail, "Stop instance"),
                                 lambda yes: self._instance("stop") if yes else None)
            return
        weights_safe = bool(safety is not None and safety.safe)
        unsafe = getattr(safety, "unsafe_names", "") or getattr(safety, "reason", "")
        dialog = DestroyDialog(str(self.spec.instance), weights_safe, detail, unsafe)
        self.app.push_screen(
            dialog, lambda answer: self._instance("destroy", *answer) if answer else None)

    def _instance(self, what: str, override: bool = False, typed_id: str = "") -> None:
        verb = "stopping" if what == "stop" else "destroying"
        self.begin("instance_call", f"{verb} instance {self.spec.instance}")
        self.instance_call(what, override, typed_id)

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance-call",
          name="instance_call")
    def instance_call(self, what: str, override: bool = False, typed_id: str = "") -> None:
        """Stop or destroy through ``remote.billing.teardown``'s gate (a destroy re-checks the
        weights on the box; both check that the instance is this box), then confirm by
        polling the provider."""
        provider = self.provider()
        transport = self.need_transport()
        # A box opened as its instance (vast:ID) is reached at the address its API gives.
        named = self.spec.kind == "ssh" and parse_instance_target(self.spec.target)
        address = None if named else box_address(
            None if self.spec.kind == "local" else self.spec.target, self.spec.port, transport)
        outcome = run_teardown(provider, str(self.spec.instance), what,
                           safety=self.safety_source(), override=override,
                           typed_id=typed_id, box=address, interval=1.0)
        line = outcome.message or f"instance {self.spec.instance}: {outcome.state}"
        if outcome.alarm:
            self.app.call_from_thread(self.app.alert, line, self.spec.title)
        else:
            self.app.call_from_thread(self.done, line)
        self.refresh_instance()
