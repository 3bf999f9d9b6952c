"""The ``modal`` client, reached the two ways a user has it: its CLI (``python -m modal``,
from the same environment as this app, so that the pinned version answers) for apps, and
its Python API for Volume reads (``remote.transport.volume``).

``modal`` is an optional extra: without it, every ``modal:`` target says how to install
it. The CLI's JSON (``modal app list --json``, ``modal container list --json``) is parsed;
its human text never is, except to pass an error's last line on to the user.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from remote.transport.base import NeedsSetup, TransportError
from trainer.text import clean_text, one_line

#: What to run when the ``modal`` client is missing.
INSTALL_HINT = ("the Modal client is not installed: pip install 'gpurent-tui[modal]' (or "
                "pipx inject gpurent-tui 'modal==1.6.4'), then `modal token new`")
#: How long one CLI call may take.
CLI_TIMEOUT = 60.0


class ModalError(TransportError):
    """The ``modal`` CLI failed; the message is its last line."""


def need_modal() -> None:
    """``NeedsSetup`` (saying how to install it) when the ``modal`` client is missing."""
    try:
        found = importlib.util.find_spec("modal") is not None
    except (ValueError, ImportError):  # hidden (sys.modules["modal"] = None) or broken
        found = False
    if not found:
        raise NeedsSetup(INSTALL_HINT)


def modal_command(*words: str) -> list[str]:
    """The argv that runs ``modal WORDS`` with this environment's client."""
    return [sys.executable, "-m", "modal", *words]


def run_modal(*words: str, timeout: float = CLI_TIMEOUT) -> str:
    """Run ``modal WORDS`` and return its stdout; ``ModalError`` with the last line of
    its output when it fails."""
    need_modal()
    try:
        done = subprocess.run(modal_command(*words), capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL, env=_env())
    except subprocess.TimeoutExpired as exc:
        raise ModalError(f"modal {words[0]} {words[1] if len(words) > 1 else ''} did not "
                         f"answer in {timeout:g}s") from exc
    if done.returncode != 0:
        raise ModalError(last_line(done.stderr or done.stdout) or
                         f"modal {' '.join(words[:2])} exited {done.returncode}")
    return done.stdout


def _env() -> dict[str, str]:
    # Rich's box drawing and colours are not parsed; keep the output plain.
    return dict(os.environ, NO_COLOR="1", TERM="dumb", COLUMNS="200")


def last_line(text: str) -> str:
    """The last non-empty line of ``text``, cleaned for showing, without "Error:"."""
    lines = [ln.strip(" │╭╰─╮╯") for ln in text.splitlines()]
    lines = [ln for ln in lines if ln.strip()]
    return one_line(clean_text(lines[-1]), 400).removeprefix("Error: ") if lines else ""


@dataclass(frozen=True)
class AppRow:
    """One app of ``modal app list``: its id, name, state, running tasks, and when it
    was created and stopped (epoch seconds; ``None`` when not)."""

    app_id: str
    name: str
    state: str
    tasks: int
    created_at: float | None
    stopped_at: float | None

    @property
    def running(self) -> bool:
        """Whether Modal still runs the app (not stopped or stopping)."""
        return self.state not in ("stopped", "stopping", "disabled")


def list_apps() -> list[AppRow]:
    """Every app of the account's environment, as ``modal app list --json`` tells."""
    rows = json.loads(run_modal("app", "list", "--json") or "[]")
    return [_row(r) for r in rows if isinstance(r, dict)]


def _row(r: dict[str, Any]) -> AppRow:
    tasks = str(r.get("tasks") or "0")
    return AppRow(str(r.get("app_id", "")), str(r.get("description", "")),
                  str(r.get("state", "")), int(tasks) if tasks.isdigit() else 0,
                  _moment(r.get("created_at")), _moment(r.get("stopped_at")))


def _moment(text: Any) -> float | None:
    from datetime import datetime

    if not isinstance(text, str) or not text.strip():
        return None
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        return None


def find_app(app_id: str) -> AppRow | None:
    """App ``app_id`` as the account lists it, or ``None`` when not listed."""
    return next((a for a in list_apps() if a.app_id == app_id), None)


def app_containers(app_id: str) -> list[str]:
    """The ids of app ``app_id``'s running containers (``modal container list``)."""
    rows = json.loads(run_modal("container", "list", "--app-id", app_id, "--json") or "[]")
    return [str(r.get("container_id", "")) for r in rows
            if isinstance(r, dict) and r.get("app_id") == app_id]


def stop_app(app_id: str) -> None:
    """``modal app stop -y APP_ID``: Modal ends the app's containers."""
    run_modal("app", "stop", "-y", app_id)


def app_logs(app_id: str, tail: int = 200) -> str:
    """The last ``tail`` lines the app's containers printed (``modal app logs``)."""
    return run_modal("app", "logs", "-n", str(tail), app_id)
