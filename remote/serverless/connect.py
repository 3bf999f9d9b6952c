"""``ModalConnector``: what the TUI and the watcher reach a Modal app through, with the
face of ``remote.link.Connector`` (``open``, ``wait_ready``, ``trainer_prefix``...): each
connection is the app's runs Volume (``remote.transport.volume``), nothing is
bootstrapped, no box tool runs, and the watcher polls the run's files
(``poll_reason`` says why)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from remote.serverless.record import ModalRecord
from remote.serverless.watch import AppState, need_record, volume_transport
from remote.transport.base import RunResult, Transport, TransportError


class ModalConnector:
    """Connections to app ``app`` (launched from this laptop): its runs Volume."""

    #: Nothing runs in the Volume: the run's files are read (``Watcher.poll_files``).
    poll_reason = "a Modal app: its runs Volume is read"

    def __init__(self, app: str) -> None:
        self.record: ModalRecord = need_record(app)
        self.state = AppState(self.record)
        self.host = self.record.target
        self.trainer_prefix = ""
        self.bootstrap = False
        self.lazy = True
        self.box: dict[str, Any] | None = None
        self.ask_unknown: Any = None

    def relaunched(self) -> ModalRecord:
        """The app was launched again from here: its new record, which the connections
        open now and later (their ``pid_alive``) answer for."""
        self.record = need_record(self.record.app)
        self.state.follow(self.record)
        return self.record

    def __call__(self) -> Transport:
        """A new connection (see :meth:`open`)."""
        return self.open()

    def open(self, progress: Callable[[str], None] | None = None,
             notes: list[str] | None = None, *, early: bool = True,
             gate: bool = False) -> Transport:
        """The runs Volume, its ``pid_alive`` answered by Modal's state of the app."""
        if progress is not None:
            progress(f"reading {self.record.target}'s runs Volume")
        return volume_transport(self.record, self.state)

    def wait_ready(self, timeout: float) -> bool:
        """Always ready: nothing is bootstrapped."""
        return True

    def give_up(self) -> None:
        """Nothing to wait for."""

    def run_tool(self, transport: Transport, words: list[str], *, timeout: float = 120.0,
                 stdin: bytes | None = None) -> RunResult:
        """No box tool runs on a Modal app."""
        raise TransportError("a Modal app runs no box tools from here")
