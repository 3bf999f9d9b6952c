"""What the laptop keeps of each Modal app it launched, in its intents
(``STATE/intents.json``, entry ``modal:APP``, key ``modal``): the app id, the run, the GPU
and its price, the timeout and when it was launched. Money and "timed out" are judged
from these and Modal's own app state, on the laptop's clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from remote.billing.intents import INTENTS_FILE
from remote.billing.statefile import locked_json, read_json, state_file
from remote.fields import num
from remote.serverless.appfile import ModalSpec

#: Modal's list prices in dollars per hour (per second on its pricing page, times 3600),
#: for the GPU alone; ``cpu``: one physical core. ``price=`` on the launch overrides.
GPU_PRICES = {"T4": 0.59, "L4": 0.80, "A10G": 1.10, "A10": 1.10, "L40S": 1.95,
              "A100": 2.10, "A100-40GB": 2.10, "A100-80GB": 2.50, "H100": 3.95,
              "H100!": 3.95, "H200": 4.54, "B200": 6.25, "cpu": 0.047}


def gpu_price(gpu: str | None) -> float:
    """The list price per hour of ``gpu`` (``None``: a CPU core); a count (``H100:8``)
    multiplies it."""
    if gpu is None:
        return GPU_PRICES["cpu"]
    name, _, count = gpu.partition(":")
    each = GPU_PRICES.get(name.upper(), GPU_PRICES.get(name, 0.0))
    return each * (int(count) if count.isdigit() else 1)


@dataclass(frozen=True)
class ModalRecord:
    """A Modal app launched from here."""

    app: str
    app_id: str
    run: str
    gpu: str | None
    timeout: int
    launched_at: float
    price_per_hour: float
    hub: str = ""
    want: str = "running"
    #: The launch's trainer arguments, dataset and staged tar (what a relaunch offers).
    args: tuple[str, ...] = ()
    data: str = ""
    stage: str = ""

    @property
    def target(self) -> str:
        """Its target: ``modal:APP``."""
        return f"modal:{self.app}"

    @property
    def run_dir(self) -> str:
        """The run's directory in the runs Volume."""
        return f"{self.app}/{self.run}"

    @property
    def deadline(self) -> float:
        """When Modal ends it at the latest (its timeout after the launch)."""
        return self.launched_at + self.timeout


def note_app(spec: ModalSpec, app_id: str, now: float, price: float | None = None) -> None:
    """Record ``spec``'s app, launched as ``app_id`` at ``now``."""
    with locked_json(INTENTS_FILE) as data:
        entry = data.get(f"modal:{spec.app}")
        if not isinstance(entry, dict):
            entry = {"want": "running", "since": now, "runs": []}
        entry["modal"] = {"app_id": app_id, "run": spec.run, "gpu": spec.gpu,
                          "timeout": spec.timeout, "launched_at": now, "hub": spec.hub,
                          "args": list(spec.args), "data": spec.data,
                          "stage": f"{spec.stage_repo}/{spec.stage_file}"
                          if spec.stage_repo else "",
                          "price_per_hour": gpu_price(spec.gpu) if price is None else price}
        data[f"modal:{spec.app}"] = entry


def _record(target: str, entry: Any) -> ModalRecord | None:
    if not target.startswith("modal:") or not isinstance(entry, dict):
        return None
    m = entry.get("modal")
    if not isinstance(m, dict) or not isinstance(m.get("app_id"), str):
        return None
    timeout, at = num(m.get("timeout")), num(m.get("launched_at"))
    if timeout is None or at is None:
        return None
    gpu = m.get("gpu") if isinstance(m.get("gpu"), str) else None
    args = m.get("args")
    args = args if isinstance(args, list) else []
    return ModalRecord(target[len("modal:"):], m["app_id"], str(m.get("run") or ""), gpu,
                       int(timeout), at, num(m.get("price_per_hour")) or 0.0,
                       str(m.get("hub") or ""), str(entry.get("want") or "running"),
                       tuple(str(a) for a in args), str(m.get("data") or ""),
                       str(m.get("stage") or ""))


def modal_records() -> dict[str, ModalRecord]:
    """Every Modal app launched from here, by app name."""
    found = {}
    for target, entry in read_json(state_file(INTENTS_FILE)).items():
        try:
            record = _record(target, entry)
        except (TypeError, ValueError, OverflowError):  # a hand edit: not ours to read
            record = None
        if record is not None:
            found[record.app] = record
    return found


def record_for(app: str) -> ModalRecord | None:
    """App ``app``'s record, or ``None`` when it was not launched from here."""
    return modal_records().get(app)
