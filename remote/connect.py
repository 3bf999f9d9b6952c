"""Connecting to a box, one way for the headless CLI and the TUI: open SSH (or use this
machine), bootstrap our trainer on the first connection, and remember where it went so
that reconnects (the watcher's, after a drop) skip the bootstrap. A box named by its
instance (``vast:4242``) is located again on every connection: its address changes when
it is stopped and started."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from remote.transport.base import Transport, TransportError

#: ``ask(host, key_type, fingerprint) -> bool``: whether to trust an unknown host key.
AskHostKey = Callable[[str, str, str], bool]
#: ``locate(progress) -> ("user@host", port)``: where the box answers SSH right now.
Locate = Callable[[Callable[[str], None]], tuple[str, int]]


def _quiet(_line: str) -> None:
    return None


@dataclass
class Connector:
    """Opens connections to one box, ready to run ``python3 -m trainer``.

    ``host`` is ``None`` for this machine. With ``bootstrap`` the first connection
    uploads the trainer (:mod:`remote.bootstrap`) and later ones reuse its
    ``trainer_prefix``. A bootstrap that fails raises when ``strict``; otherwise it is
    noted and the plain prefix is kept (the watcher then polls files over SFTP).

    With ``locate`` (a box named by its instance: ``host`` is ``vast:4242``), each
    connection first asks where the box is, and its host key is filed under ``host``."""

    host: str | None
    port: int | None = None
    accept_new: bool = False
    ask_unknown: AskHostKey | None = None
    ssh_options: Mapping[str, object] = field(default_factory=dict)
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

    def __call__(self) -> Transport:
        """A new connection (see :meth:`open`)."""
        return self.open()

    def open(self, progress: Callable[[str], None] | None = None,
             notes: list[str] | None = None) -> Transport:
        """A new connection to the box; blocks, so call it from a worker thread.
        ``progress`` gets each step; what bootstrap found goes to ``notes`` when given,
        else to ``progress``."""
        say = progress or self.note
        if self.host is None:
            from remote.transport.local import LocalTransport

            return LocalTransport()
        from remote.transport import ssh  # paramiko loads only when a box is remote

        target, port, options = self.host, self.port, dict(self.ssh_options)
        if self.locate is not None:
            target, port = self.locate(say)
            options.setdefault("host_key_alias", self.host)
        transport = ssh.connect(target, port=port, accept_new=self.accept_new,
                                ask_unknown=self.ask_unknown, timeout=self.timeout,
                                progress=say, **options)
        if self.trainer_prefix is not None:
            transport.trainer_prefix = self.trainer_prefix
            return transport
        if not self.bootstrap:
            return transport
        from remote.bootstrap import bootstrap
        from remote.config import host_python

        try:
            python = self.python or host_python(self.host)
            # Preflight (torch, a CUDA kernel) takes seconds: callers run it later.
            result = bootstrap(transport, progress=say, preflight=False, python=python)
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


#: Seconds between tries of a first connection that failed (a box still booting): the
#: n-th wait is ``RETRY_DELAYS[min(n, len - 1)]``.
RETRY_DELAYS = (1.0, 2.0, 4.0, 8.0, 15.0, 30.0)


def retry_delay(attempt: int) -> float:
    """How long to wait before try ``attempt + 1`` of a first connection (0-based)."""
    return RETRY_DELAYS[min(max(attempt, 0), len(RETRY_DELAYS) - 1)]


def worth_retrying(error: BaseException) -> bool:
    """Whether trying the same connection again may work: a box that is booting, a
    network that is down. A host key that changed or was refused is never retried (it
    needs a person), nor is a bad local setting (an ssh config that does not parse)."""
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
