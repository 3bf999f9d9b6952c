"""A Modal tab's launch: the form (``tui.dialogs.modal_form``) filled from the app's last
launch, its estimate (a probe app on Modal, ``remote.serverless.estimate_on_modal``) and the
launch itself (``remote.serverless.launch_modal``), after which the tab watches the new
run. The actions are ``remote.serverless``'s, as ``gpurent profile|launch modal:APP``'s."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text

from remote.serverless import (
    ModalError,
    ModalEstimate,
    ModalSpec,
    app_file_path,
    app_view,
    estimate_on_modal,
    launch_modal,
    propose_timeout,
    words_from_record,
)
from remote.transport import NeedsSetup
from trainer.text import format_duration
from tui.box.ports import Done, Ports
from tui.dialogs.modal_form import ModalForm, ModalHooks
from tui.fmt import safe

#: What the Modal client and the form's checks refuse with: said inside the form.
REFUSALS = (ModalError, NeedsSetup, ValueError)


@dataclass(frozen=True)
class ModalStarted:
    """A Modal launch, for the tab's ``Launched``: the run's directory and what to say."""

    spec: ModalSpec
    line: str


class ModalLaunching:
    """The launch form of one Modal tab, whose connector is ``ports.state.spec.connector``
    (a ``remote.serverless.ModalConnector``); ``started`` hands a spawned launch to the
    tab (its ``Launched``), from the launch's thread."""

    def __init__(self, ports: Ports, started: Callable[[ModalStarted], object]) -> None:
        self.ports = ports
        self.started = started
        self.form: ModalForm | None = None
        #: Set to end the probe the form waits for (the form closed).
        self._cancel = threading.Event()

    def open_form(self) -> None:
        """The form, filled from the app's last launch with a new run name; refused while
        the app still runs (Modal would run two, each billing)."""
        connector = self.ports.state.spec.connector
        record = connector.record
        view = connector.state.last()
        if view is not None and view.running:
            raise ModalError(f"{record.target} still runs (run {record.run}): stop it first "
                             "(x), or launch another app with gpurent launch modal:NAME")
        hooks = ModalHooks(estimate=self.estimate, submit=self.submit,
                           app_file=lambda app: str(app_file_path(app)))
        form = ModalForm(record.app, words_from_record(record, next_run(record.run)), hooks)
        self.form = form
        self._cancel = threading.Event()
        self.ports.ask(form, self._closed)

    def _closed(self, _spec: ModalSpec | None) -> None:
        self.form = None
        self._cancel.set()

    def estimate(self, spec: ModalSpec) -> None:
        """Run a probe of ``spec`` on Modal; its estimate and proposal go to the form."""
        form, cancel = self.form, self._cancel
        if form is None:
            return

        def probe() -> None:
            try:
                probed = estimate_on_modal(spec, cancelled=cancel)
            except REFUSALS as exc:
                form.app.call_from_thread(form.show_error, f"estimate: {exc}")
                return
            form.app.call_from_thread(self._estimated, form, spec, probed)

        self.ports.work("modal_probe", probe, group="modal_probe",
                        label=f"probing {spec.app} on Modal")

    def _estimated(self, form: ModalForm, spec: ModalSpec, probed: ModalEstimate) -> None:
        """The probe's estimate into the form, for the epochs it holds now."""
        if not form.is_attached:
            return
        try:
            epochs = form.words().get("epochs", "")
        except ValueError:  # more args do not parse now: no epochs to read
            epochs = spec_epochs(spec)
        proposal = propose_timeout(probed, epochs)
        text = Text("estimate: ", style="bold")
        text.append(f"measured on Modal's {spec.gpu or 'CPU'} in "
                    f"{format_duration(probed.waited)}; ")
        text.append_text(safe(f"timeout={proposal.value} proposed ({proposal.words})"
                              if proposal.seconds else proposal.words, 300))
        form.show_estimate(text, proposal.value)

    def submit(self, spec: ModalSpec) -> None:
        """Launch ``spec`` detached; the tab then watches its run."""
        form = self.form
        connector = self.ports.state.spec.connector

        def launch() -> None:
            try:
                earlier = app_view(connector.record)
                if earlier.running:
                    raise ModalError(f"{spec.app} still runs (app {earlier.record.app_id}): "
                                     "stop it first")
                launched = launch_modal(spec)
            except REFUSALS as exc:
                if form is not None:
                    form.app.call_from_thread(form.show_error, str(exc))
                return
            connector.relaunched()
            line = (f"launched modal:{spec.run_dir} (app {launched.app_id}, detached; "
                    f"Modal ends it after {format_duration(spec.timeout)})")
            self.started(ModalStarted(spec, line))

        self.ports.work("start_launch", launch, group="start_launch",
                        label=f"launching {spec.app} on Modal")

    def launched(self, started: ModalStarted) -> str:
        """The launch spawned: close the form, say it; the run's directory to watch."""
        if self.form is not None and self.form.is_attached:
            self.form.done(started.spec)
        self.ports.post(Done(started.line))
        return self.ports.state.run_path(started.spec.run)


def spec_epochs(spec: ModalSpec) -> str:
    """The ``epochs=`` of ``spec``'s arguments ("" when not given)."""
    return next((a.partition("=")[2] for a in spec.args if a.startswith("epochs=")), "")


def next_run(run: str) -> str:
    """A new run name after ``run`` (``r1`` -> ``r2``, ``shapes`` -> ``shapes-2``)."""
    stem = run.rstrip("0123456789")
    digits = run[len(stem):]
    if digits:
        return f"{stem}{int(digits) + 1}"
    return f"{run}-2" if run else "r1"
