"""Start a training run on the box, detached (``setsid nohup``) so that nothing on the
laptop can kill it, and show the exact command that runs.

Every user value is validated or shell-quoted: run names and argument keys must match
strict patterns, values are quoted with ``shlex.quote`` and may not hold control
characters. A secret for the run (the Hugging Face token) reaches it over the stdin of
the launching shell, which reads it into the environment: it is in no argv and no file.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import time
from dataclasses import dataclass, field

from remote.runs import LAUNCH_PID_FILE, read_status
from remote.transport.base import Transport, TransportError
from trainer import runfiles
from trainer.text import clean_text

ENGINES = ("trainer", "libreyolo")
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
KEY_RE = re.compile(r"[a-z_][a-z0-9_]*")
#: Keys the launcher sets itself from the spec.
RESERVED_KEYS = ("project", "name")
#: The console output of the run (stdout and stderr), inside the run directory.
CONSOLE_LOG = "console.log"
#: The launched pid, so that a run still starting (no status.json yet) is not launched twice.
PID_FILE = LAUNCH_PID_FILE
#: The environment variable the secret read from stdin is exported as.
SECRET_ENV = "HF_TOKEN"
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RunIsLive(Exception):
    """The run directory holds a run that is still going; the message says which."""


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: ``engine`` (``trainer`` or ``libreyolo``), the ``project``
    directory on the box, the run ``name`` (the run directory is ``project/name``) and
    ``key=value`` arguments in the style of ``libreyolo train``."""

    engine: str
    project: str
    name: str
    args: dict[str, str] = field(default_factory=dict)

    @property
    def run_dir(self) -> str:
        """The run directory on the box."""
        return posixpath.join(self.project, self.name)


@dataclass(frozen=True)
class LaunchResult:
    """A started run: its pid (also its process group), the command and its directory."""

    pid: int
    command: str
    run_dir: str


def validate(spec: LaunchSpec) -> None:
    """Raise ``ValueError`` with a one-line message when any part of ``spec`` is unsafe
    or malformed."""
    if spec.engine not in ENGINES:
        raise ValueError(f"engine must be one of {', '.join(ENGINES)}, "
                         f"not {clean_text(spec.engine)!r}")
    if not NAME_RE.fullmatch(spec.name) or ".." in spec.name or len(spec.name) > 128:
        raise ValueError(f"run name {clean_text(spec.name)!r} is not allowed: use up to 128 "
                         "letters, digits, '.', '_' and '-', not starting with '.' or '-'")
    project = spec.project
    if not project or _CONTROL.search(project):
        raise ValueError("the project directory must be a non-empty path without control "
                         "characters")
    if project.startswith(("-", "~")):
        raise ValueError(f"project {clean_text(project)!r}: use an absolute path or one "
                         "relative to the login directory (no leading '-' or '~')")
    for key, value in spec.args.items():
        if not KEY_RE.fullmatch(key):
            raise ValueError(f"argument key {clean_text(key)!r} is not allowed: use "
                             "lowercase letters, digits and '_'")
        if key in RESERVED_KEYS:
            raise ValueError(f"{key}= is set from the launch target and the run name")
        if not isinstance(value, str) or _CONTROL.search(value):
            raise ValueError(f"value of {key}= must be text without control characters "
                             "(newlines, tabs, escapes)")


def build_command(spec: LaunchSpec, transport: Transport, *, read_secret: bool = False) -> str:
    """The exact shell command that starts ``spec`` on the box and prints the pid.

    With ``read_secret`` the shell first reads one line of its stdin into ``HF_TOKEN``
    (exported to the run, never written anywhere). Raises ``ValueError`` on bad input."""
    validate(spec)
    project, name = shlex.quote(spec.project), shlex.quote(spec.name)
    if spec.engine == "trainer":
        program = f"env {transport.trainer_prefix} -m trainer train"
    else:
        program = "libreyolo train"
    words = [f"{key}={shlex.quote(value)}" for key, value in spec.args.items()]
    words += ["project=.", f"name={name}"]
    secret = f"IFS= read -r {SECRET_ENV}; export {SECRET_ENV}; " if read_secret else ""
    # The braces keep `&` to the one command, so that $! is the trainer's own pid
    # (setsid does not fork when its caller is not a group leader, nohup and env exec).
    return (f"mkdir -p {project}/{name} && cd {project} && {{ {secret}setsid nohup "
            f"{program} {' '.join(words)} > {name}/{CONSOLE_LOG} 2>&1 < /dev/null "
            f"& echo $! > {name}/{PID_FILE}; echo $!; }}")


def check_run_dir(transport: Transport, spec: LaunchSpec, now: float | None = None) -> None:
    """Refuse a run directory that is in use.

    ``RunIsLive`` when it holds a run that is still going (status running and its pid
    alive, or without a pid, updated recently). ``ValueError`` when it holds an earlier
    run and the arguments say neither ``exist_ok`` nor ``resume``: the trainer would
    then pick ``name2`` and the run would not be where the launcher looks for it."""
    path = posixpath.join(spec.run_dir, runfiles.STATUS_FILE)
    where = clean_text(spec.run_dir)
    held = transport.stat(path) is not None or transport.stat(
        posixpath.join(spec.run_dir, runfiles.METRICS_FILE)) is not None
    if not held:
        pid_path = posixpath.join(spec.run_dir, PID_FILE)
        text = transport.read(pid_path, 0, 64) if transport.stat(pid_path) else b""
        if text.strip().isdigit() and transport.pid_alive(int(text)):
            raise RunIsLive(f"{where}: a run launched there (pid {int(text)}) is still "
                            "starting; stop it or pick another name")
        return
    read = read_status(transport, spec.run_dir)
    if read.get("state") == "running":
        pid = read.get("pid")
        if isinstance(pid, int) and not isinstance(pid, bool):
            if transport.pid_alive(pid):
                raise RunIsLive(f"{where} holds a live run (pid {pid}, epoch "
                                f"{read.get('completed_epochs') or 0}/"
                                f"{read.get('total_epochs') or '?'}); stop it or pick "
                                "another name")
        else:
            health = runfiles.judge_health(read, now=time.time() if now is None else now)
            if health.verdict in ("live", "slow"):
                raise RunIsLive(f"{where} holds a run that looks live ({health.reason}; "
                                "its status names no pid to check); stop it or pick "
                                "another name")
    if not any(_truthy(spec.args.get(key)) for key in ("exist_ok", "resume")):
        state = read.get("state") or "unknown"
        raise ValueError(f"{where} holds an earlier run (state {clean_text(str(state))}); "
                         "pick another name, or add resume=True to continue it or "
                         "exist_ok=True to start over in it")


def _truthy(value: str | None) -> bool:
    return value is not None and value.strip().lower() not in ("", "0", "false", "no",
                                                                "off", "none")


def launch(transport: Transport, spec: LaunchSpec, stdin: bytes | None = None) -> LaunchResult:
    """Start ``spec`` detached on the box and return its pid and the command that ran.

    ``stdin``: one line holding the secret for the run (``HF_TOKEN``), or ``None``."""
    if stdin is not None:
        if b"\n" in stdin.rstrip(b"\n") or b"\0" in stdin:
            raise ValueError("the secret passed to the run must be one line")
        stdin = stdin.rstrip(b"\n") + b"\n"
    command = build_command(spec, transport, read_secret=stdin is not None)
    check_run_dir(transport, spec)
    result = transport.run(command, stdin=stdin, timeout=60.0)
    out = result.stdout.decode("utf-8", "replace").strip().splitlines()
    if not result.ok or not out or not out[-1].strip().isdigit():
        why = clean_text(result.stderr or result.stdout).strip() or f"exit {result.rc}"
        raise TransportError(f"launch failed: {' '.join(why.split())[:300]}")
    return LaunchResult(int(out[-1]), command, spec.run_dir)
