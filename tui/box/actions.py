"""The actions on one box (launch, profile, push, pull, stop run, stop or destroy the
instance, guard), mixed into ``tui.box.view.BoxView``.

Each action asks in a dialog (Cancel first), then calls one ``remote`` function in a
worker thread; results come back as notifications. Worker errors are reported in one
place (``GpurentApp.on_worker_state_changed``)."""

from __future__ import annotations

import os
from typing import Any

from rich.text import Text
from textual import work

from remote import checks, fields
from remote.billing.cost import money, rate
from remote.billing.identity import box_address
from remote.billing.providers import provider_for
from remote.billing.teardown import resolve_safety, run_safety, teardown, warning_for
from remote.guard import read_guard
from remote.launch import RunIsLive, build_command, make_spec
from remote.pull import pull_weights
from remote.push import laptop_token, push_from_box
from remote.startup import CannotStart, hub_reachable, start_run
from remote.stop import stop_run
from remote.transport.base import Transport
from trainer.runfiles import parse_iso
from trainer.text import format_duration
from tui.box.guard import GuardActions
from tui.box.reports import findings_text, instance_costs
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.launch import LaunchForm, LaunchRequest
from tui.dialogs.profile import ProfileCard
from tui.dialogs.push import PushDialog
from tui.fmt import safe
from tui.widgets.badges import WeightsBadge

#: Verdicts after which a box that still runs is idle, billing for nothing.
RUN_OVER = ("completed", "failed", "stopped", "dead")


class ActionRefused(Exception):
    """An action cannot run now; the message says why in one line."""


class BoxActions(GuardActions):
    """Actions of a box view (a mixin: ``self`` is the ``BoxView``)."""

    def init_actions(self) -> None:
        """State the actions keep between calls."""
        self.preflight: dict[str, Any] | None = None
        self.instance: Any = None
        self.safety: Any = None
        self.guard: Any = None
        self.launch_form: LaunchForm | None = None
        self.last_hub_repo = ""

    # ------------------------------------------------------------------ helpers

    def need_transport(self) -> Transport:
        """The control connection, or ``ActionRefused`` while connecting."""
        if self.transport is None:
            raise ActionRefused("not connected to the box yet")
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
        from remote.billing.cost import cost_report

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

    @work(thread=True, exclusive=True, exit_on_error=False, group="safety")
    def refresh_safety(self) -> None:
        """Ask whether the weights of every run the box knows are safe off it (Hub or
        laptop) and show it on the badge."""
        if self.transport is None:
            return
        safety = resolve_safety(self.safety_source())
        self.app.call_from_thread(self._show_safety, safety)

    def safety_source(self) -> Any:
        """``remote.safety.weights_safety`` for the watched run, its project (the box's
        project when no run is watched and it exists) and the box's registry, as a
        callable for the gate: blocking, asked anew at each call."""
        transport, run_dir, project = self.need_transport(), self.run_dir, self.project

        def ask() -> Any:
            has_project = run_dir is None and transport.stat(project) is not None
            return run_safety(transport, run_dir, (project,) if has_project else ())()

        return ask

    def _show_safety(self, safety: Any) -> None:
        self.safety = safety
        known = bool(getattr(safety, "runs", True))  # no run to check: unknown, not unsafe
        self.query_one(WeightsBadge).show(safety.safe if known else None,
                                          getattr(safety, "where", None),
                                          getattr(safety, "epoch", None), safety.reason,
                                          nothing=bool(getattr(safety, "nothing", False)),
                                          unsafe=getattr(safety, "unsafe_names", ""))

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance")
    def refresh_instance(self) -> None:
        """Ask the provider about the instance (price, storage, state) and read the
        guard's state on the box."""
        if self.transport is not None and self.run_dir is not None:
            guard = read_guard(self.transport, self.run_dir)
            self.app.call_from_thread(self._show_guard, guard)
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

    # ------------------------------------------------------------------ launch

    def do_launch(self) -> None:
        """Open the launch form (checks start at once in the background)."""
        self.open_form("Launch a training run")

    def open_form(self, title: str) -> None:
        """The launch form; its answer launches or profiles."""
        transport = self.need_transport()
        defaults = self.launch_defaults()

        def preview(request: LaunchRequest) -> str:
            return build_command(self.launch_spec(request), transport)

        form = LaunchForm(defaults, "trainer", preview, title=title)
        self.launch_form = form
        self.app.push_screen(form, self._form_answered)
        self.run_checks(defaults.get("data", ""))

    def launch_defaults(self) -> dict[str, str]:
        """Sensible starting values for the form."""
        from tui.widgets.runs import RunsList

        existing = {r.name for r in self.query_one(RunsList).runs}
        n = 1
        while f"exp{n}" in existing:
            n += 1
        data = ""
        if self.spec.demo:
            from tui.demo import demo_data_yaml

            data = demo_data_yaml()
        return {"model": "n", "data": data, "epochs": "30", "batch": "16", "imgsz": "640",
                "device": "", "name": f"exp{n}", "save_period": "", "hub": "", "extra": ""}

    def launch_spec(self, request: LaunchRequest) -> Any:
        """The ``remote.launch.LaunchSpec`` for the form's values (``hub`` is our
        trainer's option, or the push watcher's repo for LibreYOLO)."""
        args = dict(request.args)
        args.pop("name", None)
        if request.hub:
            args["hub"] = request.hub
        return make_spec(request.engine, self.project, request.name, args)

    @work(thread=True, exclusive=True, exit_on_error=False, group="preflight")
    def check_box(self) -> None:
        """Preflight the box once connected; failed checks are notified at once."""
        transport = self.need_transport()
        report = checks.preflight(transport, self.project)
        self.preflight = report
        if report.get("ok") is not True:
            failed = ", ".join(fields.texts(report.get("failed"))) or "?"
            self.app.call_from_thread(self.app.notify, f"preflight found problems: {failed} "
                                      "(l shows the details)", title=self.spec.title,
                                      severity="warning", timeout=10)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checks")
    def run_checks(self, data: str) -> None:
        """Preflight (once per connection) and the dataset doctor, shown in the form."""
        transport = self.need_transport()
        if self.preflight is None:
            self.preflight = checks.preflight(transport, self.project, data or None)
        text = findings_text("preflight", self.preflight)
        if data:
            text.append_text(findings_text("doctor", checks.doctor(transport, data)))
        form = self.launch_form
        if form is not None and form.is_attached:
            self.app.call_from_thread(form.show_findings, text)
            form.offline = not hub_reachable(transport)
            self.app.call_from_thread(form.offer_pretrained)

    def _form_answered(self, request: LaunchRequest | None) -> None:
        self.launch_form = None
        if request is None:
            return
        if request.action == "profile":
            self.profile(request)
        else:
            self.start_launch(request)

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch")
    def start_launch(self, request: LaunchRequest) -> None:
        """Launch the run detached on the box, then watch it."""
        transport = self.need_transport()
        stdin = None
        if request.hub:
            token = laptop_token()
            if token is None:
                raise ActionRefused("a Hub repo needs a Hugging Face token: set HF_TOKEN "
                                    "or run `hf auth login`")
            stdin = token.encode()
        try:
            started = start_run(transport, self.launch_spec(request), stdin=stdin)
        except (CannotStart, RunIsLive) as exc:
            raise ActionRefused(str(exc)) from None
        self.app.call_from_thread(self._launched, started)

    def _launched(self, started: Any) -> None:
        """Watch the new run; one that died in setup is watched too (its console.log
        fills the log pane) and rings the bell with its error."""
        result = started.result
        if started.failed:
            self.app.alert(started.error, self.spec.title)
        else:
            self.app.notify(f"launched {result.run_dir} (pid {result.pid})",
                            title=self.spec.title)
        self.watch_run(result.run_dir)
        self.refresh_runs()

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
            self.push(*answer)

    @work(thread=True, exclusive=True, exit_on_error=False, group="push")
    def push(self, repo: str, public: bool) -> None:
        """Push best.pt from the box to ``repo``; a failure rings the bell."""
        transport, run_dir = self.need_transport(), self.need_run()
        token = laptop_token()
        if token is None:
            raise ActionRefused("no Hugging Face token (HF_TOKEN or `hf auth login`)")
        self.app.call_from_thread(self.app.notify, f"pushing best.pt to {repo}…",
                                  title=self.spec.title)
        try:
            result = push_from_box(
                transport, run_dir, repo, token, public=public)
        except Exception as exc:
            self.app.call_from_thread(self.app.alert, f"push to {repo} failed: {exc}",
                                      self.spec.title)
            return
        commit = result.get("commit") if isinstance(result, dict) else None
        self.app.call_from_thread(self.app.notify, f"pushed best.pt to {repo}"
                                  + (f" (commit {str(commit)[:10]})" if commit else ""),
                                  title=self.spec.title)
        self.refresh_safety()

    def do_pull(self) -> None:
        """Download the weights to this laptop."""
        self.need_transport()
        self.need_run()
        self.pull()

    @work(thread=True, exclusive=True, exit_on_error=False, group="pull")
    def pull(self) -> None:
        """Pull best.pt and last.pt (verified by sha256) into
        ./weights/<host>/<the run's path on the box>/weights/."""
        transport, run_dir = self.need_transport(), self.need_run()
        dest = os.path.join(os.getcwd(), "weights")
        self.app.call_from_thread(self.app.notify, f"pulling the weights into {dest}…",
                                  title=self.spec.title)
        pulled = pull_weights(transport, run_dir, dest)
        names = ", ".join(f"{p.name} ({p.size / 1e6:.1f} MB)" for p in pulled)
        where = os.path.dirname(pulled[-1].local_path) if pulled else dest
        self.app.call_from_thread(self.app.notify, f"pulled {names} into {where}",
                                  title=self.spec.title)
        self.refresh_safety()

    # ------------------------------------------------------------------ stop run

    def do_stop_run(self) -> None:
        """Confirm, then stop the training gracefully (best.pt and status are kept)."""
        self.need_transport()
        run_dir = self.need_run()
        body = Text("Stop training ")
        body.append_text(safe(run_dir, 120, "bold"))
        body.append("?\nOur trainer (SIGTERM) finishes its step, writes last.pt and "
                    "status 'stopped'; LibreYOLO (SIGINT, once no checkpoint is being "
                    "written) ends as 'failed: KeyboardInterrupt', shown as stopped. The "
                    "instance keeps running and billing.")
        price = self.price_per_hour()
        if price is not None:
            body.append(f" ({money(price)}/h)", style="bold")
        self.app.push_screen(ConfirmDialog("Stop training", body, "Stop training"),
                             lambda yes: self.stop_run() if yes else None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="stop")
    def stop_run(self) -> None:
        """Stop the run (SIGTERM, or SIGINT for LibreYOLO; SIGKILL after a timeout)."""
        transport, run_dir = self.need_transport(), self.need_run()
        result = stop_run(transport, run_dir)
        self.app.call_from_thread(self.app.notify,
                                  f"stop: {result.outcome}. {result.detail}",
                                  title=self.spec.title)
        self.refresh_runs()

    # ------------------------------------------------------------------ instance

    def do_stop_instance(self) -> None:
        """Confirm with the money figures, then stop the instance."""
        self.provider()
        self.cost_figures("stop")

    def do_destroy(self) -> None:
        """Type the id to confirm; refused while the weights are not safe."""
        self.provider()
        self.cost_figures("destroy")

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance")
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
                                 lambda yes: self.instance_call("stop") if yes else None)
            return
        weights_safe = bool(safety is not None and safety.safe)
        unsafe = getattr(safety, "unsafe_names", "") or getattr(safety, "reason", "")
        dialog = DestroyDialog(str(self.spec.instance), weights_safe, detail, unsafe)
        self.app.push_screen(
            dialog, lambda answer: self.instance_call("destroy", *answer) if answer else None)

    @work(thread=True, exclusive=True, exit_on_error=False, group="instance-call")
    def instance_call(self, what: str, override: bool = False, typed_id: str = "") -> None:
        """Stop or destroy through ``remote.billing.teardown``'s gate (a destroy re-checks the
        weights on the box; both check that the instance is this box), then confirm by
        polling the provider."""
        provider = self.provider()
        transport = self.need_transport()
        address = box_address(None if self.spec.kind == "local" else self.spec.target,
                              self.spec.port, transport)
        outcome = teardown(provider, str(self.spec.instance), what,
                           safety=self.safety_source(), override=override,
                           typed_id=typed_id, box=address, interval=1.0)
        self.app.call_from_thread(self.app.notify, outcome.message or
                                  f"instance {self.spec.instance}: {outcome.state}",
                                  title=self.spec.title,
                                  severity="error" if outcome.alarm else "information")
        self.refresh_instance()


    # ------------------------------------------------------------------ profile

    def do_profile(self) -> None:
        """The launch form, titled for profiling: its Profile button measures a short
        run of those settings and shows the verdict card."""
        self.open_form("Profile before launching (or launch)")

    @work(thread=True, exclusive=True, exit_on_error=False, group="profile")
    def profile(self, request: LaunchRequest) -> None:
        """Run ``trainer profile`` with the form's settings and show the card."""
        transport = self.need_transport()
        spec = self.launch_spec(request)
        args = {k: v for k, v in spec.args.items() if k != "hub"}
        args.update(project=spec.project, name=spec.name)
        price = self.price_per_hour()
        if price is not None:
            args["price"] = str(price)
        self.app.call_from_thread(self.app.notify, "profiling a short run…",
                                  title=self.spec.title)
        report = checks.profile(transport, args)
        self.app.call_from_thread(self.app.push_screen, ProfileCard(report))
