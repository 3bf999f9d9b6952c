"""Is the instance we are about to stop, start or destroy the box we are connected to?

The instance id may come from the box's own environment, the config, or a flag; any of
them can name another instance (a copied config, a container restarted elsewhere, a box
that lies). So before an action the provider API's SSH addresses for the instance must
include the box's: the host and port it is reached at (after ``~/.ssh/config``),
compared by name or by IP address. A mismatch refuses with both addresses shown.

An id the box reported (``CONTAINER_ID``, ``RUNPOD_POD_ID``: anyone with root on a
rented machine sets them) is a claim: it is acted on only when the provider ties it to
the box by its address. An instance for which the provider gives no address (stopped:
every start, and a stop or destroy of the user's *other*, stopped instance) cannot be
tied, so it is refused; the user may name it (``--instance``). An id the user gave
(a flag, the config, an instance target) is acted on when the provider gives no address.

On the box itself (``local``) there is no address to compare; the instance id in this
machine's environment, when there is one, must be the one acted on.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import threading
from dataclasses import dataclass

from remote.transport.base import Transport
from trainer.providers import Instance, Provider
from trainer.providers.detect import detect_instance
from trainer.text import clean_text

#: Seconds to wait for a name lookup.
RESOLVE_TIMEOUT = 5.0


class WrongInstance(Exception):
    """The instance is not the box we are connected to; the message is one line."""


@dataclass(frozen=True)
class BoxAddress:
    """Where the box is: ``host`` (its HostName) and ``port``, the IP addresses they
    stand for, or ``local`` (this machine)."""

    host: str
    port: int
    ips: frozenset[str] = frozenset()
    local: bool = False

    @property
    def label(self) -> str:
        """``host:port`` (``this machine`` for local)."""
        return "this machine" if self.local else f"{self.host}:{self.port}"


LOCAL = BoxAddress("local", 0, local=True)


def resolve_ips(host: str, timeout: float = RESOLVE_TIMEOUT) -> frozenset[str]:
    """The IP addresses ``host`` names (itself when it is one; empty when unknown)."""
    bare = host.strip("[]")
    try:
        return frozenset({str(ipaddress.ip_address(bare))})
    except ValueError:
        pass
    found: list[str] = []

    def look() -> None:
        with contextlib.suppress(OSError, UnicodeError):
            found.extend(str(info[4][0]) for info in socket.getaddrinfo(bare, None))

    thread = threading.Thread(target=look, daemon=True, name="resolve")
    thread.start()
    thread.join(timeout)
    return frozenset(found) if not thread.is_alive() else frozenset()


def box_address(host: str | None, port: int | None = None,
                transport: Transport | None = None) -> BoxAddress:
    """The address of box ``host`` (``None``/``local``: this machine), from the open
    ``transport`` when there is one, else from ``~/.ssh/config``."""
    if host is None or host == "local":
        return LOCAL
    spec = getattr(transport, "spec", None)
    if spec is None:
        from remote.transport.sshconfig import load_config, resolve

        spec = resolve(host, port=port, config=load_config(None))
    ips = set(resolve_ips(spec.hostname))
    peer = getattr(transport, "peer_ip", None)
    if isinstance(peer, str) and peer:
        ips.add(peer)
    return BoxAddress(spec.hostname, spec.port, frozenset(ips))


def _same_host(name: str, box: BoxAddress) -> bool:
    if name.strip("[]").lower() == box.host.strip("[]").lower():
        return True
    return bool(resolve_ips(name) & box.ips)


def this_machine() -> tuple[str, str] | None:
    """``(provider, instance_id)`` when this machine is a provider's instance (its
    environment says so), else ``None``."""
    return detect_instance()


def check_instance(provider: Provider, instance: Instance, box: BoxAddress,
                   action: str, *, from_box: bool = False) -> None:
    """Raise ``WrongInstance`` unless ``instance`` is the box at ``box`` (see the module
    docstring). ``from_box``: the id came from the box, so an instance whose API reports
    no address is refused; otherwise (the user gave it) it passes."""
    if box.local:
        here = this_machine()
        if here is not None and here[0] == provider.name and here[1] != instance.id:
            raise WrongInstance(
                f"refusing to {action} {provider.title} instance {instance.id}: this "
                f"machine is instance {clean_text(here[1])}")
        return
    addresses = [(a.host, a.port) for a in provider.ssh_addresses(instance)]
    claim = "the box says it is instance {id}, " if from_box else ""
    if not addresses:
        if not from_box:
            return
        raise WrongInstance(
            f"refusing to {action} {provider.title} instance {instance.id}: the box "
            f"connected to ({clean_text(box.label)}) says it is that instance, but "
            f"{provider.title} gives no address for it (it is {instance.state}), so "
            "nothing ties it to this box; if it is yours, name it: --instance "
            f"{instance.id}")
    for host, port in addresses:
        if port == box.port and _same_host(host, box):
            return
    shown = ", ".join(f"{clean_text(h)}:{p}" for h, p in addresses[:3])
    raise WrongInstance(
        f"refusing to {action} {provider.title} instance {instance.id}: "
        f"{claim.format(id=instance.id)}the provider says it is at {shown}, but the box "
        f"connected to is {clean_text(box.label)}")
