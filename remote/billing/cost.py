"""The money model: what a run costs, what a stopped instance keeps costing, and when
stopping beats destroying.

* running: the provider's price per hour (or ``--price``);
* stopped: allocated GB x storage $/GB/month / hours in a month (``HOURS_PER_MONTH``,
  a 30-day month: 250 GB at $0.20/GB/month is $0.0694/h);
* destroying ends billing, but coming back costs a rebuild (re-rent, image pull,
  reinstall, restage the data; about $1.00), so stopping is cheaper for pauses shorter
  than ``rebuild / stopped $/h`` hours (about 14 h with those figures);
* a provider that cannot stop (Lambda) gets no stop figures and no stop advice: only
  terminating ends its billing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from trainer.providers import PROVIDERS
from trainer.providers.base import HOURS_PER_MONTH, Instance
from trainer.text import money, rate

__all__ = ["CostReport", "break_even_hours", "cost_report", "format_report", "money", "rate",
           "stopped_per_hour"]

#: Storage price used when neither the provider nor the user says ($/GB/month).
DEFAULT_STORAGE_PER_GB_MONTH = 0.20
#: What re-renting and restaging costs when nobody says (dollars).
DEFAULT_REBUILD_USD = 1.00


def stopped_per_hour(disk_gb: float, storage_per_gb_month: float,
                     hours_per_month: float = HOURS_PER_MONTH) -> float:
    """Dollars per hour a stopped instance keeps paying for its disk."""
    if disk_gb < 0 or storage_per_gb_month < 0 or hours_per_month <= 0:
        raise ValueError("disk, storage price and hours per month must not be negative")
    return disk_gb * storage_per_gb_month / hours_per_month


def break_even_hours(rebuild_usd: float, stopped_usd_per_hour: float) -> float | None:
    """Pause length (hours) at which stopping and destroying cost the same: shorter
    pauses are cheaper stopped, longer ones destroyed. ``None`` when a stopped instance
    costs nothing (stopping always wins)."""
    if stopped_usd_per_hour <= 0:
        return None
    return rebuild_usd / stopped_usd_per_hour


def _usd(seconds: Any, price: float | None) -> float | None:
    if price is None or not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return None
    if not math.isfinite(seconds) or seconds < 0:
        return None
    return seconds / 3600.0 * price


@dataclass(frozen=True)
class CostReport:
    """Every money figure we can give; ``None`` where an input is missing."""

    price_per_hour: float | None
    disk_gb: float | None
    storage_per_gb_month: float | None
    stopped_per_hour: float | None
    rebuild_usd: float
    break_even_hours: float | None
    spent_usd: float | None
    per_epoch_usd: float | None
    to_finish_usd: float | None
    projected_total_usd: float | None
    price_source: str = ""
    #: Whether the provider can stop an instance; when not, the stop figures are ``None``.
    can_stop: bool = True
    provider_title: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of ``gpurent cost --json``."""
        return asdict(self)


def cost_report(*, price_per_hour: float | None = None, disk_gb: float | None = None,
                storage_per_gb_month: float | None = None, rebuild_usd: float | None = None,
                status: Mapping[str, Any] | None = None,
                instance: Instance | None = None, provider: str | None = None) -> CostReport:
    """The money figures from explicit values, else the provider's ``instance``, else the
    defaults, with run figures from a ``status.json`` object (``elapsed_seconds``,
    ``mean_epoch_seconds``, ``eta_seconds``). ``provider`` (else the instance's) decides
    whether stopping is possible at all."""
    source = "given" if price_per_hour is not None else ""
    if price_per_hour is None and instance is not None and instance.price_per_hour:
        price_per_hour, source = instance.price_per_hour, f"{instance.provider} API"
    if disk_gb is None and instance is not None:
        disk_gb = instance.disk_gb
    stopped = None
    if storage_per_gb_month is None and instance is not None:
        storage_per_gb_month = instance.storage_per_gb_month
        if disk_gb is not None and instance.storage_per_hour is not None:
            stopped = instance.storage_per_hour  # the provider's own figure
    if storage_per_gb_month is None:
        storage_per_gb_month = DEFAULT_STORAGE_PER_GB_MONTH
    if stopped is None and disk_gb is not None:
        stopped = stopped_per_hour(disk_gb, storage_per_gb_month)
    rebuild = DEFAULT_REBUILD_USD if rebuild_usd is None else rebuild_usd
    cls = PROVIDERS.get(provider or (instance.provider if instance is not None else ""))
    can_stop = cls is None or cls.can_stop
    if not can_stop:
        stopped = None
    status = status or {}
    spent = _usd(status.get("elapsed_seconds"), price_per_hour)
    epoch = status.get("mean_epoch_seconds") or status.get("epoch_seconds")
    to_finish = _usd(status.get("eta_seconds"), price_per_hour)
    if status.get("state") in ("completed", "failed", "stopped"):
        to_finish = 0.0 if price_per_hour is not None else None
    total = None if spent is None or to_finish is None else spent + to_finish
    return CostReport(
        price_per_hour=price_per_hour,
        disk_gb=disk_gb,
        storage_per_gb_month=storage_per_gb_month,
        stopped_per_hour=stopped,
        rebuild_usd=rebuild,
        break_even_hours=None if stopped is None else break_even_hours(rebuild, stopped),
        spent_usd=spent,
        per_epoch_usd=_usd(epoch, price_per_hour),
        to_finish_usd=to_finish,
        projected_total_usd=total,
        price_source=source,
        can_stop=can_stop,
        provider_title=cls.title if cls is not None else "",
    )


def format_report(report: CostReport) -> list[str]:
    """Human lines for a report, each saying what is missing when a figure is unknown."""
    lines = []
    src = f" ({report.price_source})" if report.price_source else ""
    lines.append(f"running      {rate(report.price_per_hour)}{src}"
                 if report.price_per_hour is not None else
                 "running      unknown $/h (pass --price or --provider/--instance)")
    if report.spent_usd is not None:
        lines.append(f"this run     {money(report.spent_usd)} so far")
    if report.per_epoch_usd is not None:
        lines.append(f"per epoch    {money(report.per_epoch_usd, 4)}")
    if report.to_finish_usd is not None:
        lines.append(f"to finish    {money(report.to_finish_usd)} (ETA x price); projected "
                     f"total {money(report.projected_total_usd)}")
    if not report.can_stop:
        lines.append(f"stopped      not possible: {report.provider_title or 'this provider'} "
                     "cannot stop an instance; only terminating ends its billing (and "
                     "deletes its disk)")
        return lines
    if report.stopped_per_hour is None:
        lines.append("stopped      unknown $/h (pass --disk-gb)")
        return lines
    lines.append(f"stopped      {rate(report.stopped_per_hour)} for "
                 f"{report.disk_gb:g} GB of disk at "
                 f"{money(report.storage_per_gb_month)}/GB/month (GPUs released)")
    lines.append(f"rebuild      {money(report.rebuild_usd)} to re-rent and restage after a "
                 "destroy")
    if report.break_even_hours is None:
        lines.append("advice       stopping costs nothing here: stop rather than destroy")
    else:
        lines.append(f"break-even   {report.break_even_hours:.1f} h: stopping is cheaper for "
                     f"pauses under ~{report.break_even_hours:.0f} h, destroying for longer "
                     "ones")
    return lines
