"""Connecting to a box, one way for the headless CLI and the TUI: open SSH (or use this
machine), bootstrap our trainer on the first connection, and remember where it went so
that reconnects (the watcher's, after a drop) skip the bootstrap. A box named by its
instance (``vast:4242``) is located again on every connection: its address changes when
it is stopped and started.

A ``lazy`` connector does not bootstrap when it opens: its first box-side tool goes
through the gate (``remote.link.gate``: one exec that installs, checks and starts the tool)
and the tool's answer (the follower's ``hello``) says where the trainer runs. That is how
the TUI shows a run after one round trip on the link."""

from __future__ import annotations

import contextlib
import shlex
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from remote.link.early import EarlyLink
from remote.transport.base import (
    NamedBox,
    NeedsSetup,
    RunResult,
    Stream,
    Transport,
    TransportError,
)
from trainer.text import one_line

#: ``ask(host, key_type, fingerprint) -> bool``: whether to trust an unknown host key.
AskHostKey = Callable[[str, str, str], bool]
#: ``locate(progress) -> NamedBox``: where the box answers SSH right now, by its name.
Locate = Callable[[Callable[[str], None]], NamedBox]


def _quiet(_line: str) -> None:
    return None


@dataclass
class Connector:
    """Opens connections to one box, ready to run ``python3 -m trainer``.

    ``host`` is ``None`` for this machine. With ``bootstrap`` the first connection
    uploads the trainer (:mod:`remote.link.bootstrap`) and later ones reuse its
    ``trainer_prefix``. A bootstrap that fails raises when ``strict``; otherwise it is
    noted and the plain prefix is kept (the watcher then polls files over SFTP).

    With ``locate`` (a box named by its instance: ``host`` is ``vast:4242``), each
    connection first asks where the box is, then connects with what ``~/.ssh/config``
    says for that name (``Host vast:*``); its host key is filed under ``host``."""

    host: str | None
    port: int | None = None
    accept_new: bool = False
    ask_unknown: AskHostKey | None = None
    #: More keyword arguments of ``remote.transport.ssh.connect`` (identity files...).
    ssh_options: Mapping[str, Any] = field(default_factory=dict)
    bootstrap: bool = True
    strict: bool = True
    timeout: float = 15.0
    #: Where each step is reported when ``open`` is given no ``progress``.
    note: Callable[[str], None] = _quiet
    #: The python to run the trainer with on the box (``--python``); else the config
    #: file's ``[hosts."HOST"] python``, else bootstrap chooses.
    python: str | None = None
    #: Set by the first successful connection (``None`` until then).
    trainer_prefix: str | None = None
    locate: Locate | None = None
    #: Leave bootstrapping to the first tool run through the gate (see the module doc).
    lazy: bool = False
    #: What the follower's ``hello`` said about the install (``trainer.watch.boxinfo``).
    box: dict[str, Any] | None = None
    _ready: threading.Event = field(default_factory=threading.Event, repr=False)
    _early: EarlyLink | None = field(default=None, repr=False)

    def __call__(self) -> Transport:
        """A new connection (see :meth:`open`)."""
        return self.open()

    def open(self, progress: Callable[[str], None] | None = None,
             notes: list[str] | None = None, *, early: bool = True,
             gate: bool = False) -> Transport:
        """A new connection to the box; blocks, so call it from a worker thread.
        ``progress`` gets each step; what bootstrap found goes to ``notes`` when given,
        else to ``progress``. ``early``: take the connection ``remote.link.early`` opened
        for this box, if any. ``gate``: its caller starts its tool through the gate, so
        no bootstrap here (as for a ``lazy`` connector)."""
        say = progress or self.note
        if self.host is None:
            from remote.transport.local import LocalTransport

            return LocalTransport()
        from remote.transport import ssh  # paramiko loads only when a box is remote

        target: str | NamedBox = self.host
        port, options = self.port, dict(self.ssh_options)
        taken = None
        try:
            if self.locate is not None:
                target, port = self.locate(say), None
            elif early and self._early is not None:
                taken = self._early.take()
            transport = taken or ssh.connect(
                target, port=port, accept_new=self.accept_new, ask_unknown=self.ask_unknown,
                timeout=self.timeout, progress=say, **options)
        except BaseException:
            self._ready.set()  # whoever waits for the prefix need not wait for this one
            raise
        if self.trainer_prefix is not None:
            transport.trainer_prefix = self.trainer_prefix
            return transport
        if not self.bootstrap or self.lazy or gate:
            return transport
        from remote.config import host_python
        from remote.link.bootstrap import bootstrap_box

        try:
            python = self.python or host_python(self.host)
            # Preflight (torch, a CUDA kernel) takes seconds: callers run it later.
            result = bootstrap_box(transport, progress=say, preflight=False, python=python)
        except (TransportError, ValueError) as exc:  # ValueError: a bad config file
            if self.strict:
                transport.close()
                raise
            say(f"bootstrap: {exc}")
        else:
            if notes is not None:
                notes.extend(result.notes)
            else:
                for line in result.notes:
                    say(line)
        self.trainer_prefix = transport.trainer_prefix
        return transport

    # ------------------------------------------------------------------ early

    def start_early(self, words: list[str],
                    prepare: Callable[[], object] | None = None) -> None:
        """Open the first connection now, in a thread, and start ``python -m trainer
        WORDS`` on it through the gate (``remote.link.early``); the next :meth:`open`
        takes the connection and :meth:`take_stream` the stream. ``prepare`` runs while
        SSH waits on the link, beside the gate's own preparation (its package name and
        tarball). Not for this machine, nor for a box located through its provider."""
        if self.host is None or self.locate is not None or self._early is not None:
            return
        host, port, options = self.host, self.port, dict(self.ssh_options)
        lock, made = threading.Lock(), {}

        def name() -> str:
            with lock:
                if "name" not in made:
                    from remote.link import gate

                    made["name"] = gate.install_name()
                    gate.tarball()  # read now, in case the box does not hold it
                return made["name"]

        def prepared() -> None:
            name()
            if prepare is not None:
                prepare()

        def connect() -> Transport:
            from remote.transport import ssh

            return ssh.connect(host, port=port, accept_new=self.accept_new,
                               ask_unknown=None, timeout=self.timeout, **options)

        self._early = EarlyLink()
        self._early.start(connect, prepare=prepared, first=lambda transport: self.command(
            transport, words, merge_stderr=True, name=name()))

    def take_stream(self, transport: Transport, command: str) -> Stream | None:
        """The stream :meth:`start_early` started on ``transport`` for exactly
        ``command`` (once), or ``None``."""
        return None if self._early is None else self._early.take_stream(transport, command)

    # ------------------------------------------------------------------ the gate

    def gated(self) -> bool:
        """Whether the next tool command goes through the gate."""
        return self.host is not None and self.bootstrap and self.trainer_prefix is None

    def command(self, transport: Transport, words: list[str], *, merge_stderr: bool = False,
                name: str | None = None) -> tuple[str, bytes | None]:
        """The command (and its stdin) that runs ``python -m trainer ...`` (``words``
        start with ``-m``) on ``transport``'s box: plain once the prefix is known, else
        the gate, with the package on stdin when this box is not remembered to hold it.
        ``name``: the package's ``install_name()`` when the caller made it already."""
        if not self.gated():
            prefix = self.trainer_prefix or transport.trainer_prefix
            return f"{prefix} {shlex.join(words)}" + (" 2>&1" if merge_stderr else ""), None
        from remote import config
        from remote.link import gate
        from remote.link.bootstrap import box_id

        known = config.remembered(box_id(transport))
        python = self.python or config.host_python(self.host) or known.get("python")
        name = name or gate.install_name()
        ship = known.get("trainer") != name
        return (gate.script(words, python if isinstance(python, str) else None, ship=ship,
                            merge_stderr=merge_stderr, name=name),
                gate.tarball() if ship else None)

    def boot(self, transport: Transport, probe: str,
             progress: Callable[[str], None] | None = None,
             notes: list[str] | None = None) -> None:
        """Bootstrap with the probe the gate printed (no exec of its own unless the
        package must be uploaded); then tools run with the plain prefix. Raises
        ``TransportError`` (no usable python, the upload failed) after telling whoever
        waits in :meth:`wait_ready`."""
        from remote.config import host_python
        from remote.link.bootstrap import bootstrap_box

        try:
            result = bootstrap_box(transport, progress or self.note, preflight=False,
                               install=False, probe=probe,
                               python=self.python or host_python(self.host))
        except (TransportError, ValueError):
            self._ready.set()
            raise
        if notes is not None:
            notes.extend(result.notes)
        self.trainer_prefix = transport.trainer_prefix

    def learned(self, transport: Transport, box: Any) -> None:
        """The follower's ``hello`` named its install (``box``): remember it, and build
        the prefix from it when none is known yet."""
        if not isinstance(box, dict) or not all(isinstance(box.get(k), str) and
                                                box[k].startswith("/")
                                                for k in ("python", "dir")):
            return
        self.box = box
        if self.trainer_prefix is None and self.host is not None:
            from remote.config import host_python
            from remote.link.bootstrap import LAUNCHER_NAME

            q = shlex.quote
            self.trainer_prefix = (f"PYTHONPATH={q(box['dir'])} {q(box['python'])} "
                                   f"{q(box['dir'] + '/' + LAUNCHER_NAME)}")
            forced = self.python or host_python(self.host)
            self._remember(transport, **({} if forced else {"python": box["python"]}))
        self._ready.set()

    def give_up(self) -> None:
        """No tool will learn the prefix (the box has no usable python): stop waiting."""
        self._ready.set()

    def wait_ready(self, timeout: float) -> bool:
        """Wait until the prefix is known, known to be out of reach, or a connection
        failed; whether it is known."""
        if self.host is None or not self.bootstrap:
            return True
        self._ready.wait(timeout)
        return self.trainer_prefix is not None

    def run_tool(self, transport: Transport, words: list[str], *,
                 timeout: float = 120.0, stdin: bytes | None = None) -> RunResult:
        """Run ``python -m trainer ...`` once through the gate (twice the first time a
        box is met: the gate's probe, then the tool) and return its result."""
        from remote.link import gate

        shipped = self.gated()
        command, payload = self.command(transport, words)
        if payload is not None and stdin is not None:
            raise ValueError("a tool with its own stdin cannot ship the package")
        result = transport.run(command, stdin=payload or stdin, timeout=timeout)
        probe = gate.booting(result.stdout) if shipped else None
        if probe is not None:
            self.boot(transport, probe)
            command, _ = self.command(transport, words)
            return transport.run(command, stdin=stdin, timeout=timeout)
        if shipped and payload is not None:
            self._remember(transport)
        return result

    @staticmethod
    def _remember(transport: Transport, **facts: str) -> None:
        """Remember that the box holds this install (and ``facts``), when news."""
        from remote import config
        from remote.link.bootstrap import box_id, install_name

        memory = box_id(transport)
        facts["trainer"] = install_name()
        known = config.remembered(memory)
        if any(known.get(k) != v for k, v in facts.items()):
            with contextlib.suppress(OSError):  # read-only: the package ships again
                config.remember(memory, **facts)

#: Seconds between tries of a first connection that failed (a box still booting): the
#: n-th wait is ``RETRY_DELAYS[min(n, len - 1)]``.
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


def retry_delay(attempt: int) -> float:
    """How long to wait before try ``attempt + 1`` of a first connection (0-based)."""
    return RETRY_DELAYS[min(max(attempt, 0), len(RETRY_DELAYS) - 1)]


#: Long enough for any error a connection raises: those end with the command that fixes
#: them (``ssh-keygen -R NAME -f FILE``), which must never be cut.
WHOLE_LIMIT = 4000


def whole_line(error: BaseException) -> str:
    """``error`` as one line for a person, not cut where a short line would cut it."""
    return one_line(error, WHOLE_LIMIT)


def changed_host_key(error: BaseException) -> tuple[str, str] | None:
    """For a host key that changed: the name its old key is filed under and the
    ``known_hosts`` file (``remote.transport.hostkeys.forget_host_key`` forgets it);
    ``None`` for any other error."""
    hostkeys = sys.modules.get("remote.transport.hostkeys")
    if hostkeys is None or not isinstance(error, hostkeys.HostKeyChanged) or not error.name:
        return None
    return error.name, error.known_hosts


def worth_retrying(error: BaseException) -> bool:
    """Whether trying the same connection again may work: a box that is booting, a
    network that is down. A host key that changed or was refused is never retried (it
    needs a person), nor is a bad local setting (an ssh config that does not parse, a
    provider's API key that is missing or refused, a login the box refused the keys of:
    ``NeedsSetup``)."""
    if isinstance(error, NeedsSetup):
        return False
    # Only an SSH connection can raise these, and it has loaded the module (which
    # imports paramiko: not worth loading for a local box).
    hostkeys = sys.modules.get("remote.transport.hostkeys")
    if hostkeys is not None and isinstance(error, hostkeys.HostKeyChanged
                                           | hostkeys.HostKeyUnknown):
        return False
    return isinstance(error, TransportError | OSError | TimeoutError | EOFError) \
        and "ssh config" not in str(error)


_LINK_WORDS = ("connection to", "was lost", "is closed", "not active", "timed out",
               "no answer within", "eof", "broken pipe", "connection reset")


def link_broken(error: BaseException, transport: object | None = None) -> bool:
    """Whether ``error`` (raised by an action on ``transport``) means the link to the box
    is gone, rather than the action failing on a working link: then reconnecting, not
    changing the request, is the next step."""
    if transport is not None and getattr(transport, "is_active", True) is False:
        return True
    if isinstance(error, TimeoutError | EOFError | ConnectionError):
        return True
    if not isinstance(error, TransportError):
        return False
    text = str(error).lower()
    return any(word in text for word in _LINK_WORDS)
