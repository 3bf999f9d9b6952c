"""The launch form: what to train and how, the exact command it will run, and the box
checks (preflight, dataset doctor) that come first."""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Grid, VerticalScroll
from textual.widgets import Button, Input, Label, Select, Static

from tui.dialogs.base import Dialog
from tui.fmt import safe

#: Form fields: (key=value argument, label, placeholder).
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("model", "model", "n, s, m… or a .pt path"),
    ("data", "data", "path to data.yaml on the box"),
    ("epochs", "epochs", "30"),
    ("batch", "batch", "16, or -1 for auto"),
    ("imgsz", "imgsz", "640"),
    ("device", "device", "0 or 0,1 (empty: auto)"),
    ("name", "name", "run name (a directory in the project)"),
    ("save_period", "save_period", "snapshot every N epochs (empty: off)"),
    ("hub", "Hub repo", "user/repo: push best.pt at milestones (empty: off)"),
    ("extra", "more args", "other key=value arguments, e.g. workers=4 lr0=0.001"),
)


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


class LaunchForm(Dialog[LaunchRequest | None]):
    """The form. ``preview(request)`` returns the exact command (or raises ValueError
    with a one-line reason); ``findings`` is updated by the box view as checks finish."""

    DEFAULT_CSS = """
    LaunchForm > Vertical { width: 112; }
    LaunchForm Grid { grid-size: 2; grid-columns: 14 1fr; grid-rows: 1; grid-gutter: 1 0;
                      height: auto; margin-bottom: 1; }
    LaunchForm Grid Input { border: none; height: 1; padding: 0 1; }
    LaunchForm Grid SelectCurrent { border: none; height: 1; padding: 0 1; }
    LaunchForm Grid Select { height: 1; }
    LaunchForm #command { background: $boost; padding: 0 1; height: auto; margin-bottom: 1; }
    LaunchForm #findings { height: auto; }
    LaunchForm VerticalScroll { height: auto; max-height: 34; }
    """

    def __init__(self, defaults: dict[str, str], engine: str,
                 preview: Callable[[LaunchRequest], str],
                 findings: Text | None = None, title: str = "Launch a training run") -> None:
        super().__init__(title)
        self.defaults = defaults
        self.engine = engine
        self.preview = preview
        self.initial_findings = findings or Text("checking the box…", style="dim")
        #: Whether the box cannot download pretrained weights (``None``: not known yet):
        #: a LibreYOLO run is then offered ``pretrained=False``.
        self.offline: bool | None = None

    def compose_body(self) -> ComposeResult:
        """Engine, the fields, the command preview and the findings."""
        with VerticalScroll():
            with Grid():
                yield Label("engine")
                yield Select([("our trainer (python -m trainer train)", "trainer"),
                              ("libreyolo train", "libreyolo")],
                             value=self.engine, allow_blank=False, id="engine")
                for key, label, placeholder in FIELDS:
                    yield Label(label)
                    yield Input(value=self.defaults.get(key, ""), placeholder=placeholder,
                                id=f"f-{key}")
            yield Static(Text("command", style="bold"))
            yield Static(id="command")
            yield Static(Text("checks", style="bold"))
            yield Static(self.initial_findings, id="findings")

    def compose_buttons(self) -> ComposeResult:
        """Profile first, or launch."""
        yield Button("Profile", id="profile", variant="default")
        yield Button("Launch", id="launch", variant="primary")

    def on_mount(self) -> None:
        """Show the command for the defaults."""
        self.refresh_command()

    def request(self) -> LaunchRequest:
        """The form's current values."""
        values = {key: self.query_one(f"#f-{key}", Input).value.strip()
                  for key, _, _ in FIELDS}
        hub = values.pop("hub")
        extra = values.pop("extra")
        name = values.get("name", "")
        engine = self.query_one("#engine", Select).value
        args = {k: v for k, v in values.items() if v}
        args.update(parse_extra(extra))
        return LaunchRequest(engine=str(engine), name=name, args=args, hub=hub)

    def refresh_command(self) -> str | None:
        """Show the exact command, or why the values are not valid; the command."""
        box = self.query_one("#command", Static)
        try:
            command = self.preview(self.request())
        except ValueError as exc:
            box.update(safe(f"✖ {exc}", 300, "bold red"))
            self.query_one("#launch", Button).disabled = True
            self.query_one("#profile", Button).disabled = True
            return None
        box.update(safe(command, 2000))
        self.query_one("#launch", Button).disabled = False
        self.query_one("#profile", Button).disabled = False
        return command

    def show_findings(self, findings: Text) -> None:
        """Replace the checks section (called by the box view when checks finish)."""
        self.query_one("#findings", Static).update(findings)

    def on_input_changed(self, _event: Input.Changed) -> None:
        """Keep the command in step with the fields."""
        self.refresh_command()

    def on_select_changed(self, _event: Select.Changed) -> None:
        """Switch the fields to the engine's defaults, then show the command."""
        engine = str(self.query_one("#engine", Select).value)
        fields = ENGINE_FIELDS.get(engine, ENGINE_FIELDS["trainer"])
        model = self.query_one("#f-model", Input)
        if model.value in {f["model"] for f in ENGINE_FIELDS.values()}:
            model.value = fields["model"]
        model.placeholder = fields["model_hint"]
        self.query_one("#f-hub", Input).placeholder = fields["hub_hint"]
        self.offer_pretrained()
        self.refresh_command()

    def offer_pretrained(self) -> None:
        """For LibreYOLO on a box that cannot download, put ``pretrained=False`` into
        "more args" (it would die retrying the download)."""
        extra = self.query_one("#f-extra", Input)
        if (self.offline and str(self.query_one("#engine", Select).value) == "libreyolo"
                and "pretrained=" not in extra.value):
            extra.value = f"pretrained=False {extra.value}".strip()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter in a field does not launch: the button does."""
        event.stop()

    def button_pressed(self, button_id: str) -> None:
        """Launch or profile when the values are valid."""
        if button_id in ("launch", "profile") and self.refresh_command() is not None:
            request = self.request()
            request.action = button_id
            self.dismiss(request)
