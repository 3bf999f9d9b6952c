"""The profiler's verdict card: what bounds the step, what to change, whether a faster
GPU would help, and what an epoch costs."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import VerticalScroll
from textual.widgets import Static

from remote.billing.cost import money
from tui.dialogs.base import Dialog
from tui.fmt import safe

VERDICT_STYLES = {"dataloader": "bold yellow", "host / launch": "bold dark_orange",
                  "compute": "bold green", "memory-pressure": "bold red"}


def profile_text(report: dict[str, Any]) -> Text:
    """A ``gpurent.profile/1`` report as the card's text."""
    text = Text()
    config = report.get("config") or {}
    timing = report.get("timing") or {}
    verdict = str(report.get("verdict") or "unknown")
    text.append("verdict: ")
    text.append_text(safe(verdict.upper(), 40, VERDICT_STYLES.get(verdict, "bold")))
    text.append("\n")
    text.append_text(safe(report.get("why") or "", 300))
    text.append("\n\n")
    where = config.get("gpu") or config.get("device") or "?"
    text.append_text(safe(f"{config.get('model', '?')} on {where}, batch "
                          f"{config.get('batch', '?')}, imgsz {config.get('imgsz', '?')}, "
                          f"workers {config.get('workers', '?')}", 200, "dim"))
    text.append("\n")
    if timing:
        step = timing.get("step_seconds") or 0.0
        text.append(f"step {step * 1000:.1f} ms, data wait "
                    f"{(timing.get('data_wait_fraction') or 0) * 100:.0f} %, "
                    f"{timing.get('images_per_second') or 0:.1f} images/s\n")
    busy = report.get("gpu_busy_fraction")
    text.append(f"GPU busy {busy * 100:.0f} % of the step\n" if busy is not None
                else "GPU busy: not measured (no CUDA GPU)\n")
    for entry in report.get("verdicts") or []:
        text.append("\n")
        text.append_text(safe(entry.get("name", "?"), 40,
                              VERDICT_STYLES.get(entry.get("name"), "bold")))
        text.append(": ")
        text.append_text(safe(entry.get("why", ""), 300))
        text.append("\n  faster GPU? ")
        text.append_text(safe(entry.get("faster_gpu", ""), 300))
        for lever in entry.get("levers") or []:
            text.append("\n  • ")
            text.append_text(safe(lever, 200))
        text.append("\n")
    for item in report.get("cannot_tell") or []:
        text.append_text(safe(f"cannot tell {item.get('name')}: {item.get('reason')}",
                              200, "dim"))
        text.append("\n")
    cost = report.get("cost") or {}
    if cost.get("epoch_seconds") is not None:
        text.append(f"\nepoch: {cost.get('epoch_images')} images, "
                    f"{cost['epoch_seconds']:.0f} s of training steps")
        if cost.get("cost_per_epoch") is not None:
            text.append(f", {money(cost['cost_per_epoch'])} per epoch, "
                        f"{money(cost.get('cost_per_100_epochs'))} per 100 epochs",
                        style="bold")
        text.append(" (validation not included)", style="dim")
    return text


class ProfileCard(Dialog[None]):
    """Shows a profile report; the only button closes it."""

    cancel_label = "Close"

    def __init__(self, report: dict[str, Any]) -> None:
        super().__init__("Profile")
        self.report = report

    def compose_body(self) -> ComposeResult:
        """The verdict card."""
        with VerticalScroll(classes="body"):
            yield Static(profile_text(self.report), id="card")
