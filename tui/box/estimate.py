"""The launch form's time estimate: a short probe on the box (``trainer profile
--probe``) of the configuration the run will have (its workers, batch, image size and
device; the trainer's own choice of loader workers and CPU threads), measuring training
steps and validation. One probe at a time, for the form's current settings; it ends when
the form closes, when the run launches or is profiled (so that nothing competes with
them), and when the settings change (a new probe follows). No probe while a run trains
on the box, nor for LibreYOLO (the probe runs our trainer)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from remote.fields import obj
from remote.runs import EstimateCancelled, cancel_estimate, new_estimate_id
from remote.runs import profile as run_profile
from trainer.health import GOING
from trainer.text import format_duration
from tui.box.parts import PartMessage, handles
from tui.box.ports import Panes, Ports
from tui.dialogs.launch import LaunchForm, LaunchRequest
from tui.fmt import safe

#: The probe behind the time estimate: a few real steps and a little validation
#: (``trainer profile --probe``), in the configuration the run will have.
PROBE_ARGS = {"steps": "8", "warmup": "2"}
#: Arguments that do not change the time of an epoch (a new value needs no new probe).
UNMEASURED = ("epochs", "name", "save_period", "patience", "hub_period", "exist_ok")
#: Seconds of quiet typing in the form before the estimate is measured again.
PROBE_DEBOUNCE = 1.5


@dataclass
class Estimated(PartMessage, bubble=False, namespace="box"):
    """The report of probe ``probe`` for the settings of ``request``."""

    report: dict[str, Any]
    request: LaunchRequest
    probe: str = ""


class Estimate:
    """The estimate of one box's launch form. ``spec_args(request)`` are the arguments
    the run would get; ``form()`` the form while it is on screen; ``timer(seconds, fn)``
    calls ``fn`` later on the UI thread."""

    def __init__(self, ports: Ports, panes: Panes,
                 spec_args: Callable[[LaunchRequest], dict[str, str]],
                 form: Callable[[], LaunchForm | None],
                 timer: Callable[[float, Callable[[], None]], Any]) -> None:
        self.ports = ports
        self.panes = panes
        self.spec_args = spec_args
        self.form = form
        self.timer = timer
        #: The id of the probe running on the box (``None``: none).
        self.probe_id: str | None = None
        #: The settings last probed, and the probe's report (``gpurent.profile/1``) for
        #: them once it came; whether the dataset doctor passed (no probe before).
        self._probed: tuple[Any, ...] | None = None
        self.report: dict[str, Any] | None = None
        self.data_ok = False
        self._timer: Any = None

    def reset(self) -> None:
        """A new form: nothing measured yet."""
        self._probed = self.report = None
        self.data_ok = False

    def training_run(self) -> str | None:
        """The name of a run training on this box now (``None``: none is)."""
        runs = self.ports.state.with_live_health(self.panes.runs.runs)
        return next((r.name for r in runs if r.health in GOING), None)

    # ------------------------------------------------------------------ the probe

    def take(self) -> str | None:
        """The running probe's id, which the caller now ends (``None``: none runs)."""
        probe, self.probe_id = self.probe_id, None
        return probe

    def end(self) -> None:
        """End the running probe on the box, if any (in the background); no new one
        starts for the settings typed last."""
        if self._timer is not None:
            self._timer.stop()
        probe = self.take()
        transport = self.ports.state.transport
        if probe is not None and transport is not None:
            self.ports.work("end_probe", lambda: cancel_estimate(transport, probe),
                            group="end_probe")

    def settings_changed(self) -> None:
        """A setting other than ``data`` changed: measure again once typing pauses."""
        if self._timer is not None:
            self._timer.stop()
        form = self.form()
        if form is None or not self.data_ok:
            return
        self._timer = self.timer(PROBE_DEBOUNCE, lambda: self._settled(form))

    def _settled(self, form: LaunchForm) -> None:
        """Typing paused: probe, if the form is still the one on screen."""
        if self.form() is form:
            self.start(form)

    def start(self, form: LaunchForm) -> None:
        """Probe the form's settings (once per settings; a probe of older settings is
        ended), or say why there is no estimate."""
        try:
            request = form.request()
        except ValueError:
            return
        # Checked now, not as last refreshed: a value set a moment ago may not have been
        # checked yet (its change message still queued behind this timer). A probe of
        # settings the trainer refuses would only fail.
        if form.refresh_form() is None and form.blockers:
            self.end()
            self._probed = None
            form.show_estimate(Text("no estimate while the form refuses these settings "
                                    "(see the marked fields)", style="dim"))
            return
        if request.engine != "trainer":
            self.end()
            self._probed = None
            form.show_estimate(Text("no estimate for libreyolo train (the probe measures "
                                    "our trainer)", style="dim"))
            return
        training = self.training_run()
        if training is not None:
            self.end()
            self._probed = None
            form.show_estimate(safe(f"no estimate while {training} trains on this box (a "
                                    "probe would compete with it)", 200, "dim"))
            return
        key = tuple(sorted((k, v) for k, v in request.args.items() if k not in UNMEASURED))
        if key == self._probed:
            if self.report is not None:  # e.g. new epochs: the same epoch, more of them
                form.show_estimate(estimate_text(self.report, request))
            return
        self._probed, self.report = key, None
        old, self.probe_id = self.probe_id, new_estimate_id()
        probe = self.probe_id
        form.show_estimate(Text("estimating the time per epoch (a short probe on the "
                                "box)…", style="dim"))
        self.ports.work("probe", lambda: self._probe(request, probe, old), group="probe",
                        label="estimating the time per epoch")

    def _probe(self, request: LaunchRequest, probe: str, old: str | None) -> None:
        """End the probe of older settings, run this one (its report is shown in the
        form); a probe ended because the form closed says nothing."""
        state = self.ports.state
        transport = state.need_transport()
        if old is not None:
            cancel_estimate(transport, old)
        if self.probe_id != probe:
            return  # ended (or replaced) while the older one was ending
        args = {k: v for k, v in self.spec_args(request).items() if k != "hub"}
        args.update(PROBE_ARGS, project=state.project, name=request.name or "probe")
        try:
            report = run_profile(transport, args, estimate=probe)
        except EstimateCancelled:
            return
        self.ports.post(Estimated(report, request, probe))

    @handles(Estimated, action="probe")
    def show(self, estimated: Estimated) -> None:
        """The probe's estimate in the form (for the form's epochs now)."""
        form = self.form()
        if form is None:
            return
        if estimated.probe != self.probe_id:
            return  # a probe of older settings, or one the form no longer waits for
        self.probe_id = None
        self.report = estimated.report
        try:
            request = form.request()
        except ValueError:
            request = estimated.request
        form.show_estimate(estimate_text(estimated.report, request))


def estimate_text(report: dict[str, Any], request: LaunchRequest) -> Text:
    """The form's estimate line from a probe's report: the time of one epoch as the run
    will have it (training steps and validation) and of the whole run."""
    cost = obj(report.get("cost"))
    epoch = cost.get("epoch_total_seconds", cost.get("epoch_seconds"))
    if not isinstance(epoch, int | float) or isinstance(epoch, bool):
        return Text("no estimate: the probe measured no epoch time", style="dim")
    validated = isinstance(cost.get("val_seconds"), int | float)
    epochs = request.args.get("epochs", "")
    text = Text("estimate: ", style="bold")
    text.append(f"~{format_duration(epoch)} per epoch")
    if epochs.isdigit():
        text.append(f", ~{format_duration(epoch * int(epochs))} for {epochs} epochs",
                    style="bold")
    text.append(" (measured on this box: training steps"
                + (" and validation" if validated else "; validation not included")
                + ", in the run's configuration)", style="dim")
    return text
