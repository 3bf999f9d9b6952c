"""The launch form: what to train and how, checked as you type (required fields, the run
name against the box's runs, the Hub repo and token, the dataset doctor), the exact
command it will run, an estimate of the time, and the error of a launch that failed.

The form stays open while the box launches: ``FormHooks.submit`` starts it, and the box
view calls ``done()`` when the run started or ``show_error()`` when it did not. The body
scrolls; the buttons stay at the bottom. Focus starts on the first required field that is
empty; ctrl+s launches. Launch refused while it has the focus (the checks came back) hands
the focus to the field that refuses, never to Cancel."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static

from remote.fleet import parse_duration
from tui.dialogs.base import Dialog
from tui.fmt import safe
from tui.widgets.field import Field

#: Form fields: (key=value argument, label, placeholder). ``*`` marks required ones.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("data", "data *", "path to data.yaml on the box (required)"),
    ("name", "name *", "run name: a directory in the project"),
    ("model", "model", "n, s, m… or a .pt path"),
    ("epochs", "epochs", "a whole number (empty: the engine's default)"),
    ("batch", "batch", "images a step, or -1: the most that fits (empty: the default)"),
    ("imgsz", "imgsz", "pixels, a multiple of 32 (empty: the engine's default)"),
    ("device", "device", "cpu, 0 or 0,1 (empty: the first GPU, else the CPU)"),
    ("save_period", "save_period", "snapshot every N epochs (empty: off)"),
    ("hub", "Hub repo", "ORG/NAME: push best.pt at milestones (empty: off)"),
    ("extra", "more args", "other key=value arguments, e.g. workers=4 lr0=0.001"),
)
REQUIRED = ("data", "name")


#: Per engine: the model the form offers and the model and Hub fields' hints.
ENGINE_FIELDS: dict[str, dict[str, str]] = {
    "trainer": {"model": "n", "model_hint": "n, s, m… or a .pt path",
                "hub_hint": "user/repo: push best.pt at milestones (empty: off)"},
    "libreyolo": {"model": "yolox-n", "model_hint": "yolox-n, yolo9-t… or a .pt path",
                  "hub_hint": "user/repo: a box-side watcher pushes every new best "
                              "(empty: off)"},
}


@dataclass
class LaunchRequest:
    """What the user filled in: the engine, the run name and the ``key=value`` args
    (empty fields left out). ``hub`` is the Hub repo or empty."""

    engine: str
    name: str
    args: dict[str, str] = field(default_factory=dict)
    hub: str = ""
    #: ``launch`` or ``profile`` (a short measured run that says what bounds it).
    action: str = "launch"
    #: Seconds the instance may bill from the launch on (``gpurent lease``), or ``None``.
    lease: float | None = None


def parse_extra(text: str) -> dict[str, str]:
    """``key=value`` words (shell-quoted values allowed); ``ValueError`` otherwise."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"more args: {exc}") from None
    args = {}
    for word in words:
        key, sep, value = word.partition("=")
        if not sep or not key:
            raise ValueError(f"more args: expected key=value, got {word!r}")
        args[key] = value
    return args


@dataclass
class FormHooks:
    """What the form asks of the box. ``preview`` returns the exact command (or raises
    ValueError); ``field_note(key, values)`` is an inline problem with one field ("" when
    fine; a note starting with "⚠" warns without blocking); ``data_changed`` asks for the
    dataset doctor again; ``submit`` launches or profiles; ``settings_changed`` says that
    another field changed (the estimate may need measuring again); ``clone``/``resume``
    give the values of the selected run (``None`` when there is none); ``not_resumable``
    says why the selected run cannot be resumed ("" when it can: ctrl+r is offered);
    ``lease_for`` is the instance a lease would be for (``vast:4242``, one the user named:
    the form then has a lease field), "" for none; ``lease_enforced`` says who would end
    the billing at the lease's end, as things stand (a watchdog seen, the box's guard
    armed or not)."""

    preview: Callable[[LaunchRequest], str]
    submit: Callable[[LaunchRequest], None]
    field_note: Callable[[str, dict[str, str]], str] = lambda _k, _v: ""
    data_changed: Callable[[str], None] = lambda _data: None
    settings_changed: Callable[[], None] = lambda: None
    clone: Callable[[], dict[str, str] | None] = lambda: None
    resume: Callable[[], dict[str, str] | None] = lambda: None
    selected: str = ""
    not_resumable: Callable[[], str] = lambda: ""
    lease_for: str = ""
    lease_enforced: Callable[[], str] = lambda: ""


class LaunchForm(Dialog[LaunchRequest | None]):
    """The form (see the module doc). Dismisses the request that started, or ``None``."""

    DEFAULT_CSS = """
    LaunchForm > Vertical { width: 112; height: auto; max-height: 100%; }
    LaunchForm .title { margin-bottom: 0; }
    LaunchForm #hint { color: $text-muted; height: auto; }
    LaunchForm #form-body { height: auto; max-height: 1fr; }
    LaunchForm .row { height: 1; }
    LaunchForm .row Label { width: 13; }
    LaunchForm .row Input { width: 1fr; }
    LaunchForm .row Select { width: 1fr; }
    LaunchForm .note { height: auto; padding-left: 13; }
    LaunchForm .note.-empty { display: none; }
    LaunchForm #command { background: $boost; padding: 0 1; height: auto; margin-top: 1; }
    LaunchForm #findings { height: auto; }
    LaunchForm #form-status { height: auto; }
    LaunchForm #form-status.-empty { display: none; }
    LaunchForm .buttons { margin-top: 0; }
    """
    BINDINGS = [Binding("ctrl+s", "submit('launch')", "Launch", priority=True),
                Binding("ctrl+o", "fill('clone')", "Clone", priority=True),
                Binding("ctrl+r", "fill('resume')", "Resume", priority=True)]

    def __init__(self, defaults: dict[str, str], engine: str, hooks: FormHooks,
                 title: str = "Launch a training run") -> None:
        super().__init__(title)
        self.defaults = defaults
        self.engine = engine
        self.hooks = hooks
        #: Why Launch is refused now (empty: allowed); findings that block it.
        self.blockers: list[str] = []
        self.doctor_blocks = ""
        #: The doctor's verdict on ``data`` when it passed ("✔ …").
        self.data_note = ""
        self.busy = False
        #: The last time estimate (shown above the buttons).
        self.estimate = Text()
        #: Fields the user edited (a change while focused), and what the form itself
        #: last put in each field: a value that differs from it is the user's too, even
        #: when its change was handled after the focus moved on (a loaded laptop).
        self._touched: set[str] = set()
        self._placed: dict[str, str] = dict(defaults)
        #: Fields the box changed after the form was shown: key -> why (marked until
        #: the user types in them).
        self.changed: dict[str, str] = {}
        #: Whether the box cannot download pretrained weights (``None``: not known yet):
        #: a LibreYOLO run is then offered ``pretrained=False``.
        self.offline: bool | None = None

    @property
    def AUTO_FOCUS(self) -> str:  # type: ignore[override]  # noqa: N802 - Textual reads it
        """The first required field that is empty, else the first required field."""
        empty = [key for key in REQUIRED if not self.defaults.get(key)]
        return f"#f-{(empty or list(REQUIRED))[0]}"

    def compose_body(self) -> ComposeResult:
        """Keys, the fields with their notes, the command and checks; then one line
        above the buttons for the estimate or an error."""
        hint = "ctrl+s launch · Tab next field · Esc cancel"
        if self.hooks.selected:
            hint += f" · ctrl+o clone {self.hooks.selected}"
            if not self.hooks.not_resumable():
                hint += f" · ctrl+r resume {self.hooks.selected}"
        yield Static(safe(hint, 200), id="hint")
        with VerticalScroll(id="form-body"):
            with Horizontal(classes="row"):
                yield Label("engine")
                yield Select([("our trainer (python -m trainer train)", "trainer"),
                              ("libreyolo train", "libreyolo")], value=self.engine,
                             allow_blank=False, compact=True, id="engine")
            for key, label, placeholder in FIELDS:
                with Horizontal(classes="row"):
                    yield Label(label)
                    yield Field(value=self.defaults.get(key, ""), placeholder=placeholder,
                                compact=True, id=f"f-{key}")
                yield Static("", id=f"note-{key}", classes="note -empty")
            if self.hooks.lease_for:
                with Horizontal(classes="row"):
                    yield Label("lease")
                    yield Field(placeholder=f"{self.hooks.lease_for} bills for at most 6h, "
                                "90m, 2d, then stops (empty: no lease)", compact=True,
                                id="f-lease")
                yield Static("", id="note-lease", classes="note -empty")
            yield Static(id="command")
            yield Static(Text("checking the box…", style="dim"), id="findings")
        yield Static("", id="form-status", classes="-empty")

    def compose_buttons(self) -> ComposeResult:
        """Profile first, or launch."""
        yield Button("Profile", id="profile", variant="default")
        yield Button("Launch (ctrl+s)", id="launch", variant="primary")

    def on_mount(self) -> None:
        """Check the defaults and show their command."""
        self.refresh_form()

    # ------------------------------------------------------------------ values

    def values(self) -> dict[str, str]:
        """Every field's text, stripped."""
        return {key: self.query_one(f"#f-{key}", Input).value.strip() for key, _, _ in FIELDS}

    def request(self) -> LaunchRequest:
        """The form's current values as a request (``ValueError`` for bad more args)."""
        values = self.values()
        hub = values.pop("hub")
        extra = values.pop("extra")
        name = values.get("name", "")
        engine = self.query_one("#engine", Select).value
        args = {k: v for k, v in values.items() if v}
        args.update(parse_extra(extra))
        lease, _why = self.lease()
        return LaunchRequest(engine=str(engine), name=name, args=args, hub=hub, lease=lease)

    def lease(self) -> tuple[float | None, str]:
        """The lease field's seconds (``None``: empty, or no field) and why it is not a
        duration (``""`` when it is)."""
        field_ = self.query("#f-lease")
        text = field_.first(Input).value.strip() if field_ else ""
        try:
            return (parse_duration(text) if text else None), ""
        except ValueError as exc:
            return None, str(exc)

    def _later(self, method, *args) -> bool:  # noqa: ANN001 - any bound method
        """Whether the form is still being built (then ``method`` runs once it is): the
        box answers from its workers, and may be quicker than the form's compose."""
        if self.query("#f-data"):
            return False
        self.call_after_refresh(method, *args)
        return True

    def set_values(self, values: dict[str, str], only_untouched: bool = False,
                   why: str = "") -> None:
        """Fill fields (the ones the user has not typed in, with ``only_untouched``);
        with ``why``, a field whose value this changes is marked (``why`` and its old
        value under it), so that no default changes unseen; without, a field filled
        loses its mark (the box's change is no longer what it holds)."""
        if self._later(self.set_values, values, only_untouched, why):
            return
        for key, value in values.items():
            box = self.query(f"#f-{key}")
            if not box:
                continue
            field_ = box.first(Input)
            if only_untouched and (key in self._touched
                                   or field_.value != self._placed.get(key, "")):
                continue
            if why and field_.value != value:
                self.changed[key] = f"⚠ {why} (was {field_.value or 'empty'})"
            elif not why:
                self.changed.pop(key, None)
            self._placed[key] = value
            field_.value = value
        self.refresh_form()

    # ------------------------------------------------------------------ checking

    def refresh_form(self) -> str | None:
        """Check every field, show the notes and the command, enable or refuse Launch;
        returns the command when launching is allowed."""
        values = self.values()
        blockers = []
        blocking: list[str] = []  # the fields that refuse, in the form's order
        asked = {**values, "engine": str(self.query_one("#engine", Select).value)}
        for key, _, _ in FIELDS:
            note = "" if key in REQUIRED and not values[key] else \
                self.hooks.field_note(key, asked)
            if key in REQUIRED and not values[key]:
                note = f"✖ {key} is required"
            elif key == "data" and self.doctor_blocks:
                note = f"✖ {self.doctor_blocks.removeprefix('data: ')}"
            elif key == "data" and self.data_note:
                note = self.data_note
            if not note and key in self.changed:
                note = self.changed[key]
            self._show_note(key, note)
            if note and not note.startswith(("⚠", "✔")):
                blockers.append(note.lstrip("✖ ").split(":")[0])
                blocking.append(key)
        if self.hooks.lease_for:
            lease, why = self.lease()
            self._show_note("lease", f"✖ lease: {why}" if why else
                            "" if lease is None else
                            f"✔ {self.hooks.lease_for}: billing to end {lease / 3600:g} h "
                            f"after the launch; {self.hooks.lease_enforced()}")
            if why:
                blockers.append("lease")
                blocking.append("lease")
        command_box = self.query_one("#command", Static)
        command = None
        try:
            command = self.hooks.preview(self.request())
            command_box.update(safe(command, 2000))
        except ValueError as exc:
            command_box.update(safe(f"✖ {exc}", 300, "bold red"))
            blockers.append(str(exc))
            blocking.append("extra")
        self.blockers = blockers
        refused = bool(blockers) or self.busy
        self._refuse(refused, blocking)
        return None if refused else command

    def _refuse(self, refused: bool, blocking: list[str]) -> None:
        """Enable or refuse Launch and Profile. A refused button that has the focus hands
        it to the first field that refuses (else the first field), never to Cancel: an
        Enter meant for Launch, pressed as the checks came back refusing it (a slow box,
        a loaded laptop), must not close the form and lose what was typed."""
        buttons = [self.query_one(f"#{name}", Button) for name in ("launch", "profile")]
        if refused and any(button.has_focus for button in buttons):
            self.set_focus(self.query_one(f"#f-{(blocking or [FIELDS[0][0]])[0]}", Input))
        for button in buttons:
            button.disabled = refused

    def _show_note(self, key: str, note: str) -> None:
        box = self.query_one(f"#note-{key}", Static)
        box.set_class(not note, "-empty")
        style = {"⚠": "yellow", "✔": "green"}.get(note[:1], "bold red")
        box.update(safe(note, 300, style) if note else "")

    def on_input_changed(self, event: Input.Changed) -> None:
        """Re-check after each key; a new data path asks for the doctor again."""
        key = (event.input.id or "").removeprefix("f-")
        if event.input.has_focus:
            self._touched.add(key)
            self.changed.pop(key, None)
            if self.query_one("#form-status", Static).has_class("-error") and not self.busy:
                self._status(self.estimate)  # an edit answers the last refusal
        if key == "data":
            self.doctor_blocks = self.data_note = ""
            self.hooks.data_changed(event.value.strip())
        self.refresh_form()
        if key not in ("data", "lease"):
            self.hooks.settings_changed()

    def on_select_changed(self, _event: Select.Changed) -> None:
        """Switch the fields to the engine's defaults, then show the command (and
        estimate again)."""
        engine = str(self.query_one("#engine", Select).value)
        fields = ENGINE_FIELDS.get(engine, ENGINE_FIELDS["trainer"])
        model = self.query_one("#f-model", Input)
        if model.value in {f["model"] for f in ENGINE_FIELDS.values()}:
            model.value = fields["model"]
        model.placeholder = fields["model_hint"]
        self.query_one("#f-hub", Input).placeholder = fields["hub_hint"]
        self.offer_pretrained()
        self.refresh_form()
        self.hooks.settings_changed()

    def offer_pretrained(self) -> None:
        """For LibreYOLO on a box that cannot download, put ``pretrained=False`` into
        "more args" (it would die retrying the download)."""
        extra = self.query_one("#f-extra", Input)
        if (self.offline and str(self.query_one("#engine", Select).value) == "libreyolo"
                and "pretrained=" not in extra.value):
            extra.value = f"pretrained=False {extra.value}".strip()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter moves to the next field (ctrl+s launches)."""
        event.stop()
        self.focus_next()

    # ------------------------------------------------------------------ from the box

    def show_findings(self, findings: Text, blocks: str = "", data_note: str = "") -> None:
        """The checks section; ``blocks`` is why the findings refuse Launch ("" if not),
        ``data_note`` what the doctor said of ``data`` when it passed."""
        if self._later(self.show_findings, findings, blocks, data_note):
            return
        self.query_one("#findings", Static).update(findings)
        self.doctor_blocks = blocks
        self.data_note = data_note
        self.refresh_form()

    def show_estimate(self, text: Text) -> None:
        """The time estimate, above the buttons (unless an error is shown there)."""
        if self._later(self.show_estimate, text):
            return
        self.estimate = text
        if not self.query_one("#form-status", Static).has_class("-error"):
            self._status(text)

    def _status(self, text: Text, error: bool = False) -> None:
        box = self.query_one("#form-status", Static)
        box.set_class(not text.plain, "-empty")
        box.set_class(error, "-error")
        box.update(text)

    def checking_again(self, why: str) -> None:
        """The checks run again (``why``): an error they left is no longer true."""
        if self._later(self.checking_again, why):
            return
        self.query_one("#findings", Static).update(safe(f"checking the box again ({why})…",
                                                        200, "dim"))
        if self.query_one("#form-status", Static).has_class("-error") and not self.busy:
            self._status(self.estimate)

    def show_error(self, line: str) -> None:
        """A launch or profile that failed: the form stays open with the reason."""
        if self._later(self.show_error, line):
            return
        self.busy = False
        self._status(safe(line, 600, "bold red"), error=True)
        self.refresh_form()

    def done(self, request: LaunchRequest) -> None:
        """The box started what was asked: close."""
        self.dismiss(request)

    # ------------------------------------------------------------------ actions

    def action_submit(self, action: str) -> None:
        """Launch (or profile) when the values are valid; say why not otherwise."""
        if self.refresh_form() is None:
            if self.blockers and not self.busy:
                self.show_error("cannot launch yet: " + "; ".join(self.blockers))
            return
        request = self.request()
        request.action = action
        self.busy = True
        verb = "launching" if action == "launch" else "profiling a short run"
        self._status(Text(f"{verb} on the box…", style="bold cyan"))
        self.refresh_form()
        self.hooks.submit(request)

    def action_fill(self, how: str) -> None:
        """ctrl+o / ctrl+r: take the selected run's settings (to clone or resume it)."""
        why = self.hooks.not_resumable() if how == "resume" and self.hooks.selected else ""
        if why:
            self.show_error(f"cannot resume {self.hooks.selected}: {why}")
            return
        values = self.hooks.clone() if how == "clone" else self.hooks.resume()
        if values is None:
            self.show_error("no run selected to take the settings from")
            return
        self.set_values(values)

    def button_pressed(self, button_id: str) -> None:
        """Launch or Profile."""
        if button_id in ("launch", "profile"):
            self.action_submit(button_id)
