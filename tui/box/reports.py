"""Box reports as text for dialogs: preflight and doctor findings, and what stopping or
destroying an instance keeps billing; and whether the preflight found a GPU. Every value
from the box goes through ``remote.fields`` and ``tui.fmt.safe``."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from remote import fields
from remote.billing import money
from tui.fmt import safe

#: Characters of one check or finding shown (they wrap; the hf_home warning alone is
#: over 200: a cut one lost its advice).
FINDING_CHARS = 600


def has_gpu(preflight: dict[str, Any] | None) -> bool | None:
    """Whether the box can train on a GPU (``None`` until preflight has run)."""
    if preflight is None or "gpu_available" not in preflight:
        return None
    return bool(preflight["gpu_available"])


def findings_text(title: str, report: dict[str, Any] | None) -> Text:
    """Preflight checks or doctor findings as coloured lines (a wrongly typed field is
    shown as unreadable)."""
    text = Text()
    text.append_text(safe(title, 60, "bold"))
    if report is None:
        text.append("  (not run)\n", style="dim")
        return text
    ok = report.get("ok") is True
    text.append("  ok\n" if ok else "  problems found\n", style="green" if ok else "bold red")
    styles = {"ok": "green", "info": "dim", "warn": "yellow", "warning": "yellow",
              "fail": "bold red", "error": "bold red"}
    for check in fields.objs(report.get("checks")):
        status = fields.text(check.get("status"))
        if status == "ok":
            continue
        text.append_text(safe(f"  {status:<5} ", 20, styles.get(status, "")))
        text.append_text(safe(f"{fields.text(check.get('name'))}: "
                              f"{fields.text(check.get('message'))}", FINDING_CHARS))
        text.append("\n")
    for finding in fields.objs(report.get("findings")):
        sev = fields.text(finding.get("severity"))
        text.append_text(safe(f"  {sev:<7} ", 20, styles.get(sev, "")))
        text.append_text(safe(f"{fields.text(finding.get('kind'))}: "
                              f"{fields.text(finding.get('message'))}", FINDING_CHARS))
        text.append("\n")
    return text


def instance_costs(report: Any, what: str, instance: Any = None) -> Text:
    """What stopping or destroying keeps billing, in dollars (a ``CostReport``; for a
    destroy, the provider's ``instance`` says what it bills in its state now); no stop
    advice for a provider that cannot stop."""
    if what == "destroy":
        return destroy_billing(report, instance)
    text = Text()
    text.append(f"Running now costs {money(report.price_per_hour)}/h. ")
    if not report.can_stop:
        text.append(f"{report.provider_title or 'This provider'} cannot stop an instance: "
                    "destroying (terminating) is the only way to end its billing.")
        return text
    text.append(f"Stopped it costs {money(report.stopped_per_hour)}/h for its disk")
    if report.disk_gb is not None:
        text.append(f" ({report.disk_gb:.0f} GB)")
    text.append(".\n")
    if report.break_even_hours is not None:
        text.append(f"Stopping is cheaper than destroying for pauses under "
                    f"{report.break_even_hours:.1f} h (a rebuild costs about "
                    f"{money(report.rebuild_usd)}).\n")
    text.append("Stopping releases the GPUs: a restart can fail if they are gone.",
                style="bold yellow")
    return text


def destroy_billing(report: Any, instance: Any = None) -> Text:
    """What the instance bills now, in its state (a stopped one: its disk), and that a
    destroy ends it; the disk's deletion is the destroy dialog's own first line."""
    state = getattr(instance, "state", None)
    now = instance.billing_per_hour if instance is not None else report.price_per_hour
    text = Text()
    if state == "stopped":
        text.append(f"It is stopped and bills {money(now)}/h now, for its disk")
        if report.disk_gb is not None:
            text.append(f" ({report.disk_gb:.0f} GB)")
    else:
        text.append(f"It bills {money(now)}/h now")
        if state and state != "running":
            text.append_text(safe(f" ({state})", 40))
    text.append("; destroyed, it bills nothing once the provider confirms it.")
    if not report.can_stop:
        text.append(f"\n{report.provider_title or 'This provider'} cannot stop an instance: "
                    "destroying (terminating) is the only way to end its billing.")
    return text
