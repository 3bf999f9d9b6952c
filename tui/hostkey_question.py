"""An unknown host key met by a worker thread outside a box tab (the fleet's move to a new
box): the host-key dialog is shown on the UI thread and the worker waits for the answer,
as a box tab's ``tui.box.link.Link.ask_host_key`` does, instead of failing with "pass
--accept-new"."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from tui.dialogs.confirm import host_key_dialog


def host_key_asker(app: Any) -> Callable[[str, str, str], bool]:
    """A connector's ``ask_unknown`` that asks the user of ``app`` (from a worker
    thread; ``False`` when the app ends before an answer)."""

    def ask(host: str, key_type: str, fingerprint: str) -> bool:
        answered = threading.Event()
        answer = [False]

        def done(result: bool | None) -> None:
            answer[0] = bool(result)
            answered.set()

        app.call_from_thread(app.push_screen, host_key_dialog(host, key_type, fingerprint),
                             done)
        while not answered.wait(0.2):
            if not app.is_running:
                return False
        return answer[0]

    return ask
