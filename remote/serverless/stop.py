"""Stopping a Modal app, and what of its run is safe.

``modal app stop`` interrupts the app's function (a ``KeyboardInterrupt`` in it) and ends
its container after a grace period: the generated function passes the stop on to the
trainer as SIGTERM (it saves ``last.pt`` and writes state ``stopped``) and commits the
Volume, as far as the grace period lets it. What is safe is what the runs Volume holds
once committed (``last.pt`` every epoch, ``best.pt`` on improvement, with
``status.json``) and what was pushed to the Hub. A Volume outlives the app, its stop and
its timeout; a container's own disk does not. "Safe" for a Modal run therefore means: in
the runs Volume (committed, read back from outside the container), or on the Hub as the
run's ledger (``hub.json``, in the Volume) records it.
"""

from __future__ import annotations

import json
import posixpath
import time
from dataclasses import dataclass
from typing import Any

from remote.billing.intents import want_stopped
from remote.serverless.client import stop_app
from remote.serverless.record import ModalRecord
from remote.serverless.watch import AppView, app_view, volume_transport
from remote.transport.base import Transport
from remote.weights.safety import FileVerdict, Safety

#: The largest ``hub.json`` read from the Volume.
MAX_LEDGER_BYTES = 1 << 20


@dataclass(frozen=True)
class SavedFile:
    """A weight file of the run: its name, its size in the Volume (``None``: not there)
    and the Hub repo its ledger names for it ("" when never pushed)."""

    name: str
    size: int | None
    hub_repo: str = ""

    @property
    def words(self) -> str:
        """Where it is safe, in words."""
        where = []
        if self.size is not None:
            where.append(f"in the Volume ({self.size} bytes)")
        if self.hub_repo:
            where.append(f"on the Hub in {self.hub_repo} (the run's ledger)")
        return f"{self.name}: " + (" and ".join(where) if where else "not saved")


def saved_weights(transport: Transport, run_dir: str) -> list[SavedFile]:
    """The run's weight files that are safe: in the Volume, or pushed per its ledger."""
    weights = posixpath.join(run_dir, "weights")
    sizes: dict[str, int | None] = {}
    for name in transport.listdir(weights):
        if name.endswith(".pt"):
            st = transport.stat(posixpath.join(weights, name))
            sizes[name] = None if st is None else st.size
    pushed = _ledger_repos(transport, run_dir)
    names = sorted(set(sizes) | set(pushed))
    return [SavedFile(n, sizes.get(n), pushed.get(n, "")) for n in names]


def _ledger_repos(transport: Transport, run_dir: str) -> dict[str, str]:
    raw = transport.read(posixpath.join(run_dir, "hub.json"), 0, MAX_LEDGER_BYTES)
    try:
        ledger: Any = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    entries = ledger.get("entries") if isinstance(ledger, dict) else None
    found: dict[str, str] = {}
    for item in entries if isinstance(entries, list) else ():
        if isinstance(item, dict) and isinstance(item.get("repo"), str) and \
                str(item.get("file", "")).endswith(".pt"):
            found[posixpath.basename(str(item["file"]))] = item["repo"]
    return found


def volume_safety(transport: Transport, run_dir: str) -> Safety:
    """The destroy check's verdict for a Modal run: each weight file is safe when it is in
    the runs Volume (which outlives the app) or on the Hub per the run's ledger."""
    saved = saved_weights(transport, run_dir)
    files = tuple(FileVerdict(posixpath.join(run_dir, "weights", f.name), run_dir,
                              f.size is not None or bool(f.hub_repo),
                              "volume" if f.size is not None else "hub", f.words)
                  for f in saved)
    safe = all(f.safe for f in files)
    reason = "; ".join(f.words for f in saved) if saved else "no weight file yet"
    return Safety(safe, "volume" if files and safe else None, None,
                  f"in the Modal Volume (it outlives the app): {reason}" if safe and files
                  else reason, files, len(files), (run_dir,), host=transport.label)


@dataclass(frozen=True)
class ModalStopped:
    """A stopped app: Modal's view after the stop, and what of the run is safe."""

    view: AppView
    saved: list[SavedFile]


def stop_modal(record: ModalRecord, wait: float = 30.0) -> ModalStopped:
    """``modal app stop`` the app, wait until Modal says it stopped, and read what is
    safe from the Volume. The laptop's intent becomes "stopped"."""
    stop_app(record.app_id)
    want_stopped(record.target)
    deadline = time.monotonic() + wait
    view = app_view(record)
    while view.running and time.monotonic() < deadline:
        time.sleep(0.5)
        view = app_view(record)
    transport = volume_transport(record)
    try:
        saved = saved_weights(transport, record.run_dir)
    finally:
        transport.close()
    return ModalStopped(view, saved)
