"""Stopping the watched run of one box: asked first (what stopping keeps, and that the
instance keeps billing), refused in one line for a run that already ended."""

from __future__ import annotations

from rich.text import Text

from remote.billing import money
from remote.runs import stop_run
from trainer.engines import engine_of
from tui.box.failures import ActionRefused
from tui.box.parts import BoxKey, training
from tui.box.ports import Done, Ports, RunsStale
from tui.dialogs.confirm import ConfirmDialog
from tui.fmt import safe
from tui.words import ENDED


class RunStop:
    """The stop-run key of one box."""

    KEYS = (BoxKey("x", "stop_run", "ask", "stop run", "Stop training gracefully (asks first)",
                   60, lambda state: 2 if training(state) else None, quiet=False),)

    def __init__(self, ports: Ports) -> None:
        self.ports = ports

    def ask(self) -> None:
        """Confirm, then stop the training gracefully (best.pt and status are kept)."""
        state = self.ports.state
        state.need_transport()
        run_dir = state.need_run()
        verdict = state.status.health.verdict if state.status is not None else None
        if verdict in ENDED and verdict != "unreadable":
            raise ActionRefused(f"nothing to stop: run {state.run_name} {ENDED[verdict]}")
        body = Text("Stop training ")
        body.append_text(safe(run_dir, 120, "bold"))
        body.append("?\n")
        engine = engine_of(state.status.read.fields or {}) if state.status is not None \
            else None
        ours = ("our trainer gets SIGTERM: it finishes its step, writes last.pt and "
                "status 'stopped' (ctrl+r in the launch form resumes it).")
        theirs = ("LibreYOLO gets SIGINT once no checkpoint is being written: it ends as "
                  "'failed: KeyboardInterrupt', shown here as stopped.")
        ours = ours[0].upper() + ours[1:]
        body.append({"trainer": ours, "libreyolo": theirs}.get(engine or "",
                                                              f"{ours} {theirs}"))
        if state.spec.kind != "local":
            body.append(" The instance keeps running and billing.")
            price = state.price_per_hour()
            if price is not None:
                body.append(f" ({money(price)}/h)", style="bold")
        self.ports.ask(ConfirmDialog("Stop training", body, "Stop training"),
                       lambda yes: self.stop() if yes else None)

    def stop(self) -> None:
        """Stop the watched run now (no question)."""
        self.ports.work("stop_run", self._stop, group="stop", label="stopping the run")

    def _stop(self) -> None:
        """Stop the run (SIGTERM, or SIGINT for LibreYOLO; SIGKILL after a timeout). A stop
        already in progress is waited for, not sent again: the result's words say so."""
        state = self.ports.state
        transport, run_dir = state.need_transport(), state.need_run()
        result = stop_run(transport, run_dir)
        self.ports.post(Done(f"stop: {result.outcome}. {result.detail}"))
        self.ports.post(RunsStale())
