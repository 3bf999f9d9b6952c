"""The guard on one box: its badge (red while an alarm is not acknowledged), arming,
disarming and acknowledging, mixed into ``tui.box.actions.BoxActions``."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work
from textual.widgets import Static

from remote.billing import can_stop, notify_config, resolve_api_key, resolve_base_url
from remote.runs import acknowledge_alarm, arm_guard, disarm_guard
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.guard import GuardDialog
from tui.fmt import safe


class GuardActions:
    """The guard's part of a box view (a mixin: ``self`` is the ``BoxView``)."""

    guard: Any = None
    _alarm_told: Any = None

    def guard_text(self) -> Text:
        """The guard badge: off, its state, or its alarm in red until acknowledged."""
        guard = self.guard
        if guard is None:
            return Text("guard: off", style="dim")
        if guard.alarm_active:
            text = Text(" ⚠ GUARD ALARM ", style="bold white on red")
            text.append(" ")
            text.append_text(safe(guard.alarm.get("message"), 160, "bold red"))
            text.append("  (a: acknowledge)", style="dim")
            return text
        return safe(guard.summary(), 100, "bold yellow" if guard.watching else "dim")

    def _show_guard(self, guard: Any) -> None:
        """Show the guard's state (from the watcher's stream, or an action's answer)."""
        self.guard = guard
        self.query_one("#guard-badge", Static).update(self.guard_text())
        if guard is not None and guard.alarm_active and self._alarm_told != guard.alarm:
            self._alarm_told = guard.alarm  # tell once per alarm, loudly
            self.app.alert(f"GUARD ALARM: {guard.alarm.get('message')}", self.spec.title)

    def do_guard(self) -> None:
        """Acknowledge the alarm; else disarm (when armed, after confirming); else arm."""
        self.need_transport()
        self.need_run()
        guard = self.guard
        if guard is not None and guard.alarm_active:
            body = Text("The guard could not end the instance's billing as asked:\n\n")
            body.append_text(safe(guard.alarm.get("message"), 600, "bold red"))
            for step in (guard.steps or [])[-6:]:
                body.append("\n")
                body.append_text(safe(f"{step.get('at')}  {step.get('step')}: "
                                      f"{step.get('result')}", 300, "dim"))
            body.append("\n\nCheck the instance in the provider's console. Acknowledging "
                        "only clears the red badge; guard.json keeps the alarm.")
            self.app.push_screen(ConfirmDialog("Guard alarm", body, "Acknowledge"),
                                 lambda yes: self._acknowledge() if yes else None)
        elif guard is not None and guard.watching:
            body = safe(guard.summary(), 200)
            self.app.push_screen(ConfirmDialog("Disarm the guard", body, "Disarm"),
                                 lambda yes: self._guard(None) if yes else None)
        else:
            stoppable = not self.spec.provider or can_stop(self.spec.provider)
            self.app.push_screen(GuardDialog("Arm the guard", can_stop=stoppable),
                                 lambda answer: self._guard(answer) if answer else None)

    def _acknowledge(self) -> None:
        self.begin("acknowledge", "acknowledging the guard's alarm")
        self.acknowledge()

    def _guard(self, answer: tuple[str, str, float | None] | None) -> None:
        self.begin("set_guard", "arming the guard" if answer else "disarming the guard")
        self.set_guard(answer)

    @work(thread=True, exclusive=True, exit_on_error=False, group="guard", name="acknowledge")
    def acknowledge(self) -> None:
        """Mark the alarm as seen on the box."""
        state = acknowledge_alarm(self.need_transport(), self.need_run())
        self.app.call_from_thread(self._show_guard, state)
        self.app.call_from_thread(self.done, "guard alarm acknowledged (guard.json keeps it)")

    @work(thread=True, exclusive=True, exit_on_error=False, group="guard", name="set_guard")
    def set_guard(self, answer: tuple[str, str, float | None] | None) -> None:
        """Arm with ``(when, then, max_hours)`` (webhooks from ``[notify]`` in the
        config file), or disarm with ``None``."""
        transport, run_dir = self.need_transport(), self.need_run()
        if answer is None:
            state = disarm_guard(transport, run_dir)
        else:
            when, then, hours = answer
            provider = self.spec.provider if self.spec.provider != "manual" else None
            key = resolve_api_key(provider) if provider else None
            url = self.spec.provider_url or (resolve_base_url(provider) if provider else None)
            urls, fmt = notify_config()
            state = arm_guard(transport, run_dir, when, then, hours, provider,
                              self.spec.instance, key, base_url=url,
                              notify=urls, notify_format=fmt)
        self.app.call_from_thread(self._show_guard, state)
        summary = state.summary() if state is not None else "guard: off"
        self.app.call_from_thread(self.done, summary)
