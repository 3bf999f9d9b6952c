"""Launching and profiling from the launch form, mixed into ``tui.box.view.BoxView``:
defaults fitted to the box (a CPU box gets small images and a time estimate from a short
probe), the values of the last launch remembered, clone and resume of the selected run,
inline checks of the name and the Hub repo, and the dataset doctor run again (debounced)
whenever ``data`` changes, its errors refusing Launch."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work

from remote import fields
from remote.runs import (
    BoxToolFailed,
    CannotStart,
    RunIsLive,
    build_command,
    hub_reachable,
    make_spec,
    start_run,
)
from remote.runs import doctor as run_doctor
from remote.runs import preflight as run_preflight
from remote.runs import profile as run_profile
from remote.weights import REPO_RE, laptop_token, require_token
from trainer.text import format_duration
from tui.box.failures import ActionRefused
from tui.box.reports import findings_text
from tui.dialogs.launch import FormHooks, LaunchForm, LaunchRequest
from tui.dialogs.profile import ProfileCard
from tui.fmt import safe

#: Seconds of quiet typing in ``data`` before the doctor runs again.
DOCTOR_DEBOUNCE = 0.8
#: Defaults for a box with a GPU, and what changes on a CPU-only box.
GPU_DEFAULTS = {"model": "n", "epochs": "30", "batch": "16", "imgsz": "640", "device": ""}
CPU_DEFAULTS = {"model": "n", "epochs": "10", "batch": "8", "imgsz": "160", "device": "cpu"}
#: The probe behind the time estimate: a few real steps (``trainer profile``).
PROBE_ARGS = {"steps": "3", "warmup": "1"}
#: Status fields a clone takes, as form fields.
CLONE_FIELDS = {"model": "model_size", "epochs": "total_epochs", "batch": "batch",
                "imgsz": "imgsz"}


def has_gpu(preflight: dict[str, Any] | None) -> bool | None:
    """Whether the box can train on a GPU (``None`` until preflight has run)."""
    if preflight is None or "gpu_available" not in preflight:
        return None
    return bool(preflight["gpu_available"])


class BoxLaunching:
    """The launch form's side of a box view (a mixin: ``self`` is the ``BoxView``)."""

    def init_launching(self) -> None:
        """State kept between forms."""
        self.launch_form: LaunchForm | None = None
        #: The values of the last launch from this tab (the next form starts from them).
        self.last_launch: dict[str, str] = {}
        self._doctor_timer: Any = None
        self._probed: tuple[str, ...] | None = None

    # ------------------------------------------------------------------ the form

    def do_launch(self) -> None:
        """Open the launch form (checks start at once in the background)."""
        self.open_form("Launch a training run")

    def do_profile(self) -> None:
        """The launch form, titled for profiling: its Profile button measures a short
        run of those settings and shows the verdict card."""
        self.open_form("Profile before launching (or launch)")

    def open_form(self, title: str) -> None:
        """The launch form; it stays open until the run started or the user cancels."""
        transport = self.need_transport()
        defaults = self.launch_defaults()
        selected = self.run_dir.rstrip("/").rsplit("/", 1)[-1] if self.run_dir else ""

        def preview(request: LaunchRequest) -> str:
            return build_command(self.launch_spec(request), transport)

        hooks = FormHooks(preview=preview, submit=self.submit_form,
                          field_note=self.field_note, data_changed=self.data_changed,
                          clone=lambda: self.selected_values(resume=False),
                          resume=lambda: self.selected_values(resume=True),
                          selected=selected)
        form = LaunchForm(defaults, "trainer", hooks, title=title)
        self.launch_form = form
        self._probed = None
        self.app.push_screen(form, self._form_closed)
        self.run_checks(defaults.get("data", ""))

    def _form_closed(self, _request: LaunchRequest | None) -> None:
        self.launch_form = None

    def launch_defaults(self) -> dict[str, str]:
        """The form's starting values: the last launch from this tab, else defaults
        fitted to the box; always a free run name."""
        from tui.widgets.runs import RunsList

        base = dict(CPU_DEFAULTS if has_gpu(self.preflight) is False else GPU_DEFAULTS)
        base.update({"data": "", "save_period": "", "hub": "", "extra": ""})
        if self.spec.demo:
            from tui.demo import DEMO_ARGS, demo_data_yaml

            base.update({k: v for k, v in DEMO_ARGS.items() if k in base},
                        data=demo_data_yaml())
        base.update(self.last_launch)
        existing = {r.name for r in self.query_one(RunsList).runs}
        n = 1
        while f"exp{n}" in existing:
            n += 1
        base["name"] = f"exp{n}"
        return base

    def launch_spec(self, request: LaunchRequest) -> Any:
        """The ``remote.runs.launch.LaunchSpec`` for the form's values (``hub`` is our
        trainer's option, or the push watcher's repo for LibreYOLO)."""
        args = dict(request.args)
        args.pop("name", None)
        if request.hub:
            args["hub"] = request.hub
        return make_spec(request.engine, self.project, request.name, args)

    def field_note(self, key: str, values: dict[str, str]) -> str:
        """An inline problem with one field ("" when fine; "⚠…" only warns)."""
        if key == "name" and values.get("name"):
            from tui.widgets.runs import RunsList

            info = next((r for r in self.query_one(RunsList).runs
                         if r.name == values["name"]), None)
            extra = values.get("extra", "")
            if info is None or "resume=" in extra or "exist_ok=" in extra:
                return ""
            done = f" {info.epoch or 0}/{info.total_epochs}" if info.total_epochs else ""
            return (f"✖ {info.name} exists ({info.health}{done}): ctrl+r resumes it, or "
                    "pick another name")
        if key == "hub" and values.get("hub"):
            repo = values["hub"]
            if not REPO_RE.match(repo) or ".." in repo:
                return f"✖ {repo} is not a repository id of the form ORG/NAME"
            if laptop_token() is None:
                return ("✖ no Hugging Face token here: set HF_TOKEN or log in with "
                        "`hf auth login`")
        return ""

    def selected_values(self, resume: bool) -> dict[str, str] | None:
        """The selected run's settings (from its status.json) for a clone (new name) or
        a resume (same name, ``resume=True``)."""
        if self.run_dir is None or self.status is None:
            return None
        st = self.status.read
        values = {field: str(st.get(key)) for field, key in CLONE_FIELDS.items()
                  if st.get(key) is not None}
        args = st.get("args") if isinstance(st.get("args"), dict) else {}
        if args.get("data"):
            values["data"] = str(args["data"])
        name = self.run_dir.rstrip("/").rsplit("/", 1)[-1]
        if resume:
            values.update(name=name, extra="resume=True")
        else:
            values.update(name=self.launch_defaults()["name"], extra="")
        return values

    # ------------------------------------------------------------------ checks

    def data_changed(self, data: str) -> None:
        """``data`` changed in the form: run the doctor once typing pauses."""
        if self._doctor_timer is not None:
            self._doctor_timer.stop()
        self._doctor_timer = self.set_timer(DOCTOR_DEBOUNCE, lambda: self.run_checks(data))

    @work(thread=True, exclusive=True, exit_on_error=False, group="preflight",
          name="check_box")
    def check_box(self) -> None:
        """Preflight the box once connected; failed checks are notified at once."""
        transport = self.need_transport()
        report = run_preflight(transport, self.project)
        self.preflight = report
        if report.get("ok") is not True:
            failed = ", ".join(fields.texts(report.get("failed"))) or "?"
            self.app.call_from_thread(self.app.notify, f"preflight found problems: {failed} "
                                      "(l shows the details)", title=self.spec.title,
                                      severity="warning", timeout=10)

    @work(thread=True, exclusive=True, exit_on_error=False, group="checks", name="run_checks")
    def run_checks(self, data: str) -> None:
        """Preflight (once per connection) and the dataset doctor, shown in the form;
        doctor errors refuse Launch. A CPU box gets small defaults and an estimate."""
        transport = self.need_transport()
        if self.preflight is None:
            self.preflight = run_preflight(transport, self.project)
        text = findings_text("preflight", self.preflight)
        blocks = ""
        doctor = None
        if data:
            try:
                doctor = run_doctor(transport, data)
            except BoxToolFailed as exc:  # bad input: the doctor says why
                why = str(exc).split(": ", 1)[-1]
                text.append("doctor  ", style="bold")
                text.append_text(safe(f"✖ {why}", 300, "bold red"))
                text.append("\n")
                blocks = f"data: {why}"
            else:
                text.append_text(findings_text("doctor", doctor))
                if not doctor.get("ok"):
                    blocks = "the dataset doctor found errors"
        else:
            text.append("doctor  waits for data\n", style="dim")
        data_ok = doctor is not None and bool(doctor.get("ok"))
        self.app.call_from_thread(self._show_checks, text, blocks, data_ok)
        form = self.launch_form
        if form is not None and form.offline is None:
            form.offline = not hub_reachable(transport)
            self.app.call_from_thread(form.offer_pretrained)

    def _show_checks(self, text: Text, blocks: str, data_ok: bool) -> None:
        form = self.launch_form
        if form is None or not form.is_attached:
            return
        if has_gpu(self.preflight) is False:
            form.set_values({k: v for k, v in CPU_DEFAULTS.items()
                             if k not in self.last_launch}, only_untouched=True)
        form.show_findings(text, blocks, "✔ the dataset doctor found no errors" if data_ok
                           else "")
        if data_ok:
            self.start_probe(form)

    def start_probe(self, form: LaunchForm) -> None:
        """Estimate the time per epoch with a few real steps (once per settings)."""
        try:
            request = form.request()
        except ValueError:
            return
        key = tuple(sorted(request.args.items()))
        if key == self._probed:
            return
        self._probed = key
        form.show_estimate(Text("estimating the time per epoch (a 3-step probe)…",
                                style="dim"))
        self.begin("probe", "estimating the time per epoch")
        self.probe(request)

    @work(thread=True, exclusive=True, exit_on_error=False, group="probe", name="probe")
    def probe(self, request: LaunchRequest) -> None:
        """Run the probe and show the estimate in the form."""
        transport = self.need_transport()
        args = {k: v for k, v in self.launch_spec(request).args.items() if k != "hub"}
        args.update(PROBE_ARGS, project=self.project, name=request.name or "probe")
        report = run_profile(transport, args, out=f"/tmp/gpurent-probe-{request.name}.json")
        self.app.call_from_thread(self._show_estimate, report, request)

    def _show_estimate(self, report: dict[str, Any], request: LaunchRequest) -> None:
        form = self.launch_form
        if form is None or not form.is_attached:
            return
        cost = report.get("cost") or {}
        epoch = cost.get("epoch_seconds")
        if not isinstance(epoch, int | float):
            form.show_estimate(Text("no estimate: the probe measured no epoch time",
                                    style="dim"))
            return
        epochs = request.args.get("epochs", "")
        total = epoch * int(epochs) if epochs.isdigit() else None
        text = Text("estimate: ", style="bold")
        text.append(f"~{format_duration(epoch)} per epoch of training steps")
        if total is not None:
            text.append(f", ~{format_duration(total)} for {epochs} epochs", style="bold")
        text.append(" (3 steps measured on this box; validation not included)", style="dim")
        form.show_estimate(text)

    # ------------------------------------------------------------------ launch

    def submit_form(self, request: LaunchRequest) -> None:
        """The form's Launch or Profile: start it; the form stays open until it did."""
        if request.action == "profile":
            self.begin("profile", "profiling a short run")
            self.profile(request)
        else:
            self.begin("start_launch", f"launching {request.name}")
            self.start_launch(request)

    @work(thread=True, exclusive=True, exit_on_error=False, group="launch",
          name="start_launch")
    def start_launch(self, request: LaunchRequest) -> None:
        """Launch the run detached on the box, then watch it."""
        transport = self.need_transport()
        stdin = require_token().encode() if request.hub else None
        try:
            started = start_run(transport, self.launch_spec(request), stdin=stdin)
        except (CannotStart, RunIsLive) as exc:
            raise ActionRefused(str(exc)) from None
        self.app.call_from_thread(self._launched, started, request)

    def _launched(self, started: Any, request: LaunchRequest) -> None:
        """Watch the new run; one that died in setup is watched too (its console.log
        fills the log pane) and rings the bell with its error."""
        remembered = {k: v for k, v in request.args.items() if k != "name"}
        self.last_launch = {**remembered, "hub": request.hub}
        if self.launch_form is not None and self.launch_form.is_attached:
            self.launch_form.done(request)
        result = started.result
        if started.failed:
            self.app.alert(started.error, self.spec.title)
        else:
            self.done(f"launched {result.run_dir} (pid {result.pid})")
        self.watch_run(result.run_dir)
        self.refresh_runs()

    @work(thread=True, exclusive=True, exit_on_error=False, group="profile", name="profile")
    def profile(self, request: LaunchRequest) -> None:
        """Run ``trainer profile`` with the form's settings and show the card."""
        transport = self.need_transport()
        spec = self.launch_spec(request)
        args = {k: v for k, v in spec.args.items() if k != "hub"}
        args.update(project=spec.project, name=spec.name)
        price = self.price_per_hour()
        if price is not None:
            args["price"] = str(price)
        report = run_profile(transport, args)
        self.app.call_from_thread(self._profiled, report, request)

    def _profiled(self, report: dict[str, Any], request: LaunchRequest) -> None:
        if self.launch_form is not None and self.launch_form.is_attached:
            self.launch_form.done(request)
        self.app.push_screen(ProfileCard(report))
