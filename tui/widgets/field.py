"""``Field``: Textual's ``Input`` whose editing keys act in the order they were typed.

``Input`` inserts a printable key as soon as the key reaches it, but its editing keys
(backspace, ctrl+u, end, the arrows…) are bindings, run only once the key has bubbled up
to the app: when the app's queue is busy (a loaded laptop, answers arriving from the box),
text typed after ``ctrl+u`` lands first and is then deleted with the rest (Textual issue
#6605). A ``Field`` runs its own bindings when the key reaches it, where printable keys are
handled, so ``ctrl+u`` then ``abc`` leaves ``abc``. Priority bindings (``ctrl+s``) are
checked by the app before any key reaches a widget, and keys an ``Input`` does not bind
(Tab, Escape) still bubble: only the order changes."""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.widgets import Input

#: Key -> action of every binding ``Input`` declares (``"home,ctrl+a"`` is two keys).
EDIT_ACTIONS: dict[str, str] = {
    key.strip(): binding.action
    for binding in Input.BINDINGS if isinstance(binding, Binding)
    for key in binding.key.split(",")
}


class Field(Input):
    """An ``Input`` whose editing keys keep their place among the typed text."""

    async def _on_key(self, event: events.Key) -> None:
        await super()._on_key(event)  # the cursor's blink restarts; a printable is typed
        action = None if event.is_printable else EDIT_ACTIONS.get(event.key)
        if action is not None:
            event.stop()
            event.prevent_default()
            await self.run_action(action)
