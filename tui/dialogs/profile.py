"""The profiler's verdict: in a few sentences for a notification (``profile_summary``:
the result of a profile arrives a minute later, and must not take a key press), and the
whole card (``ProfileCard``, on request): what bounds the step, what to change, whether a
faster GPU would help, and what an epoch costs."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from remote import fields
from remote.billing import money
from trainer.text import clean_text, format_duration
from tui.dialogs.base import Dialog
from tui.fmt import safe

VERDICT_STYLES = {"dataloader": "bold yellow", "host / launch": "bold dark_orange",
                  "compute": "bold green", "memory-pressure": "bold red"}


def profile_text(report: dict[str, Any]) -> Text:
    """A ``gpurent.profile/1`` report as the card's text; a wrongly typed field is shown
    as unreadable (or left out, for a number)."""
    text = Text()
    config = fields.obj(report.get("config"))
    timing = fields.obj(report.get("timing"))
    verdict = fields.text(report.get("verdict"), "unknown")
    text.append("verdict: ")
    text.append_text(safe(verdict.upper(), 40, VERDICT_STYLES.get(verdict, "bold")))
    text.append("\n")
    text.append_text(safe(fields.text(report.get("why"), ""), 300))
    text.append("\n\n")
    where = fields.text(config.get("gpu") or config.get("device"))
    text.append_text(safe(f"{fields.text(config.get('model'))} on {where}, batch "
                          f"{fields.text(config.get('batch'))}, imgsz "
                          f"{fields.text(config.get('imgsz'))}, workers "
                          f"{fields.text(config.get('workers'))}", 200, "dim"))
    text.append("\n")
    if timing:
        step = fields.num(timing.get("step_seconds")) or 0.0
        wait = fields.num(timing.get("data_wait_fraction")) or 0.0
        rate = fields.num(timing.get("images_per_second")) or 0.0
        text.append(f"step {step * 1000:.1f} ms, data wait {wait * 100:.0f} %, "
                    f"{rate:.1f} images/s\n")
    busy = fields.num(report.get("gpu_busy_fraction"))
    text.append(f"GPU busy {busy * 100:.0f} % of the step\n" if busy is not None
                else "GPU busy: not measured (no CUDA GPU)\n")
    for entry in fields.objs(report.get("verdicts")):
        name = fields.text(entry.get("name"))
        text.append("\n")
        text.append_text(safe(name, 40, VERDICT_STYLES.get(name, "bold")))
        text.append(": ")
        text.append_text(safe(fields.text(entry.get("why"), ""), 300))
        text.append("\n  faster GPU? ")
        text.append_text(safe(fields.text(entry.get("faster_gpu"), ""), 300))
        for lever in fields.texts(entry.get("levers")):
            text.append("\n  • ")
            text.append_text(safe(lever, 200))
        text.append("\n")
    for item in fields.objs(report.get("cannot_tell")):
        text.append_text(safe(f"cannot tell {fields.text(item.get('name'))}: "
                              f"{fields.text(item.get('reason'))}", 200, "dim"))
        text.append("\n")
    cost = fields.obj(report.get("cost"))
    seconds = fields.num(cost.get("epoch_seconds"))
    if seconds is not None:
        text.append("\n")
        text.append_text(safe(f"epoch: {fields.text(cost.get('epoch_images'))} images, "
                              f"{seconds:.0f} s of training steps", 200))
        val = fields.num(cost.get("val_seconds"))
        if val is not None:
            text.append(f" + {val:.0f} s of validation")
        per_epoch = fields.num(cost.get("cost_per_epoch"))
        if per_epoch is not None:
            text.append(f", {money(per_epoch)} per epoch, "
                        f"{money(fields.num(cost.get('cost_per_100_epochs')))} per 100 epochs",
                        style="bold")
        text.append(" (validation not included)" if val is None else
                    " (the money: training steps)" if per_epoch is not None else "",
                    style="dim")
    return text


def profile_summary(report: dict[str, Any], run: str = "") -> str:
    """The profile's verdict in a few sentences, for a notification and the events
    history: what bounds the step, whether a faster GPU would help, the first lever, and
    the time (and money) of an epoch."""
    verdict = fields.text(report.get("verdict"), "unknown")
    why = fields.text(report.get("why"), "")
    words = [f"profile{' of ' + run if run else ''}: {verdict.upper()}"
             + (f", {why}" if why else "")]
    first = next(iter(fields.objs(report.get("verdicts"))), None)
    if first is not None:
        faster = fields.text(first.get("faster_gpu"), "")
        if faster:
            words.append(f"faster GPU? {faster}")
        levers = fields.texts(first.get("levers"))
        if levers:
            words.append(f"lever: {levers[0]}")
    cost = fields.obj(report.get("cost"))
    seconds = fields.num(cost.get("epoch_total_seconds"))
    if seconds is None:
        seconds = fields.num(cost.get("epoch_seconds"))
    if seconds is not None:
        epoch = f"an epoch ~{format_duration(seconds)}"
        per_epoch = fields.num(cost.get("cost_per_epoch"))
        if per_epoch is not None:
            epoch += f", {money(per_epoch)} of training steps"
        words.append(epoch)
    return clean_text(". ".join(w.rstrip(".") for w in words) + ".")


class ProfileCard(Dialog[None]):
    """Shows a profile report; the only button closes it."""

    cancel_label = "Close"
    decides = False

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("Profile")
        self.report = report

    def compose_body(self) -> ComposeResult:
        """The verdict card."""
        with VerticalScroll(classes="body"):
            yield Static(profile_text(self.report), id="card")
