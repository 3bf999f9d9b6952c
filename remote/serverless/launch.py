"""``gpurent launch modal:APP ...``: generate the app file, run ``modal run --detach``
until the function is spawned, and record the app in the laptop's intents.

``modal run --detach`` streams the app's logs until it stops; the launcher reads its
output only until the app says it spawned the function (the app id comes with that
line), then ends the CLI: a detached app keeps running without it, so a laptop that
sleeps or quits during the run leaves it running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from remote.billing.intents import RunIntent, want_running
from remote.config import state_path
from remote.serverless.appfile import SPAWNED, ModalSpec, render
from remote.serverless.client import ModalError, _env, last_line, modal_command, need_modal
from remote.serverless.record import note_app

#: How long a launch waits for the app to spawn its function (image builds included).
SPAWN_WAIT = 600.0


@dataclass(frozen=True)
class ModalLaunch:
    """A launched app: its id, the app file, and the CLI's output up to the spawn."""

    app_id: str
    app_file: Path
    output: str


def app_file_path(app: str) -> Path:
    """Where the laptop keeps app ``app``'s generated file."""
    return state_path().parent / "modal" / f"{app}.py"


def write_app_file(spec: ModalSpec) -> Path:
    """Write ``spec``'s app file (mode 0600) and return its path."""
    path = app_file_path(spec.app)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render(spec), encoding="utf-8")
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)
    return path


def launch_modal(spec: ModalSpec, wait: float = SPAWN_WAIT) -> ModalLaunch:
    """Launch ``spec`` on Modal, detached, and record it (the laptop's intents);
    ``ModalError`` (one line) when the app does not spawn its function (the CLI's last
    words), ``NeedsSetup`` without the client."""
    launched = spawn_app(spec, wait)
    want_running(f"modal:{spec.app}", RunIntent(spec.run, spec.project, spec.hub))
    note_app(spec, launched.app_id, time.time())
    return launched


def spawn_app(spec: ModalSpec, wait: float = SPAWN_WAIT) -> ModalLaunch:
    """Write ``spec``'s app file and run it with ``modal run --detach`` until its
    function is spawned; nothing is recorded (see :func:`launch_modal`)."""
    need_modal()
    path = write_app_file(spec)
    proc = subprocess.Popen(modal_command("run", "--detach", str(path)), env=_env(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)
    lines: list[str] = []
    found: list[str] = []
    done = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace")
            lines.append(line)
            words = line.split()
            if len(words) >= 2 and words[0] == SPAWNED and not found:
                found.append(words[1])
                done.set()
        done.set()

    reader = threading.Thread(target=read, daemon=True, name=f"modal run {spec.app}")
    reader.start()
    done.wait(wait)
    _end(proc)
    output = "".join(lines)
    if not found:
        raise ModalError(f"modal run did not start {spec.app}: "
                         f"{last_line(output) or 'no output'}")
    return ModalLaunch(found[0], path, output)


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End the ``modal run`` CLI (its app, detached, goes on)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
            proc.wait(15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
