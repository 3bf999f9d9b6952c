"""Stopping a Modal app, and what of its run is safe.

``modal app stop`` interrupts the app's function (a ``KeyboardInterrupt`` in it) and ends
its container after a grace period: the generated function passes the stop on to the
trainer as SIGTERM (it saves ``last.pt`` and writes state ``stopped``) and commits the
Volume, as far as the grace period lets it. The stop waits, bounded, until Modal lists
none of the app's containers, and says so plainly when one still runs (and may bill).
What is safe is what the runs Volume holds once committed (``last.pt`` every epoch,
``best.pt`` on improvement, with ``status.json``) and what was pushed to the Hub. A
Volume outlives the app, its stop and its timeout; a container's own disk does not.
"Safe" for a Modal run therefore means: in the runs Volume (committed, read back from
outside the container), or on the Hub as the run's ledger (``hub.json``, in the Volume)
records it.
"""

from __future__ import annotations

import json
import posixpath
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote.billing.intents import want_stopped
from remote.serverless.client import app_containers, stop_app
from remote.serverless.record import ModalRecord
from remote.serverless.watch import AppView, app_view, volume_transport
from remote.transport.base import Transport
from remote.weights.safety import FileVerdict, Safety

#: The largest ``hub.json`` (or ``status.json``) read from the Volume.
MAX_LEDGER_BYTES = 1 << 20
#: How often the stop asks whether the app's containers have ended (seconds).
POLL = 1.0
#: How often the stop says it is still waiting (seconds).
SAY_EVERY = 5.0


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


def run_words(transport: Transport, run_dir: str, saved: list[SavedFile]) -> str:
    """The run's state as its committed ``status.json`` says (the epoch it stopped at)
    and whether its last checkpoint is safe."""
    raw = transport.read(posixpath.join(run_dir, "status.json"), 0, MAX_LEDGER_BYTES)
    try:
        status: Any = json.loads(raw) if raw else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        said = "the run wrote no status to the Volume"
    else:
        state = str(status.get("state") or "unknown")
        epoch = f"epoch {status.get('completed_epochs') or 0}"
        if status.get("total_epochs"):
            epoch += f"/{status['total_epochs']}"
        said = f"the run {state} at {epoch}" if state != "running" else \
            f"the run's last committed status says running at {epoch} (its stop was not " \
            f"committed before the container ended)"
    last = next((f for f in saved if f.name == "last.pt"), None)
    if last is not None and (last.size is not None or last.hub_repo):
        return f"{said}; last checkpoint safe ({last.words})"
    return f"{said}; no last checkpoint safe (last.pt is not in the Volume nor on the Hub)"


@dataclass(frozen=True)
class ModalStopped:
    """A stopped app: Modal's view after the stop, the containers still running after
    the wait (``[]``: all ended, after ``waited`` seconds), the run's state and what of
    it is safe."""

    view: AppView
    saved: list[SavedFile]
    containers: list[str]
    waited: float
    run: str

    @property
    def words(self) -> str:
        """Whether the app's containers ended, in words."""
        app = self.view.record.app_id
        if self.containers:
            n = len(self.containers)
            return (f"still running: {n} container{'s' * (n != 1)} of {app} still "
                    f"run{'s' * (n == 1)} {self.waited:.0f}s after the stop; Modal may "
                    f"still bill {'them' if n != 1 else 'it'} (see `modal container list "
                    f"--app-id {app}`; stop again)")
        return f"stopped: {app}'s containers have ended ({self.waited:.0f}s after the stop)"


def stop_modal(record: ModalRecord, wait: float = 60.0,
               say: Callable[[str], None] | None = None) -> ModalStopped:
    """``modal app stop`` the app, wait (at most ``wait`` seconds, saying so every few
    seconds through ``say``) until its containers have ended, then read the run's state
    and what is safe from the Volume. The laptop's intent becomes "stopped"."""
    stop_app(record.app_id)
    want_stopped(record.target)
    started = time.monotonic()
    said: float | None = None  # the first wait is said at once, then every SAY_EVERY
    running = app_containers(record.app_id)
    while running and time.monotonic() - started < wait:
        if say is not None and (said is None or time.monotonic() - said >= SAY_EVERY):
            said = time.monotonic()
            say(f"waiting for Modal to end {len(running)} container(s) of "
                f"{record.app_id} ({said - started:.0f}s of at most {wait:.0f}s)")
        time.sleep(POLL)
        running = app_containers(record.app_id)
    waited = time.monotonic() - started
    view = app_view(record)
    transport = volume_transport(record)
    try:
        saved = saved_weights(transport, record.run_dir)
        run = run_words(transport, record.run_dir, saved)
    finally:
        transport.close()
    return ModalStopped(view, saved, running, waited, run)
