"""The provider's instance behind one box: its facts (price, storage, state) for the
money line, and stopping or destroying it, each asked in a dialog that says what it
keeps billing (a destroy also needs the id typed and the weights safe off the box)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from remote.billing import (
    box_address,
    parse_instance_target,
    provider_for,
    resolve_safety,
    run_teardown,
    warning_for,
)
from tui.box.failures import ActionRefused
from tui.box.ports import Done, InstanceStale, Notice, Ports
from tui.box.reports import instance_costs
from tui.box.state import BoxState
from tui.box.weights import safety_source
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.fmt import safe


@dataclass
class InstanceRead(Message, bubble=False, namespace="box"):
    """What the provider says about the instance now."""

    instance: Any


@dataclass
class InstanceFigures(Message, bubble=False, namespace="box"):
    """What the question before ``what`` (stop or destroy) needs: the provider, the
    instance, and for a destroy the weights' safety."""

    what: str
    provider: Any
    instance: Any
    safety: Any


def provider(state: BoxState) -> Any:
    """The provider client for the box's instance (its API key from the environment or
    the config file), or ``ActionRefused`` when the box is not an instance."""
    if not state.has_instance():
        raise ActionRefused("no provider instance: open the box as vast:ID / runpod:ID, "
                            "or start with --provider vast|runpod|lambda --instance ID")
    return provider_for(state.spec.provider, base_url=state.spec.provider_url)


class Instance:
    """The instance keys of one box. ``costs`` gives the ``CostReport`` now."""

    def __init__(self, ports: Ports, costs: Callable[[], Any]) -> None:
        self.ports = ports
        self.costs = costs

    def refresh(self) -> None:
        """Ask the provider about the instance (price, storage, state); the guard's
        state on the box comes with the watcher's stream."""
        self.ports.work("refresh_instance", self._read, group="instance")

    def _read(self) -> None:
        state = self.ports.state
        if state.has_instance():
            self.ports.post(InstanceRead(provider(state).get_instance(state.spec.instance)))

    def read(self, instance: Any) -> None:
        """Keep what the provider said."""
        self.ports.state.instance = instance

    # ------------------------------------------------------------------ stop, destroy

    def ask_stop(self) -> None:
        """Confirm with the money figures, then stop the instance."""
        self._figures("stop")

    def ask_destroy(self) -> None:
        """Type the id to confirm; refused while the weights are not safe."""
        self._figures("destroy")

    def _figures(self, what: str) -> None:
        provider(self.ports.state)
        self.ports.work("cost_figures", lambda: self._fetch_figures(what), group="instance",
                        label="asking the provider")

    def _fetch_figures(self, what: str) -> None:
        """Fetch the instance and the weights verdict, then ask."""
        state = self.ports.state
        client = provider(state)
        instance = client.get_instance(state.spec.instance)
        safety = None
        if what == "destroy":
            safety = resolve_safety(safety_source(state) if state.transport else None)
        self.ports.post(InstanceFigures(what, client, instance, safety))

    def ask(self, figures: InstanceFigures) -> None:
        """The question, with what the instance keeps billing."""
        what, client, instance, safety = (figures.what, figures.provider, figures.instance,
                                          figures.safety)
        self.ports.state.instance = instance
        detail = instance_costs(self.costs(), what)
        detail.append("\n")
        detail.append_text(safe(warning_for(what, client, instance), 400, "dim"))
        if what == "stop":
            if not client.can_stop:
                self.ports.app().notify(warning_for("stop", client, instance),
                                        severity="warning")
                return
            self.ports.ask(ConfirmDialog("Stop instance", detail, "Stop instance"),
                           lambda yes: self._end("stop") if yes else None)
            return
        weights_safe = bool(safety is not None and safety.safe)
        unsafe = getattr(safety, "unsafe_names", "") or getattr(safety, "reason", "")
        dialog = DestroyDialog(str(self.ports.state.spec.instance), weights_safe, detail,
                               unsafe)
        self.ports.ask(dialog,
                       lambda answer: self._end("destroy", *answer) if answer else None)

    def _end(self, what: str, override: bool = False, typed_id: str = "") -> None:
        verb = "stopping" if what == "stop" else "destroying"
        self.ports.work("instance_call", lambda: self._call(what, override, typed_id),
                        group="instance-call",
                        label=f"{verb} instance {self.ports.state.spec.instance}")

    def _call(self, what: str, override: bool, typed_id: str) -> None:
        """Stop or destroy through ``remote.billing.teardown``'s gate (a destroy re-checks
        the weights on the box; both check that the instance is this box), then confirm
        by polling the provider."""
        state = self.ports.state
        spec = state.spec
        client = provider(state)
        transport = state.need_transport()
        # A box opened as its instance (vast:ID) is reached at the address its API gives.
        named = spec.kind == "ssh" and parse_instance_target(spec.target)
        address = None if named else box_address(
            None if spec.kind == "local" else spec.target, spec.port, transport)
        outcome = run_teardown(client, str(spec.instance), what, safety=safety_source(state),
                               override=override, typed_id=typed_id, box=address,
                               interval=1.0)
        line = outcome.message or f"instance {spec.instance}: {outcome.state}"
        self.ports.post(Notice(line, "error", bell=True) if outcome.alarm else Done(line))
        self.ports.post(InstanceStale())
