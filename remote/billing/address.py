"""Where a box named by its instance (``vast:4242``) answers SSH now, from the provider.

Vast, RunPod and Lambda hand out a new address or port when a stopped instance starts
again, so the address is asked of the provider's API on every connection (the watcher's
reconnects included), never stored. The host key is filed under the instance's name
(``HostKeyAlias vast:4242``), so the new address is not a new, unknown host, and the
connection takes what ``~/.ssh/config`` says for that name (``Host vast:*``: User,
IdentityFile...); the provider's default user (root, Lambda's ubuntu) is the login only
when the config names none.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from remote.billing.providers import (
    ConfigError,
    InstanceTarget,
    parse_instance_target,
    provider_for,
)
from remote.link.connector import AskHostKey, Connector
from remote.transport.base import NamedBox, NeedsSetup, TransportError, Unreachable
from remote.transport.hostpolicy import refusal
from trainer.providers import NotFoundError, Provider, ProviderError
from trainer.providers.base import SshAddress

#: Instance states in which an address may appear soon (worth waiting for).
COMING_UP = ("starting", "unknown")


class Locator:
    """``locator(progress) -> NamedBox``: the instance's SSH address now, by its name.

    Raises ``Unreachable`` while the instance is coming up or has no address yet,
    ``NeedsSetup`` when the provider's API key is missing or refused (or the config file
    is wrong), and ``TransportError`` (one line, with what to do) when it is stopped,
    gone or unknown. When the API cannot be reached but an address was seen before, that
    one is used."""

    def __init__(self, target: InstanceTarget, *, base_url: str | None = None,
                 provider: Provider | None = None) -> None:
        self.target = target
        self.base_url = base_url
        self._provider = provider
        #: The last address the provider gave.
        self.last: SshAddress | None = None

    def provider(self) -> Provider:
        """The provider's client (its key from the environment or the config file)."""
        if self._provider is None:
            try:
                self._provider = provider_for(self.target.provider, base_url=self.base_url)
            except (ProviderError, ConfigError) as exc:  # no key, a bad config file
                raise NeedsSetup(f"{self.target.text}: {exc}") from None
        return self._provider

    def address(self) -> SshAddress:
        """Ask the provider where the instance's SSH server is (see the class doc)."""
        name = self.target.text
        provider = self.provider()
        try:
            instance = provider.get_instance(self.target.instance)
        except NotFoundError as exc:
            raise TransportError(f"{name}: {exc}") from None
        except ProviderError as exc:
            if self.last is not None and exc.kind in ("network", "timeout", "server",
                                                      "rate_limited"):
                return self.last
            if exc.kind == "auth":  # the key was refused: another try will be too
                raise NeedsSetup(f"{name}: {exc}") from None
            raise TransportError(f"{name}: cannot ask {provider.title} where it is: "
                                 f"{exc}") from None
        if instance.state != "running":
            why = (f"{name} is {instance.state} ({provider.title} says "
                   f"{instance.raw_state or '?'}), so it has no SSH server now")
            if instance.state in COMING_UP:
                raise Unreachable(f"{why}; try again in a moment")
            if instance.state == "destroyed":
                raise TransportError(f"{why}: it is gone")
            raise TransportError(f"{why}; `gpurent resume {name} RUN` (R in gpurent-tui) "
                                 "starts it and resumes the run")
        address = provider.ssh_address(instance)
        if address is None:
            hint = {"runpod": "give the pod a public IP with TCP port 22 exposed (its "
                              "basic SSH proxy runs no commands and no SFTP)"}
            raise Unreachable(f"{name} is running but {provider.title} gives no SSH "
                              f"address for it yet; "
                              f"{hint.get(provider.name, 'try again in a moment')}")
        refused = refusal(address.host, address.user)
        if refused:
            raise TransportError(f"{name}: {refused}")
        self.last = address
        return address

    def __call__(self, progress: Callable[[str], None] | None = None) -> NamedBox:
        """The box by its name, at its address, logging in as the provider's default
        user unless ``~/.ssh/config`` names one (``remote.link.connector.Connector``)."""
        if progress is not None:
            progress(f"asking {self.target.provider} where {self.target.text} is")
        address = self.address()
        if progress is not None:
            progress(f"{self.target.text} is at {address.label}")
        return NamedBox(self.target.text, address.host, address.port, address.user)


def connector_to(host: str | InstanceTarget | None, *, provider: Provider | None = None,
                 base_url: str | None = None, port: int | None = None,
                 accept_new: bool = False, ask_unknown: AskHostKey | None = None,
                 ssh_options: Mapping[str, object] | None = None, bootstrap: bool = True,
                 strict: bool = True, timeout: float = 15.0,
                 note: Callable[[str], None] | None = None,
                 python: str | None = None) -> Connector:
    """The one connector to a box, for the CLI, the TUI and the watchdog alike: ``host``
    (``None``: this machine; ``user@host`` or an alias) with the options of
    ``remote.link.connector.Connector``. A box named by its instance (``vast:4242``, or
    an ``InstanceTarget``) is located through its provider on every connection: through
    ``provider`` (the client of its account) when given, else a client made from this
    laptop's key (at ``base_url``). ``ValueError`` (one line) for an instance id its
    provider does not use."""
    named = host if isinstance(host, InstanceTarget) else parse_instance_target(host)
    plain = host if isinstance(host, str) or host is None else host.text
    return Connector(named.text if named is not None else plain, port=port,
                     accept_new=accept_new, ask_unknown=ask_unknown,
                     ssh_options=dict(ssh_options or {}), bootstrap=bootstrap,
                     strict=strict, timeout=timeout, python=python,
                     locate=None if named is None else
                     Locator(named, base_url=base_url, provider=provider),
                     note=note or Connector.note)
