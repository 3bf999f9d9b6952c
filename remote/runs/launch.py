"""Start a training run on the box, detached (``setsid nohup``) so that nothing on the
laptop can kill it, and show the exact command that runs.

Every user value is validated or shell-quoted: run names and argument keys must match
strict patterns, values are quoted with ``shlex.quote`` and may not hold control
characters. A secret for the run (the Hugging Face token) reaches it over the stdin of
the launching shell, which reads it into a shell variable: it is in no argv and no file,
and only the process that uploads holds it (our trainer with ``hub=`` on its stdin, a
push watcher in its environment; ``--hf-token`` alone exports it to our trainer).

The trainer starts through a python one-liner that puts SIGINT and SIGQUIT back to their
defaults before it execs the engine: a job started with ``&`` by a non-interactive shell
inherits both ignored, and SIGINT is LibreYOLO's only graceful stop. For an engine that
renames an existing run folder (LibreYOLO: ``name`` -> ``name2``) nothing is created in
``PROJECT/NAME``: its console log and pid sit beside it (``trainer.engines``), and
``hub=`` starts the box-side push watcher (``trainer push --watch``) instead of being
passed to an engine that has no such option.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
import shlex
import time
from dataclasses import dataclass, field

from remote.config import remember_hub_repo
from remote.link.tools import trainer_command
from remote.runs.read import read_status
from remote.transport.base import Transport, TransportError
from trainer import engines, runfiles, trainargs
from trainer.health import judge_health
from trainer.hub.client import REPO_RE, check_repo_id
from trainer.text import clean_text

ENGINES = engines.ENGINES
NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
KEY_RE = re.compile(r"[a-z_][a-z0-9_]*")
#: Keys the launcher sets itself from the spec.
RESERVED_KEYS = ("project", "name")
#: The launched pid, so that a run still starting (no status.json yet) is not launched twice.
PID_FILE = runfiles.LAUNCH_PID_FILE
#: The environment variable the secret read from stdin is exported as.
SECRET_ENV = "HF_TOKEN"
#: Tells our trainer that the first line of its stdin is the Hub token for ``hub=``
#: (``trainer.engine.command.TOKEN_STDIN_ENV``; a test keeps the two equal).
TOKEN_STDIN_ENV = "GPURENT_HUB_TOKEN_STDIN"
#: Run by the box's python before the engine: SIGINT and SIGQUIT back to their defaults
#: (a ``&`` job of a non-interactive shell starts with both ignored), then exec.
RESET_SIGNALS = ("import os,signal as s,sys;s.signal(s.SIGINT,s.SIG_DFL);"
                 "s.signal(s.SIGQUIT,s.SIG_DFL);os.execvp(sys.argv[1],sys.argv[1:])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class RunIsLive(Exception):
    """The run directory holds a run that is still going; the message says which."""


#: Arguments that name a file on the box (read from the login directory, as the doctor
#: reads ``data=``).
PATH_ARGS = ("data", "model")


@dataclass(frozen=True)
class LaunchSpec:
    """What to start: ``engine`` (``trainer`` or ``libreyolo``), the ``project``
    directory on the box, the run ``name`` (the run directory is ``project/name``) and
    ``key=value`` arguments in the style of ``libreyolo train``."""

    engine: str
    project: str
    name: str
    args: dict[str, str] = field(default_factory=dict)
    #: Hub repo the box-side push watcher sends the run's weights to (empty: none).
    push: str = ""
    #: Epochs between the watcher's milestone pushes of ``last.pt`` (0: a tenth of the run).
    push_period: int = 0

    @property
    def run_dir(self) -> str:
        """The run directory on the box."""
        return posixpath.join(self.project, self.name)

    @property
    def beside(self) -> bool:
        """Whether the launcher's files go beside the run (the engine renames folders)."""
        return self.engine in engines.RENAMING

    @property
    def pid_path(self) -> str:
        """Where the launched pid is recorded on the box."""
        return engines.launch_files(self.run_dir)[int(self.beside)][0]

    @property
    def console_path(self) -> str:
        """Where the run's stdout and stderr go on the box."""
        return engines.launch_files(self.run_dir)[int(self.beside)][1]


def make_spec(engine: str, project: str, name: str, args: dict[str, str]) -> LaunchSpec:
    """The spec for ``key=value`` arguments as a person gives them: for an engine without
    a ``hub=`` option (LibreYOLO) ``hub=REPO`` becomes the push watcher's repo and
    ``hub_period=N`` its milestone period. Raises ``ValueError`` for a bad period."""
    args = dict(args)
    if engine not in engines.RENAMING:
        return LaunchSpec(engine, project, name, args)
    push, period = args.pop("hub", ""), args.pop("hub_period", "0")
    if not period.isdigit():
        raise ValueError(f"hub_period must be a whole number of epochs, not "
                         f"{clean_text(period)!r}")
    return LaunchSpec(engine, project, name, args, push=push, push_period=int(period))


#: Arguments every engine reads as our trainer does (numbers of epochs and images, the
#: device's form): checked for any engine; other keys only for our trainer.
COMMON_ARGS = ("epochs", "batch", "save_period", "device")


def check_arg(engine: str, key: str, value: str) -> str:
    """Why ``engine`` would refuse ``key=value`` ("" when it would not, or when only the
    engine itself can tell): for our trainer its own rules (``trainer.trainargs``: the
    key known, the value's type and range); for another engine the arguments every
    engine reads alike, and an image size in whole pixels."""
    if engine == "trainer" or key in COMMON_ARGS:
        return trainargs.check(key, value)
    if key == "imgsz" and not (value.isdigit() and int(value) >= 32):
        return "must be a whole number of pixels, at least 32"
    return ""


@dataclass(frozen=True)
class LaunchResult:
    """A started run: its pid (also its process group), the command and its directory."""

    pid: int
    command: str
    run_dir: str
    #: Where ``launch.pid`` is (default: inside the run).
    pid_path: str = ""


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
    if spec.push:
        check_repo_id(spec.push)
        if spec.engine == "trainer":
            raise ValueError("our trainer pushes itself: give it hub=ORG/NAME")
    if spec.engine == "libreyolo" and _truthy(spec.args.get("resume")) \
            and "pretrained" in spec.args and not _truthy(spec.args["pretrained"]):
        raise ValueError("LibreYOLO refuses pretrained=False with resume=True: leave "
                         "pretrained= out when resuming")


def _resumes_last(spec: LaunchSpec) -> bool:
    resume = spec.args.get("resume")
    return resume is not None and resume.strip().lower() == "true" and "model" not in spec.args


def resume_checkpoint(transport: Transport, spec: LaunchSpec) -> str:
    """The checkpoint a LibreYOLO ``resume=True`` continues, relative to the project:
    ``last.pt``, unless the stop cut it short (``NAME.stop.json``); then the newest
    ``epoch_N.pt`` or ``best.pt`` that was not."""
    torn: set[str] = set()
    mark = engines.beside_path(spec.run_dir, engines.BESIDE_STOP)
    if transport.stat(mark) is not None:
        try:
            record = json.loads(transport.read(mark, 0, engines.MAX_MARK_BYTES))
            torn = set(record.get("torn") or [])
        except (ValueError, AttributeError, TypeError):
            torn = set()
    weights = posixpath.join(spec.run_dir, runfiles.WEIGHTS_DIR)
    names = [n for n in transport.listdir(weights) if n.endswith(".pt") and n not in torn]
    if "last.pt" not in torn or not names:
        chosen = "last.pt"
    else:
        dated = [(st.mtime, n) for n in names
                 if (st := transport.stat(posixpath.join(weights, n))) is not None]
        chosen = max(dated)[1] if dated else "last.pt"
    return posixpath.join(spec.name, runfiles.WEIGHTS_DIR, chosen)


def engine_args(spec: LaunchSpec, run_exists: bool = False) -> dict[str, str]:
    """The arguments the engine gets (before ``project=. name=N``). LibreYOLO resumes from
    a checkpoint named by ``model=`` (default ``NAME/weights/last.pt``) and, given
    ``project``/``name``, renames an existing folder unless ``exist_ok=True``: both are
    filled in when missing."""
    args = dict(spec.args)
    if spec.engine == "libreyolo":
        if _truthy(args.get("resume")) and args["resume"].strip().lower() == "true" \
                and "model" not in args:
            args["model"] = posixpath.join(spec.name, runfiles.WEIGHTS_DIR, "last.pt")
        if run_exists and "exist_ok" not in args:
            args["exist_ok"] = "True"
    return args


def build_command(spec: LaunchSpec, transport: Transport, *, read_secret: bool = False,
                  python: str = "python3", run_exists: bool = False) -> str:
    """The exact shell command that starts ``spec`` on the box and prints the pid.

    With ``read_secret`` the shell first reads one line of its stdin into ``HF_TOKEN``,
    never written anywhere: our trainer with ``hub=`` gets it on its own stdin (its
    uploader keeps it in memory; it is in no process's environment), our trainer without
    ``hub=`` (``--hf-token``) gets it exported, another engine never (only its push
    watcher does). Whatever pushes (our trainer with ``hub=``, the push watcher) starts
    with this laptop's ``HF_ENDPOINT`` (``remote.link.tools.trainer_command``).
    ``python`` runs :data:`RESET_SIGNALS`; ``run_exists``: the run folder is there
    already (see :func:`engine_args`). Raises ``ValueError`` on bad input."""
    validate(spec)
    project, name = shlex.quote(spec.project), shlex.quote(spec.name)
    hub = bool(spec.args.get("hub"))
    piped = read_secret and spec.engine == "trainer" and hub
    if spec.engine == "trainer":
        flag = f"{TOKEN_STDIN_ENV}=1 " if piped else ""
        program = f"env {flag}{trainer_command(transport, ['train'], hub=hub)}"
    else:
        program = "libreyolo train"
    words = [f"{key}={shlex.quote(value)}"
             for key, value in engine_args(spec, run_exists).items()]
    words += ["project=.", f"name={name}"]
    rel = {path: shlex.quote(posixpath.relpath(path, spec.project))
           for path in (spec.pid_path, spec.console_path)}
    pid, console = rel[spec.pid_path], rel[spec.console_path]
    made = shlex.quote(posixpath.dirname(posixpath.relpath(spec.pid_path, spec.project)))
    secret, feed, stdin = "", "", "< /dev/null "
    if read_secret:
        exported = not (spec.beside or piped)
        secret = f"IFS= read -r {SECRET_ENV}; " + (f"export {SECRET_ENV}; " if exported
                                                  else "")
    if piped:  # printf is the shell's own: the token is in no argv
        feed, stdin = f"printf '%s\\n' \"${SECRET_ENV}\" | ", ""
    reset = f"{shlex.quote(python)} -c {shlex.quote(RESET_SIGNALS)}"
    # The braces keep `&` to the one command (the last of a pipeline), so that $! is the
    # trainer's own pid (setsid does not fork when its caller is not a group leader;
    # nohup, python's execvp and env exec).
    return (f"mkdir -p {project}/{made} && cd {project} && {{ {secret}{feed}setsid nohup "
            f"{reset} {program} {' '.join(words)} > {console} 2>&1 {stdin}"
            f"& p=$!; echo \"$p\" > {pid}; {watch_command(spec, transport, read_secret)}"
            f"echo \"$p\"; }}")


def watch_command(spec: LaunchSpec, transport: Transport, read_secret: bool) -> str:
    """The shell words (ending in ``; ``) that start the push watcher for ``spec`` beside
    the trainer whose pid is in ``$p``; empty without ``spec.push``."""
    if not spec.push:
        return ""
    log = shlex.quote(posixpath.relpath(engines.beside_path(spec.run_dir, "push.log"),
                                        spec.project))
    token = f'{SECRET_ENV}="${SECRET_ENV}" ' if read_secret else ""
    words = ["push", "--watch", spec.name, "--repo", spec.push]
    if spec.push_period:
        words += ["--period", str(spec.push_period)]
    push = trainer_command(transport, words)
    return f'{token}setsid nohup env {push} --pid "$p" > {log} 2>&1 < /dev/null & '


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
        pid_path = spec.pid_path
        text = transport.read(pid_path, 0, 256) if transport.stat(pid_path) else b""
        pid = launch_pid(text)
        if pid is not None and transport.pid_alive(pid):
            raise RunIsLive(f"{where}: a run launched there (pid {pid}) is still "
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
            health = judge_health(read, now=time.time() if now is None else now)
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


def launch_run(transport: Transport, spec: LaunchSpec, stdin: bytes | None = None,
           python: str = "python3") -> LaunchResult:
    """Start ``spec`` detached on the box and return its pid and the command that ran.

    ``stdin``: one line holding the secret for the run (``HF_TOKEN``), or ``None``;
    ``python``: the box's python that resets the signals (see :data:`RESET_SIGNALS`).
    The run's Hub repository (``hub=``) is remembered as the user's
    (``remote.config.remember_hub_repo``)."""
    if stdin is not None:
        if b"\n" in stdin.rstrip(b"\n") or b"\0" in stdin:
            raise ValueError("the secret passed to the run must be one line")
        stdin = stdin.rstrip(b"\n") + b"\n"
    validate(spec)
    if spec.engine == "libreyolo" and _resumes_last(spec):
        spec = dataclasses.replace(spec, args={**spec.args,
                                               "model": resume_checkpoint(transport, spec)})
    exists = spec.beside and transport.stat(spec.run_dir) is not None
    command = build_command(with_box_paths(transport, spec), transport,
                            read_secret=stdin is not None, python=python, run_exists=exists)
    check_run_dir(transport, spec)
    result = transport.run(command, stdin=stdin, timeout=60.0)
    out = result.stdout.decode("utf-8", "replace").strip().splitlines()
    if not result.ok or not out or not out[-1].strip().isdigit():
        why = clean_text(result.stderr or result.stdout).strip() or f"exit {result.rc}"
        raise TransportError(f"launch failed: {' '.join(why.split())[:300]}")
    launched = LaunchResult(int(out[-1]), command, spec.run_dir, spec.pid_path)
    repo = spec.push or (spec.args.get("hub", "") if spec.engine == "trainer" else "")
    if REPO_RE.match(repo):
        remember_hub_repo(repo)  # the user's: its copies count as safe
    record_launch(transport, launched)
    return launched


def with_box_paths(transport: Transport, spec: LaunchSpec) -> LaunchSpec:
    """``spec`` with its paths absolute on the box, as the dataset doctor reads them: the
    project, and a relative ``data=`` or ``model=`` that names a file from the login
    directory. The launch ``cd``s into the project first, where a relative path would
    mean something else; a name that is no file there (a dataset or model an engine
    knows by name) is left as it is."""
    return apply_box_paths(spec, box_paths(transport, spec))


def box_paths(transport: Transport, spec: LaunchSpec) -> dict[str, str]:
    """``{relative path: absolute path on the box}`` for ``spec``'s project and for a
    relative ``data=``/``model=`` that names a file from the login directory (asks the
    box: one ``pwd`` per connection, one stat per path)."""
    known = {spec.project: transport.absolute(spec.project)}
    for key in PATH_ARGS:
        value = spec.args.get(key, "")
        if value and not value.startswith("/") and "://" not in value:
            there = transport.absolute(value)
            if transport.stat(there) is not None:
                known[value] = there
    return known


def apply_box_paths(spec: LaunchSpec, known: dict[str, str]) -> LaunchSpec:
    """``spec`` with the paths ``known`` (as ``box_paths`` finds them) made absolute:
    the launch and the TUI's command preview read the same paths."""
    args = {key: known.get(value, value) if key in PATH_ARGS else value
            for key, value in spec.args.items()}
    return dataclasses.replace(spec, project=known.get(spec.project, spec.project), args=args)


# ---------------------------------------------------------------------- the box's record


def launch_pid(text: bytes) -> int | None:
    """The pid in a ``launch.pid`` (``PID`` or ``PID START_TICKS BOOT_ID``)."""
    words = text.split()
    return int(words[0]) if words and words[0].isdigit() else None


def record_command(run_dir: str, pid: int, pid_path: str = "") -> str:
    """The shell command that completes the launch pid file (default ``RUN/launch.pid``)
    with the process's start time and boot id (``trainer.procid``: checked before any
    signal) and appends the run's absolute path to the box's registry of runs launched
    through gpurent, which the destroy check reads (``trainer safe --registry``). The run
    folder itself need not exist yet (an engine that renames creates it)."""
    parent, name = posixpath.split(run_dir.rstrip("/"))
    pid_file = shlex.quote(posixpath.relpath(pid_path or posixpath.join(run_dir, PID_FILE),
                                             parent or "."))
    q, pid = shlex.quote(parent or "."), int(pid)
    registry = runfiles.REGISTRY_SHELL
    return (f"cd -- {q} && d=\"$(pwd -P)\"/{shlex.quote(name)} && "
            f"s=$(sed 's/^.*) //' /proc/{pid}/stat 2>/dev/null | cut -d' ' -f20); "
            "b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null); "
            f'printf "%s %s %s\n" {pid} "$s" "$b" > {pid_file}.tmp && '
            f"mv -f {pid_file}.tmp {pid_file}; r={registry}; "
            'mkdir -p "$(dirname "$r")" && printf "%s\n" "$d" >> "$r"')


def record_launch(transport: Transport, result: LaunchResult) -> None:
    """Run ``record_command`` for a started run. Raises ``TransportError`` (the run is
    started all the same; the message says so)."""
    done = transport.run(record_command(result.run_dir, result.pid, result.pid_path),
                         timeout=30.0)
    if not done.ok:
        why = clean_text(done.stderr).strip() or f"exit {done.rc}"
        raise TransportError(f"launched pid {result.pid}, but could not register it on the "
                             f"box (a destroy may not see this run): {why[:200]}")
