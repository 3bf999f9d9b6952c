"""``Field``: Textual's ``Input`` whose editing keys act in the order they were typed.

``Input`` inserts a printable key as soon as the key reaches it, but its editing keys
(backspace, ctrl+u, end, the arrows…) are bindings, run only once the key has bubbled up
to the app: when the app's queue is busy (a loaded laptop, answers arriving from the box),
text typed after ``ctrl+u`` lands first and is then deleted with the rest (Textual issue
#6605). A ``Field`` runs its own bindings when the key reaches it, where printable keys are
handled, so ``ctrl+u`` then ``abc`` leaves ``abc``. Priority bindings (``ctrl+s``) are
checked by the app before any key reaches a widget, and keys an ``Input`` does not bind
(Escape) still bubble: only the order changes.

The same holds for moving on: Tab and shift+Tab are bindings of the screen, run once the
key has bubbled up, while the app hands every key typed meanwhile to the field that still
has the focus: ``Tab u x 9`` typed at paste speed put ``ux9`` into the field Tab was
leaving. A ``Field`` moves the focus itself when Tab reaches it, and a key that reaches it
once it has lost the focus goes on, in order, to the widget that has it now."""

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


#: Keys that move the focus, and the screen's action for each.
FOCUS_KEYS = {"tab": "focus_next", "shift+tab": "focus_previous"}


class Field(Input):
    """An ``Input`` whose editing keys, and the Tabs between fields, keep their place
    among the typed text."""

    async def _on_key(self, event: events.Key) -> None:
        # ``has_focus`` follows the Blur message, later: ask the screen whom it focuses.
        if self.screen.focused is not self:  # typed after a key that moved the focus away
            event.stop()
            event.prevent_default()
            target = self.app.focused or self.screen
            target.post_message(events.Key(event.key, event.character))
            return
        if event.key in FOCUS_KEYS:
            event.stop()
            event.prevent_default()
            getattr(self.screen, FOCUS_KEYS[event.key])()
            return
        await super()._on_key(event)  # the cursor's blink restarts; a printable is typed
        action = None if event.is_printable else EDIT_ACTIONS.get(event.key)
        if action is not None:
            event.stop()
            event.prevent_default()
            await self.run_action(action)
