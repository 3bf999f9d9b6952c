"""The provider's instance behind one box: its facts (price, storage, state) for the
money line, and stopping or destroying it, each asked in a dialog that says what it
keeps billing and names a run still training on it (a destroy also needs the id typed
and the weights safe off the box). Once a destroy is confirmed the instance is gone:
the provider is not asked about it again."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.text import Text

from remote.billing import (
    ProviderError,
    box_address,
    destroy_question,
    parse_instance_target,
    provider_for,
    resolve_safety,
    run_teardown,
    warning_for,
)
from remote.fleet import taken_words
from trainer.health import GOING
from tui.box.failures import ActionRefused
from tui.box.lines import TAKEN_NEXT
from tui.box.parts import BoxKey, PartMessage, handles, instance_stopped, training
from tui.box.ports import Done, InstanceStale, Notice, PauseWatching, Ports
from tui.box.reports import instance_costs
from tui.box.state import BoxState
from tui.box.weights import safety_source
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.fmt import safe


@dataclass
class InstanceRead(PartMessage, bubble=False, namespace="box"):
    """What the provider says about the instance now."""

    instance: Any


@dataclass
class InstanceFigures(PartMessage, bubble=False, namespace="box"):
    """What the question before ``what`` (stop or destroy) needs: the provider, the
    instance, and for a destroy the weights' safety."""

    what: str
    provider: Any
    instance: Any
    safety: Any


@dataclass
class InstanceDestroyed(PartMessage, bubble=False, namespace="box"):
    """The provider confirmed the destroy: the box is gone."""


def provider(state: BoxState) -> Any:
    """The provider client for the box's instance (the fleet account's, or its API key
    from the environment or the config file), or ``ActionRefused`` when the box is not
    an instance."""
    if state.spec.provider is None or not state.has_instance():
        raise ActionRefused("no provider instance: open the box as vast:ID / runpod:ID, "
                            "or start with --provider vast|runpod|lambda --instance ID")
    return state.spec.client or provider_for(state.spec.provider,
                                             base_url=state.spec.provider_url)


def can_act(state: BoxState) -> bool:
    """Whether stopping or destroying the instance can work now: an instance that is not
    destroyed, its provider's API key, and a connection to check that it is the box."""
    if not state.has_instance() or state.transport is None or state.instance_destroyed():
        return False
    try:
        provider(state)
    except (ProviderError, ValueError):  # no key; ConfigError: a bad config file
        return False
    return True


def still_training(state: BoxState, what: str) -> Text | None:
    """``run X is still training: ...`` when the watched run is, for the question before
    ``what`` (stop or destroy), else ``None``."""
    verdict = state.status.health.verdict if state.status is not None else None
    if verdict not in GOING or not state.run_name:
        return None
    end = ("stopping the instance kills it; what it saved stays on the disk" if what == "stop"
           else "destroying the instance kills it")
    text = Text("run ", style="bold yellow")
    text.append_text(safe(state.run_name, 60, "bold yellow"))
    text.append(f" is still training ({verdict}): {end}.\n", style="bold yellow")
    return text


def stop_rank(state: BoxState) -> int | None:
    """The stop-instance key's footer rank: with a provider's instance, first while it
    runs and nothing trains."""
    if not state.has_instance():
        return None
    return 5 if training(state) or instance_stopped(state) else 3


def destroy_rank(state: BoxState) -> int | None:
    """The destroy key's footer rank: with a provider's instance, later while training."""
    if not state.has_instance():
        return None
    return 7 if training(state) else 4


class InstanceActions:
    """The instance keys of one box. ``costs`` gives the ``CostReport`` now."""

    KEYS = (BoxKey("i", "stop_instance", "ask_stop", "stop inst", "Stop the instance (shows "
                   "what it still costs)", 130, stop_rank),
            BoxKey("D", "destroy", "ask_destroy", "destroy", "Destroy the instance (type its "
                   "id; needs safe weights)", 140, destroy_rank))

    def __init__(self, ports: Ports, costs: Callable[[], Any]) -> None:
        self.ports = ports
        self.costs = costs
        #: D on the fleet's row: ask the destroy as soon as the box is connected.
        self.destroy_wanted = False

    def destroy_once_connected(self) -> None:
        """D from the fleet: the destroy question now, or once the box is connected (it
        needs the box for the weights verdict)."""
        if self.ports.state.transport is None:
            self.destroy_wanted = True
            self.ports.notify(f"instance {self.ports.state.spec.instance}: the destroy "
                              "dialog opens once the box is reached (its weights are "
                              "checked first)", timeout=8)
        else:
            self.ask_destroy()

    def connected(self) -> None:
        """The box is connected: read the instance, and ask the destroy D wanted."""
        self.refresh()
        if self.destroy_wanted:
            self.destroy_wanted = False
            self.ask_destroy()

    @handles(InstanceStale, take=())
    def refresh(self) -> None:
        """Ask the provider about the instance (price, storage, state), when the box is
        one; the guard's state on the box comes with the watcher's stream."""
        if self.ports.state.has_instance():
            self.ports.work("refresh_instance", self._read, group="instance")

    def _read(self) -> None:
        state = self.ports.state
        if state.has_instance() and not state.instance_destroyed():
            self.ports.post(InstanceRead(provider(state).get_instance(state.spec.instance)))

    def gone(self, why: str) -> bool:
        """Whether the instance was destroyed or taken away (then ``why`` a key does
        nothing is said, with what to do instead)."""
        state = self.ports.state
        if state.instance_destroyed():
            self.ports.notify(f"instance {state.spec.instance} was destroyed: {why}",
                              severity="warning")
        elif state.taken_away is not None:
            self.ports.notify(f"instance {state.spec.instance}: {state.taken_away}: {why}; "
                              f"{TAKEN_NEXT}", severity="warning")
        return state.instance_destroyed() or state.taken_away is not None

    @handles(InstanceRead, take=("instance",))
    def read(self, instance: Any) -> None:
        """Keep what the provider said, and when (nothing more once the instance is
        destroyed). While the link is down, an instance the provider stopped under the
        box is taken away: said once, and the watcher stops (its address is dead)."""
        state = self.ports.state
        if state.instance_destroyed():
            return
        state.instance, state.instance_at = instance, state.clock()
        if state.taken_away is not None and getattr(instance, "state", "") == "running":
            state.taken_away = None  # started again (elsewhere): r reconnects
        elif state.taken_away is None and state.down_since is not None:
            words = taken_words(instance, state.instance_target())
            if words:
                state.taken_away = words
                self.ports.post(PauseWatching())
                self.ports.alert(f"instance {state.spec.instance}: {words}; {TAKEN_NEXT}")

    # ------------------------------------------------------------------ stop, destroy

    def ask_stop(self) -> None:
        """Confirm with the money figures, then stop the instance."""
        self._figures("stop")

    def ask_destroy(self) -> None:
        """Type the id to confirm; refused while the weights are not safe."""
        self._figures("destroy")

    def _figures(self, what: str) -> None:
        provider(self.ports.state)
        self.ports.state.need_transport()  # refused for a destroyed instance
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

    @handles(InstanceFigures, action="cost_figures")
    def ask(self, figures: InstanceFigures) -> None:
        """The question, with what the instance keeps billing."""
        what, client, instance, safety = (figures.what, figures.provider, figures.instance,
                                          figures.safety)
        self.read(instance)
        detail = Text()
        training = still_training(self.ports.state, what)
        if training is not None:
            detail.append_text(training)
        detail.append_text(instance_costs(self.costs(), what, instance))
        if what == "stop":
            detail.append("\n")
            detail.append_text(safe(warning_for(what, client, instance), 400, "dim"))
            if not client.can_stop:
                self.ports.app().notify(warning_for("stop", client, instance),
                                        severity="warning")
                return
            self.ports.ask(ConfirmDialog("Stop instance", detail, "Stop instance"),
                           lambda yes: self._end("stop") if yes else None)
            return
        question = destroy_question(safety)
        dialog = DestroyDialog(str(self.ports.state.spec.instance), question.safe, detail,
                               question.unsafe)
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
        gone = outcome.action == "destroy" and outcome.confirmed
        self.ports.post(InstanceDestroyed() if gone else InstanceStale())
