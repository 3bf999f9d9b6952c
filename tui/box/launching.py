"""Launching and profiling from the launch form: defaults fitted to the box (a CPU box gets
small images and a short time estimate), the last launch's values, clone and resume of the
selected run, inline checks of the name and the Hub repo, the box's preflight, and the
dataset doctor run again (debounced) whenever ``data`` changes, its errors refusing Launch."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from remote import fields
from remote.billing import RunIntent, want_running
from remote.fleet import change_lease, told_words
from remote.runs import (
    BoxToolFailed,
    CannotStart,
    LaunchSpec,
    RunIsLive,
    apply_box_paths,
    box_paths,
    build_command,
    cancel_estimate,
    check_arg,
    hub_reachable,
    make_spec,
    start_run,
)
from remote.runs import doctor as run_doctor
from remote.runs import preflight as run_preflight
from remote.runs import profile as run_profile
from remote.weights import REPO_RE, laptop_token, require_token
from tui.box.estimate import Estimate
from tui.box.failures import ActionRefused
from tui.box.modal_launch import ModalLaunching, ModalStarted
from tui.box.parts import BoxKey, PartMessage, handles
from tui.box.ports import Done, Panes, Ports
from tui.box.reports import findings_text, has_gpu
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.launch import FormHooks, LaunchForm, LaunchRequest, parse_extra
from tui.dialogs.profile import profile_summary
from tui.fleet.words import lease_enforcers
from tui.fmt import safe

#: Seconds of quiet typing in ``data`` before the doctor runs again.
DOCTOR_DEBOUNCE = 0.8
#: Defaults for a box with a GPU, and what changes on a CPU-only box.
GPU_DEFAULTS = {"model": "n", "epochs": "30", "batch": "16", "imgsz": "640", "device": ""}
CPU_DEFAULTS = {"model": "n", "epochs": "10", "batch": "8", "imgsz": "160", "device": "cpu"}
#: Status fields a clone takes, as form fields.
CLONE_FIELDS = {"model": "model_size", "epochs": "total_epochs", "batch": "batch",
                "imgsz": "imgsz"}
#: Form fields sent as ``key=value`` and checked against the engine's rules.
CHECKED_FIELDS = ("name", "model", "epochs", "batch", "imgsz", "device", "save_period")
#: Workers whose failure is also shown inside the open form.
FORM_WORKERS = ("start_launch", "profile", "run_checks", "probe")


@dataclass
class PreflightRead(PartMessage, bubble=False, namespace="box"):
    """The box's preflight report, once connected."""

    report: dict[str, Any]


@dataclass
class ChecksDone(PartMessage, bubble=False, namespace="box"):
    """Preflight and doctor findings for the form; ``blocks``: why Launch is refused."""

    preflight: dict[str, Any]
    text: Text
    blocks: str
    data_ok: bool
    #: Paths the launch will make absolute on the box (``remote.runs.box_paths``).
    paths: dict[str, str]
    #: The data path the doctor was asked about.
    data: str = ""


@dataclass
class HubChecked(PartMessage, bubble=False, namespace="box"):
    """Whether the box reaches the Hub (pretrained weights), for ``form``."""

    form: LaunchForm
    offline: bool


@dataclass
class Launched(PartMessage, bubble=False, namespace="box"):
    """``request`` was started on the box (``started``: ``remote.runs`` start result, or
    a Modal launch); ``leased``: the lease given with it, in words ("" for none)."""

    started: Any
    request: LaunchRequest
    leased: str = ""


@dataclass
class Profiled(PartMessage, bubble=False, namespace="box"):
    """``trainer profile``'s report for ``request``."""

    report: dict[str, Any]
    request: LaunchRequest


class Launching:
    """The launch form's side of one box. ``timer(seconds, fn)`` calls ``fn`` later on
    the UI thread (a Textual timer, with ``stop()``)."""

    KEYS = (BoxKey("l", "launch", "open_launch", "launch", "Launch a training run (form, "
                   "checks, exact command)", 30, lambda _state: 4, quiet=False),
            BoxKey("p", "profile", "open_profile", "profile", "Profile a short run: verdict, "
                   "levers and $/epoch", 100, lambda _state: 6))

    def __init__(self, ports: Ports, panes: Panes,
                 timer: Callable[[float, Callable[[], None]], Any]) -> None:
        self.ports = ports
        self.panes = panes
        self.timer = timer
        self.form: LaunchForm | None = None
        self._doctor_timer: Any = None
        self.estimate = Estimate(ports, panes, lambda r: self.launch_spec(r).args,
                                 self._open_form, timer)
        #: The box's absolute paths for the form's relative ones, once the checks asked.
        self._paths: dict[str, str] = {}
        #: The form's checks (or its estimate) failed: the link's return runs them again.
        self._checks_owed = False
        #: The open form's defaults that assume a GPU, the box not having said yet.
        self._gpu_guesses: dict[str, str] = {}
        self.modal = ModalLaunching(ports, lambda started: ports.post(  # modal:APP's form
            Launched(started, LaunchRequest("trainer", started.spec.run))))

    # ------------------------------------------------------------------ the form

    def open_launch(self) -> None:
        """Open the launch form (checks start at once in the background)."""
        self.open_form("Launch a training run")

    def open_profile(self) -> None:
        """The launch form titled for profiling (Profile measures a short run and says the
        verdict); asked first while a run trains on the box (both would measure slower)."""
        training = self.estimate.training_run()
        if training is None:
            self.open_form("Profile before launching (or launch)")
            return
        body = Text("Run ")
        body.append_text(safe(training, 60, "bold"))
        body.append(" is training on this box. A profile now shares the GPU and the CPUs with "
                    "it: it slows the run down, and measures both slower than either alone.")
        self.ports.ask(ConfirmDialog("Profile while a run trains?", body, "Profile anyway",
                                     variant="warning"),
                       lambda yes: self.open_form("Profile before launching (or launch)")
                       if yes else None)

    def open_form(self, title: str) -> None:
        """The launch form, open until the run started or the user cancels (a Modal tab's own)."""
        if self.ports.state.spec.kind == "modal":
            return self.modal.open_form()
        state = self.ports.state
        transport = state.need_transport()
        defaults = self.launch_defaults()
        self._gpu_guesses = self.gpu_guesses()

        def preview(request: LaunchRequest) -> str:
            # The paths as the launch will make them (asked by the checks, off this
            # thread): the command shown is the command run.
            return build_command(apply_box_paths(self.launch_spec(request), self._paths),
                                 transport)

        hooks = FormHooks(preview=preview, submit=self.submit,
                          field_note=self.field_note, data_changed=self.data_changed,
                          settings_changed=self.estimate.settings_changed,
                          clone=lambda: self.selected_values(resume=False),
                          resume=lambda: self.selected_values(resume=True),
                          selected=state.run_name, not_resumable=self.not_resumable,
                          lease_for=state.instance_target() or "",
                          lease_enforced=lambda: lease_enforcers(state.guard))
        form = LaunchForm(defaults, "trainer", hooks, title=title)
        self.form = form
        self.estimate.reset()
        self.ports.ask(form, self._closed)
        self.run_checks(defaults.get("data", ""))

    def _closed(self, _request: LaunchRequest | None) -> None:
        """The form closed (cancelled, launched or profiled): its probe ends."""
        self.form = None
        self.estimate.end()

    def _open_form(self) -> LaunchForm | None:
        """The form, while it is on screen."""
        return self.form if self.form is not None and self.form.is_attached else None

    def launch_defaults(self) -> dict[str, str]:
        """The form's starting values: the last launch from this tab, else defaults
        fitted to the box; always a free run name."""
        state = self.ports.state
        base = dict(CPU_DEFAULTS if has_gpu(state.preflight) is False else GPU_DEFAULTS)
        base.update({"data": "", "save_period": "", "hub": "", "extra": ""})
        if state.spec.demo:
            from tui.demo import DEMO_ARGS, demo_data_yaml

            base.update({k: v for k, v in DEMO_ARGS.items() if k in base},
                        data=demo_data_yaml())
        base.update(state.last_launch)
        existing = {r.name for r in self.panes.runs.runs}
        n = 1
        while f"exp{n}" in existing:
            n += 1
        base["name"] = f"exp{n}"
        return base

    def gpu_guesses(self) -> dict[str, str]:
        """The defaults ``launch_defaults`` takes from ``GPU_DEFAULTS`` because the box
        has not said yet whether it has a GPU (none that the demo or the last launch
        sets)."""
        state = self.ports.state
        if has_gpu(state.preflight) is not None:
            return {}
        demo: dict[str, str] = {}
        if state.spec.demo:
            from tui.demo import DEMO_ARGS

            demo = DEMO_ARGS
        return {k: v for k, v in GPU_DEFAULTS.items()
                if k not in state.last_launch and k not in demo}

    def launch_spec(self, request: LaunchRequest) -> Any:
        """The ``remote.runs.launch.LaunchSpec`` for the form's values (``hub`` is our
        trainer's option, or the push watcher's repo for LibreYOLO)."""
        args = dict(request.args)
        args.pop("name", None)
        if request.hub:
            args["hub"] = request.hub
        return make_spec(request.engine, self.ports.state.project, request.name, args)

    def field_note(self, key: str, values: dict[str, str]) -> str:
        """An inline problem with one field ("" when fine; "⚠…" only warns): a value the
        engine would refuse (its type, range or choices; every "more args" pair too), a
        name taken, a Hub repo or token missing. ``values["engine"]`` is the engine."""
        engine = values.get("engine", "trainer")
        if key in CHECKED_FIELDS and values.get(key):
            why = check_arg(engine, key, values[key])
            if why:
                return f"✖ {key}: {why}"
        if key == "extra" and values.get("extra"):
            try:
                extra = parse_extra(values["extra"])
            except ValueError as exc:
                return f"✖ {exc}"
            for name, value in extra.items():
                why = check_arg(engine, name, value)
                if why:
                    return f"✖ more args: {name}={value}: {why}"
        if key == "name" and values.get("name"):
            info = next((r for r in self.panes.runs.runs if r.name == values["name"]), None)
            more = values.get("extra", "")
            if info is None or "resume=" in more or "exist_ok=" in more:
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
        state = self.ports.state
        if state.run_dir is None or state.status is None:
            return None
        st = state.status.read
        values = {field: str(st.get(key)) for field, key in CLONE_FIELDS.items()
                  if st.get(key) is not None}
        args = st.get("args") if isinstance(st.get("args"), dict) else {}
        if args.get("data"):
            values["data"] = str(args["data"])
        if resume:
            values.update(name=state.run_name, extra="resume=True")
        else:
            values.update(name=self.launch_defaults()["name"], extra="")
        return values

    def not_resumable(self) -> str:
        """Why the watched run cannot be resumed ("" when it can): it never finished an
        epoch (no last.pt to go on from)."""
        state = self.ports.state
        if state.status is None:
            return "it never started training (no status.json)"
        done = state.status.read.get("completed_epochs")
        if not isinstance(done, int) or done < 1:
            return "it never finished an epoch, so there is no last.pt to go on from " \
                "(ctrl+o clones its settings)"
        return ""

    def failed(self, name: str, line: str, said: bool = True) -> None:
        """A failure of worker ``name`` is also said inside the form, when it is its
        (and ``said``: not a repeat kept quiet); failed checks or estimate are owed a
        new try once the connection is back."""
        if name in ("run_checks", "probe"):
            self._checks_owed = True
        form = self._open_form()
        if said and form is not None and name in FORM_WORKERS:
            form.show_error(line)

    def link_back(self) -> None:
        """The control connection is open again: checks that failed run again for the
        form's data now (their failure on screen is no longer true)."""
        form = self._open_form()
        if not self._checks_owed or form is None or not form.query("#f-data"):
            return
        self.estimate.reset()
        form.checking_again("the connection is back")
        self.run_checks(form.values()["data"])

    # ------------------------------------------------------------------ preflight

    def check_box(self) -> None:
        """Preflight the box once connected; failed checks are notified at once."""
        self.ports.work("check_box", self._preflight, group="preflight")

    def _preflight(self) -> None:
        state = self.ports.state
        self.ports.post(PreflightRead(run_preflight(state.need_transport(), state.project)))

    @handles(PreflightRead, take=("report",), action="check_box")
    def preflight_read(self, report: dict[str, Any]) -> None:
        """Keep the preflight report; say at once what failed."""
        self.ports.state.preflight = report
        if report.get("ok") is not True:
            failed = ", ".join(fields.texts(report.get("failed"))) or "?"
            self.ports.notify(f"preflight found problems: {failed} (l shows the details)",
                              severity="warning", timeout=10)

    # ------------------------------------------------------------------ checks

    def data_changed(self, data: str) -> None:
        """``data`` changed in the form: run the doctor once typing pauses."""
        if self._doctor_timer is not None:
            self._doctor_timer.stop()
        self._doctor_timer = self.timer(DOCTOR_DEBOUNCE, lambda: self.run_checks(data))

    def run_checks(self, data: str) -> None:
        """Preflight (once per connection) and the dataset doctor, in the background."""
        form = self.form
        self._checks_owed = False
        self.ports.work("run_checks", lambda: self._check(data, form), group="checks")

    def _check(self, data: str, form: LaunchForm | None) -> None:
        """Preflight (once per connection) and the dataset doctor, shown in the form;
        doctor errors refuse Launch. A CPU box gets small defaults and an estimate."""
        state = self.ports.state
        transport = state.need_transport()
        preflight = state.preflight
        if preflight is None:
            preflight = run_preflight(transport, state.project)
        text = findings_text("preflight", preflight)
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
        paths = box_paths(transport, LaunchSpec("trainer", state.project, "preview",
                                                {"data": data} if data else {}))
        self.ports.post(ChecksDone(preflight, text, blocks, data_ok, paths, data))
        if form is not None and form.offline is None:
            self.ports.post(HubChecked(form, not hub_reachable(transport)))

    @handles(ChecksDone, action="run_checks")
    def show_checks(self, checks: ChecksDone) -> None:
        """The findings in the form; a clean doctor starts the time estimate."""
        state = self.ports.state
        if state.preflight is None:
            state.preflight = checks.preflight
        self._paths.update(checks.paths)
        form = self._open_form()
        if form is None or (form.query("#f-data") and form.values()["data"] != checks.data):
            return  # an older path's checks, back after a newer one's (or before it)
        guesses, self._gpu_guesses = self._gpu_guesses, {}
        if has_gpu(state.preflight) is False:
            # Once, and only a GPU guess the form still holds (a clone's value, or one
            # typed, was not chosen for a GPU): the model is the engine's (a switch to
            # LibreYOLO before the checks came back keeps its model).
            shown = form.values() if form.query("#f-data") else form.defaults
            form.set_values({k: CPU_DEFAULTS[k] for k, v in guesses.items()
                             if shown.get(k) == v != CPU_DEFAULTS[k]},
                            only_untouched=True, why="set for this box: it has no GPU")
        form.show_findings(checks.text, checks.blocks,
                           "✔ the dataset doctor found no errors" if checks.data_ok else "")
        self.estimate.data_ok = checks.data_ok
        if checks.data_ok:
            self.estimate.start(form)

    @handles(HubChecked, action="run_checks")
    def hub_checked(self, checked: HubChecked) -> None:
        """The form offers pretrained weights only where the box reaches the Hub."""
        form = checked.form
        if form.offline is None and form.is_attached:
            form.offline = checked.offline
            form.offer_pretrained()

    # ------------------------------------------------------------------ launch, profile

    def submit(self, request: LaunchRequest) -> None:
        """The form's Launch or Profile: start it (once the estimate's probe ended, so
        that nothing competes with it); the form stays open until it did."""
        probe = self.estimate.take()
        if request.action == "profile":
            self.ports.work("profile", lambda: self._profile(request, probe),
                            group="profile", label="profiling a short run")
        else:
            self.ports.work("start_launch", lambda: self._launch(request, probe),
                            group="launch", label=f"launching {request.name}")

    def _launch(self, request: LaunchRequest, probe: str | None = None) -> None:
        """End the estimate's probe, then launch the run detached on the box."""
        transport = self.ports.state.need_transport()
        if probe is not None:
            cancel_estimate(transport, probe)
        stdin = require_token().encode() if request.hub else None
        spec = self.launch_spec(request)
        target = self.ports.state.instance_target()
        leased = ""
        if request.lease is not None and target is not None:  # before the run, as the CLI
            given, told = change_lease(target, request.lease, "stop", transport)
            leased = f"; {told_words(given, told)}"
        try:
            started = start_run(transport, spec, stdin=stdin)
        except (CannotStart, RunIsLive) as exc:
            raise ActionRefused(str(exc) + leased) from None
        if target is not None and not started.failed:  # a stop now is a surprise
            want_running(target, RunIntent(request.name, spec.project,
                                           request.hub or spec.push))
        self.ports.post(Launched(started, request, leased))

    def launched(self, launched: Launched) -> str:
        """Remember the values and close the form; a run that died in setup rings the
        bell with its error. Returns the new run's directory (watched either way: its
        console.log fills the log pane); a Modal launch is its part's."""
        if isinstance(launched.started, ModalStarted):
            return self.modal.launched(launched.started)
        request, started = launched.request, launched.started
        remembered = {k: v for k, v in request.args.items() if k != "name"}
        self.ports.state.last_launch = {**remembered, "hub": request.hub}
        form = self._open_form()
        if form is not None:
            form.done(request)
        result = started.result
        if started.failed:
            self.ports.alert(started.error)
        else:
            self.ports.post(Done(f"launched {result.run_dir} (pid {result.pid})"
                                 + launched.leased))
        return result.run_dir

    def _profile(self, request: LaunchRequest, probe: str | None = None) -> None:
        """End the estimate's probe, then run ``trainer profile`` with the form's
        settings (its verdict is notified)."""
        state = self.ports.state
        transport = state.need_transport()
        if probe is not None:
            cancel_estimate(transport, probe)
        spec = self.launch_spec(request)
        args = {k: v for k, v in spec.args.items() if k != "hub"}
        args.update(project=spec.project, name=spec.name)
        price = state.price_per_hour()
        if price is not None:
            args["price"] = str(price)
        self.ports.post(Profiled(run_profile(transport, args), request))

    @handles(Profiled, action="profile")
    def profiled(self, profiled: Profiled) -> None:
        """Close the form and say the profile's verdict in a notification, kept in the
        events (no dialog: it comes a minute later and must not take a key press)."""
        form = self._open_form()
        if form is not None:
            form.done(profiled.request)
        self.ports.state.last_profile = profiled.report
        self.ports.notify(profile_summary(profiled.report, profiled.request.name)
                          + " (ctrl+p, Profile card: the whole card)", timeout=30)
