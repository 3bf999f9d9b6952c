"""The guard on one box: its badge (red while an alarm is not acknowledged, told once per
alarm with the bell), arming, disarming and acknowledging."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.text import Text

from remote.billing import can_stop, resolve_base_url, this_machine
from remote.fleet import GuardOrder, arm, disarm, told_words
from remote.runs import acknowledge_alarm
from tui.box.parts import BoxKey, PartMessage, handles, training
from tui.box.ports import Done, Panes, Ports
from tui.box.state import BoxState
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.guard import GuardAnswer, GuardDialog
from tui.fmt import safe


@dataclass
class GuardRead(PartMessage, bubble=False, namespace="box"):
    """The guard's state on the box, as an action left it."""

    guard: Any


def no_instance(state: BoxState) -> str:
    """Why the guard cannot be armed on ``state``'s box, in one line: a box on this
    machine (``--local``, ``--demo``) with no provider instance named or found in its
    environment has no billing to end. ``""`` when it may be armed."""
    if state.spec.kind != "local" or state.has_instance() or this_machine() is not None:
        return ""
    what = "the demo runs on this machine" if state.spec.demo else "this box is this machine"
    return (f"no guard here: {what}, not a provider instance, so there is no billing to "
            "end; a guard watches a rented box opened as vast:ID, runpod:POD_ID or "
            "lambda:ID")


def guard_rank(state: BoxState) -> int | None:
    """The guard key's footer rank: where the box bills (not this machine), first while
    the run trains unguarded."""
    if state.spec.kind == "local" or not (state.has_instance()
                                          or state.price_per_hour() is not None):
        return None
    watching = state.guard is not None and getattr(state.guard, "watching", False)
    return 2 if training(state) and not watching else 5


class Guard:
    """The guard's badge and key of one box."""

    KEYS = (BoxKey("a", "guard", "ask", "guard", "Arm or disarm the guard; acknowledge its "
                   "alarm", 110, guard_rank),)

    def __init__(self, ports: Ports, panes: Panes) -> None:
        self.ports = ports
        self.panes = panes
        self._alarm_told: Any = None

    def text(self) -> Text:
        """The guard badge: off, its state, or its alarm in red until acknowledged; once
        the instance is destroyed (not by the guard), that there is nothing to guard:
        what the guard did or feared before is no longer true."""
        state = self.ports.state
        guard = state.guard
        if guard is None:
            return Text("guard: off", style="dim")
        outcome = (guard.outcome or {}) if guard.state == "done" else {}
        by_guard = bool(outcome.get("confirmed") and outcome.get("action") == "destroy")
        if state.instance_destroyed() and not by_guard:
            return safe(f"guard: nothing left to guard, instance {state.spec.instance} "
                        "destroyed", 100, "dim")
        if guard.alarm_active:
            text = Text(" ⚠ GUARD ALARM ", style="bold white on red")
            text.append(" ")
            text.append_text(safe(guard.alarm.get("message"), 160, "bold red"))
            text.append("  (a: acknowledge)", style="dim")
            return text
        return safe(guard.summary(), 100, "bold yellow" if guard.watching else "dim")

    @handles(GuardRead, take=("guard",), action="set_guard")
    def show(self, guard: Any) -> None:
        """Show the guard's state (from the watcher's stream, or an action's answer)."""
        self.ports.state.guard = guard
        self.draw()
        if guard is not None and guard.alarm_active and self._alarm_told != guard.alarm:
            self._alarm_told = guard.alarm  # tell once per alarm, loudly
            self.ports.alert(f"GUARD ALARM: {guard.alarm.get('message')}")

    def draw(self) -> None:
        """The guard badge as the facts say now (the instance's state included)."""
        self.panes.guard_badge.update(self.text())

    def ask(self) -> None:
        """Acknowledge the alarm; else disarm (when armed, after confirming); else arm
        (said at once where there is no instance to guard: this machine)."""
        state = self.ports.state
        guard = state.guard
        nothing_to_guard = no_instance(state)
        if nothing_to_guard and not (guard is not None and (guard.alarm_active
                                                            or guard.watching)):
            self.ports.post(Done(nothing_to_guard))  # information: it fades, no red
            return
        state.need_transport()
        state.need_run()
        if guard is not None and guard.alarm_active:
            body = Text("The guard could not end the instance's billing as asked:\n\n")
            body.append_text(safe(guard.alarm.get("message"), 600, "bold red"))
            for step in (guard.steps or [])[-6:]:
                body.append("\n")
                body.append_text(safe(f"{step.get('at')}  {step.get('step')}: "
                                      f"{step.get('result')}", 300, "dim"))
            body.append("\n\nCheck the instance in the provider's console. Acknowledging "
                        "only clears the red badge; guard.json keeps the alarm.")
            self.ports.ask(ConfirmDialog("Guard alarm", body, "Acknowledge"),
                           lambda yes: self._acknowledge() if yes else None)
        elif guard is not None and guard.watching:
            body = safe(guard.summary(), 200)
            self.ports.ask(ConfirmDialog("Disarm the guard", body, "Disarm"),
                           lambda yes: self._set(None) if yes else None)
        else:
            stoppable = not state.spec.provider or can_stop(state.spec.provider)
            self.ports.ask(GuardDialog("Arm the guard", can_stop=stoppable,
                                       lease=self._leased() is not None),
                           lambda answer: self._set(answer) if answer else None)

    def _acknowledge(self) -> None:
        self.ports.work("acknowledge", self._send_acknowledge, group="guard",
                        label="acknowledging the guard's alarm")

    def _send_acknowledge(self) -> None:
        """Mark the alarm as seen on the box."""
        state = self.ports.state
        guard = acknowledge_alarm(state.need_transport(), state.need_run())
        self.ports.post(GuardRead(guard))
        self.ports.post(Done("guard alarm acknowledged (guard.json keeps it)"))

    def _leased(self) -> str | None:
        """The instance a lease would be for (``vast:4242``): one the user named."""
        return self.ports.state.instance_target()

    def _set(self, answer: GuardAnswer | None) -> None:
        self.ports.work("set_guard", lambda: self._send(answer), group="guard",
                        label="arming the guard" if answer else "disarming the guard")

    def _send(self, answer: GuardAnswer | None) -> None:
        """Arm with ``(when, then, max_hours, lease_seconds)`` (webhooks from
        ``[notify]`` in the config file; the lease set first, on this laptop and the
        box, as ``gpurent lease`` does), or disarm with ``None``."""
        state = self.ports.state
        spec = state.spec
        transport, run_dir = state.need_transport(), state.need_run()
        # As `gpurent guard` does: the named instance keeps the order, to arm it again
        # where the run moves.
        target = self._leased()
        leased = ""
        if answer is None:
            guard = disarm(transport, run_dir, record=target)
        else:
            when, then, hours, lease = answer
            name = spec.provider if spec.provider != "manual" else None
            # The guard acts with the instance's own key; the account key stays here.
            armed = arm(transport, run_dir, GuardOrder(when, then, hours,
                                                       base_url=spec.provider_url),
                        provider=name, instance=spec.instance,
                        url=spec.provider_url or (resolve_base_url(name) if name else None),
                        record=target, lease=None if lease is None or target is None
                        else (target, lease))
            guard = armed.guard
            if armed.lease is not None:
                leased = f"; {told_words(armed.lease, armed.told)}"
        self.ports.post(GuardRead(guard))
        self.ports.post(Done((guard.summary() if guard is not None else "guard: off") + leased))
