"""The launch form of a Modal app (``modal:APP``): the run's ``key=value`` words, a timeout
that must be given (the estimate proposes one), and the app file the launch will write
and run, shown as it will be, with what it may cost before its timeout.

Estimate runs a probe app on the GPU asked for (it bills: the form says how much at
most) and proposes a timeout from what it measured: into the timeout field while the
user has not typed one, else beside it. The form stays open while Modal launches: the
tab calls ``done()`` when the function spawned, ``show_error()`` when it did not. The body
(the fields, the money and the app file) scrolls; the estimate and the buttons stay."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Static

from remote.serverless import GPUS, ModalSpec, estimate_bound, gpu_price, render, spec_from_words
from trainer.text import format_duration
from tui.dialogs.base import Dialog
from tui.dialogs.launch import parse_extra
from tui.fmt import safe
from tui.widgets.field import Field

#: Form fields: (key=value argument, label, placeholder).
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("name", "name *", "run name: APP/NAME in the runs Volume"),
    ("data", "data", "data.yaml in a Volume: /cache/… or /runs/… (or stage below)"),
    ("stage", "stage", "ORG/NAME/FILE.tar: a Hub dataset tar, staged into /cache once"),
    ("gpu", "gpu", ", ".join(GPUS[:9]) + "… or cpu"),
    ("timeout", "timeout *", "Modal ends the run then: 90m, 4h (at most 24h)"),
    ("epochs", "epochs", "a whole number (empty: the trainer's default)"),
    ("model", "model", "n, s, m… or a .pt path in a Volume"),
    ("batch", "batch", "images a step (empty: the default)"),
    ("imgsz", "imgsz", "pixels, a multiple of 32 (empty: the default)"),
    ("hub", "Hub repo", "ORG/NAME: push best.pt at milestones (token: Modal Secret)"),
    ("extra", "more args", "other key=value arguments, e.g. workers=4 lr0=0.001"),
)
#: What the probe is launched with when no timeout is given yet (it has its own).
PROBE_PLACEHOLDER_TIMEOUT = "15m"


@dataclass
class ModalHooks:
    """What the form asks of the tab: ``estimate(spec)`` launches a probe of ``spec``,
    ``submit(spec)`` launches it; each answers later through ``show_estimate``,
    ``done`` or ``show_error``."""

    estimate: Callable[[ModalSpec], None]
    submit: Callable[[ModalSpec], None]
    #: Where the app file will be written (shown with the preview).
    app_file: Callable[[str], str]


class ModalForm(Dialog[ModalSpec | None]):
    """The form (see the module doc). Dismisses the spec that launched, or ``None``."""

    DEFAULT_CSS = """
    ModalForm > Vertical { width: 112; height: 100%; }
    ModalForm #hint { color: $text-muted; height: auto; }
    ModalForm #form-body { height: 1fr; }
    ModalForm .row { height: 1; }
    ModalForm .row Label { width: 13; }
    ModalForm .row Input { width: 1fr; }
    ModalForm #timeout-note { height: auto; padding-left: 13; }
    ModalForm #money { height: auto; margin-top: 1; }
    ModalForm #appfile { background: $boost; padding: 0 1; height: auto; }
    ModalForm #form-status { height: auto; }
    """
    BINDINGS = [Binding("ctrl+s", "submit", "Launch", priority=True)]
    AUTO_FOCUS = "#f-name"

    def __init__(self, app: str, defaults: dict[str, str], hooks: ModalHooks) -> None:
        super().__init__(f"Launch a run on Modal: app {app}")
        self.app_name = app
        keys = {key for key, _, _ in FIELDS}
        more = [f"{k}={shlex.quote(v)}" for k, v in defaults.items() if k not in keys]
        self.defaults = {k: v for k, v in defaults.items() if k in keys}
        if more:  # words without a field of their own (workers=, seed=...) are kept
            self.defaults["extra"] = " ".join([self.defaults.get("extra", ""), *more]).strip()
        self.hooks = hooks
        self.busy = False
        #: The timeout the last estimate proposed ("" for none), and whether the field
        #: still holds what the form put there (then a new proposal replaces it).
        self.proposed = ""
        self._placed_timeout = defaults.get("timeout", "")
        self.problem = ""

    def compose_body(self) -> ComposeResult:
        """Keys, the fields, the timeout's note, the money bound and the app file."""
        yield Static(safe("ctrl+s launch · Tab next field · Esc cancel · our trainer "
                          "(python -m trainer train) runs in the app", 200), id="hint")
        with VerticalScroll(id="form-body"):
            for key, label, placeholder in FIELDS:
                with Horizontal(classes="row"):
                    yield Label(label)
                    yield Field(value=self.defaults.get(key, ""), placeholder=placeholder,
                                compact=True, id=f"f-{key}")
                if key == "timeout":
                    yield Static("", id="timeout-note")
            yield Static(id="money")
            yield Static(id="appfile")
        yield Static("", id="form-status")

    def compose_buttons(self) -> ComposeResult:
        """Estimate first (a probe), or launch."""
        yield Button("Estimate", id="estimate", variant="default")
        yield Button("Launch (ctrl+s)", id="launch", variant="primary")

    def on_mount(self) -> None:
        """Check the defaults and show the app file."""
        self.refresh_form()

    # ------------------------------------------------------------------ values

    def words(self) -> dict[str, str]:
        """The form's ``key=value`` words (empty fields left out; ``ValueError`` for bad
        more args)."""
        values = {key: self.query_one(f"#f-{key}", Input).value.strip()
                  for key, _, _ in FIELDS}
        extra = parse_extra(values.pop("extra"))
        words = {k: v for k, v in values.items() if v}
        return {**extra, **words}

    def spec(self, probe: bool = False) -> ModalSpec:
        """The launch's spec (``ValueError``, one line, for what Modal or the trainer
        would refuse); ``probe``: a timeout is not needed yet."""
        words = self.words()
        if probe:
            words.setdefault("timeout", PROBE_PLACEHOLDER_TIMEOUT)
            words.setdefault("name", "probe")
        return spec_from_words(self.app_name, words)

    # ------------------------------------------------------------------ checking

    def refresh_form(self) -> ModalSpec | None:
        """Check the words, show the money bound and the app file; enable or refuse
        Launch and Estimate; returns the spec when launching is allowed."""
        spec: ModalSpec | None = None
        try:
            spec = self.spec()
            self.problem = ""
        except ValueError as exc:
            self.problem = str(exc)
        try:
            probe_ok = self.spec(probe=True) is not None
        except ValueError:
            probe_ok = False
        money = self.query_one("#money", Static)
        if spec is not None:
            price = gpu_price(spec.gpu)
            money.update(Text.assemble(
                (f"{spec.gpu or 'CPU'} at ${price:.2f}/h, timeout "
                 f"{format_duration(spec.timeout)}: ", "bold"),
                (f"at most ${price * spec.timeout / 3600:.2f} before Modal ends it", "bold"),
                (f"\nthe app file, written to {self.hooks.app_file(spec.app)} at launch:",
                 "dim")))
            # Generated here, every value of the user's in a Python literal: shown whole,
            # markup off (a Text is never parsed as markup).
            self.query_one("#appfile", Static).update(Text(render(spec)))
        else:
            money.update(safe(f"✖ {self.problem}", 400, "bold red"))
            self.query_one("#appfile", Static).update(
                Text("the app file is shown once the words above are valid", style="dim"))
        self._timeout_note()
        self.query_one("#launch", Button).disabled = spec is None or self.busy
        self.query_one("#estimate", Button).disabled = not probe_ok or self.busy
        return spec

    def _timeout_note(self) -> None:
        box = self.query_one("#timeout-note", Static)
        value = self.query_one("#f-timeout", Input).value.strip()
        if self.proposed and value != self.proposed:
            box.update(safe(f"⚠ the estimate proposes {self.proposed}", 200, "yellow"))
        elif self.proposed:
            box.update(safe("✔ proposed by the estimate", 200, "green"))
        else:
            box.update(safe("Estimate measures a few steps on Modal and proposes one",
                            200, "dim"))

    def on_input_changed(self, _event: Input.Changed) -> None:
        """Re-check after each key."""
        self.refresh_form()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter moves to the next field (ctrl+s launches)."""
        event.stop()
        self.focus_next()

    # ------------------------------------------------------------------ from the tab

    def show_estimate(self, text: Text, proposed: str) -> None:
        """The probe's estimate (``text``) and the timeout it proposes ("" for none):
        into the timeout field when the user has not typed their own."""
        self.busy = False
        self.proposed = proposed
        field = self.query_one("#f-timeout", Input)
        if proposed and field.value.strip() in ("", self._placed_timeout):
            self._placed_timeout = proposed
            field.value = proposed
        self._status(text)
        self.refresh_form()

    def show_error(self, line: str) -> None:
        """A launch or estimate that failed: the form stays open with the reason."""
        self.busy = False
        self._status(safe(line, 600, "bold red"))
        self.refresh_form()

    def done(self, spec: ModalSpec) -> None:
        """Modal spawned the function: close."""
        self.dismiss(spec)

    def _status(self, text: Text) -> None:
        self.query_one("#form-status", Static).update(text)

    # ------------------------------------------------------------------ actions

    def action_submit(self) -> None:
        """Launch when the words are valid; say why not otherwise."""
        spec = self.refresh_form()
        if spec is None or self.busy:
            if self.problem and not self.busy:
                self.show_error(f"cannot launch yet: {self.problem}")
            return
        self.busy = True
        self._status(Text("launching on Modal (modal run --detach)…", style="bold cyan"))
        self.refresh_form()
        self.hooks.submit(spec)

    def button_pressed(self, button_id: str) -> None:
        """Launch, or Estimate (a probe on Modal, which bills)."""
        if button_id == "launch":
            self.action_submit()
        elif button_id == "estimate" and not self.busy:
            try:
                spec = self.spec(probe=True)
            except ValueError as exc:
                self.show_error(str(exc))
                return
            self.busy = True
            self._status(safe(f"estimating: {estimate_bound(spec)}…", 300, "bold cyan"))
            self.refresh_form()
            self.hooks.estimate(spec)
