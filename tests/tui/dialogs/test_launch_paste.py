"""Issue 38, item 10: keys typed at paste speed in the launch form apply in order. ``Tab u
x 9 Tab Tab 7 7`` sent at once puts ``ux9`` into ``name`` and ``77`` into ``epochs``
(not everything into ``data``, the field the first Tab was leaving): in a real terminal
(tmux, one ``send-keys`` for all eight keys), and in process with the eight keys queued
before the app handles the first."""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path

import pytest
from textual import events
from textual.widgets import Input

from tests.fixtures.paths import ROOT
from tests.fixtures.pilot import local_app, quiet_env, shown, until  # noqa: F401 (autouse)
from tests.fixtures.tui_terminal_kit import Tmux
from tui.dialogs.launch import LaunchForm

KEYS = ("Tab", "u", "x", "9", "Tab", "Tab", "7", "7")


def rows(screen: str) -> dict[str, str]:
    """The launch form's rows on ``screen``: label -> what the field shows."""
    found = {}
    for label in ("data *", "name *", "model", "epochs"):
        match = re.search(rf"(?m)\s{re.escape(label)}\s+(.*?)\s*█", screen)
        found[label] = match.group(1) if match else ""
    return found


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_keys_pasted_into_the_launch_form_land_in_their_fields(tmp_path: Path) -> None:
    project = tmp_path / "runs"
    project.mkdir()
    tmux = Tmux(tmp_path)
    try:
        tmux.start(f"env HOME={tmp_path} PYTHONPATH={ROOT} TERM=xterm-256color "
                   f"{sys.executable} -m tui.main --local {project}")
        tmux.wait_for("l launch")
        tmux("send-keys", "-t", "t", "l")
        tmux.wait_for("data is required", "name *       exp1", "epochs       30")
        tmux("send-keys", "-t", "t", *KEYS)  # one write: as fast as a paste
        end = time.monotonic() + 30
        while (found := rows(tmux("capture-pane", "-p", "-t", "t")))["epochs"] != "77":
            assert time.monotonic() < end, found
            time.sleep(0.2)
        assert found == {"data *": "path to data.yaml on the box (required)",
                         "name *": "ux9", "model": "n", "epochs": "77"}
    finally:
        tmux.close()


@pytest.mark.anyio
async def test_keys_queued_at_once_apply_in_order(tmp_path: Path) -> None:
    project = tmp_path / "runs"
    project.mkdir()
    app = local_app(project)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        assert app.focused.id == "f-data"
        for key in KEYS:  # all queued before the first is handled
            app.post_message(events.Key(key.lower(), None if key == "Tab" else key))
        await until(pilot, lambda: form.query_one("#f-epochs", Input).value == "77")
        values = {k: form.query_one(f"#f-{k}", Input).value for k in ("data", "name", "model")}
        assert values == {"data": "", "name": "ux9", "model": "n"}
