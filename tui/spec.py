"""What the app was asked to open: one ``BoxSpec`` per tab. Standard library only, so
that ``gpurent-tui --help`` and argument errors stay fast."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

#: Where a box's runs are, unless told (the trainer's own default project).
DEFAULT_PROJECT = "runs/train"


@dataclass(frozen=True)
class BoxSpec:
    """One box to watch. ``kind`` is ``ssh`` (``target`` is user@host, host or an
    ``~/.ssh/config`` alias) or ``local`` (this machine; ``target`` is ``local``)."""

    kind: str
    target: str
    port: int | None = None
    project: str = DEFAULT_PROJECT
    run: str | None = None
    provider: str | None = None
    instance: str | None = None
    price: float | None = None
    accept_new: bool = False
    #: Generate the demo dataset and launch the demo run on connecting (``--demo``).
    demo: bool = False
    #: The provider API's base URL (default: the provider's own; tests use a stand-in).
    provider_url: str | None = None
    #: The python on the box to train with (``--python``; ``None``: bootstrap chooses).
    python: str | None = None
    #: Extra keyword arguments for ``remote.transport.ssh.connect`` (known_hosts, identity_files).
    ssh_options: tuple[tuple[str, Any], ...] = ()
    #: The box's ``remote.link.Connector`` when one was made before the app
    #: (``tui.main.connect_early``: its connection and follower already under way).
    connector: Any = field(default=None, compare=False, repr=False)
    #: The instance's provider client when the fleet opened it (the listing account's
    #: key, which may not be the provider's default one).
    client: Any = field(default=None, compare=False, repr=False)
    #: The instance as the fleet listed it, and when (epoch seconds): its price and
    #: state until the provider is asked again.
    listed: tuple[Any, float] | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_fleet_row(cls, row: Any, fleet: Any) -> BoxSpec:
        """The tab of a fleet row (``remote.fleet.fleet.FleetRow``) from the listing
        ``fleet`` it came from: its provider's client, the instance as listed and when,
        and the listing's connection options (``-i``, ``--accept-new``)."""
        inst = getattr(row, "instance", None)
        client = getattr(fleet, "clients", {}).get(getattr(row, "account", ""))
        options = getattr(fleet, "options", None)
        listed_at = getattr(fleet, "now", None)
        return cls("ssh", str(getattr(row, "target", "")),
                   provider=getattr(row, "provider", None),
                   instance=getattr(inst, "id", None),
                   provider_url=getattr(client, "base_url", None), client=client,
                   listed=None if inst is None or listed_at is None else (inst, listed_at),
                   accept_new=bool(getattr(options, "accept_new", False)),
                   ssh_options=tuple(getattr(options, "ssh_options", {}).items()))

    @property
    def title(self) -> str:
        """The tab title: the host (with a non-default port) or ``local``."""
        if self.kind == "local":
            return "local"
        return self.target if self.port in (None, 22) else f"{self.target}:{self.port}"

    def reattach(self, run: str | None = None) -> str:
        """The command that opens this box (and ``run``) again, with the key files
        (``-i``) and the python it was opened with."""
        if self.kind == "local":
            words = ["gpurent-tui", "--local", self.project]
        else:
            words = ["gpurent-tui", self.target]
            if self.port not in (None, 22):
                words += ["-p", str(self.port)]
            for key in dict(self.ssh_options).get("identity_files") or ():
                words += ["-i", str(key)]
            words += ["--project", self.project]
            if self.python:
                words += ["--python", self.python]
            if self.provider:
                words += ["--provider", self.provider]
            if self.instance:
                words += ["--instance", self.instance]
            if self.price is not None:
                words += ["--price", f"{self.price:g}"]
        if run:
            words += ["--run", run]
        return shlex.join(words)
