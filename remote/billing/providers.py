"""Provider clients for the laptop: API keys, the config file, and the instance id.

The clients themselves live in ``trainer.providers`` (standard library only, because the
guard calls them from the box); this module finds what they need on the laptop:

* the API key: ``VAST_API_KEY`` / ``RUNPOD_API_KEY`` / ``LAMBDA_API_KEY``, else
  ``api_key`` under ``[vast]`` / ``[runpod]`` / ``[lambda]`` in the config file. It is the
  account's key and stays on the laptop: the box's guard gets it only when the user asks
  (``--send-account-key``, or ``send_account_key = true`` in that section);
* the API base URL: ``GPURENT_VAST_URL`` / ``GPURENT_RUNPOD_URL`` /
  ``GPURENT_LAMBDA_URL``, else ``base_url`` under the provider's section, else the
  provider's documented one;
* the instance: a target that names it (``vast:4242``, ``runpod:POD_ID``,
  ``lambda:ID``: see ``parse_instance_target``), else flags, else ``[hosts."TARGET"]``
  (``provider``, ``instance``) in the config file, else detected on the box
  (``CONTAINER_ID`` / ``VAST_CONTAINERLABEL`` on Vast, ``RUNPOD_POD_ID`` on RunPod, read
  from ``/proc/1/environ`` when the SSH session lacks them).

The config file is ``$XDG_CONFIG_HOME/gpurent/config.toml`` (default
``~/.config/gpurent/config.toml``). It holds keys, so it is refused while group or others
can access it. It also holds the guard's webhooks (secrets too)::

    [notify]
    urls = ["https://ntfy.sh/my-secret-topic"]
    format = "ntfy"        # optional: json, ntfy, slack, discord (default: from the URL)
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# ConfigError and load_config are part of this module's face (callers catch and test them).
from remote.config import ConfigError as ConfigError
from remote.config import config_path, load_config, section
from remote.transport.base import Transport, TransportError
from trainer.providers import PROVIDERS, Provider, ProviderError
from trainer.providers import get_provider as _get_provider
from trainer.providers.detect import instance_from_env, parse_probe, shell_probe

#: Laptop environment variable holding each provider's API key.
KEY_ENV = {"vast": "VAST_API_KEY", "runpod": "RUNPOD_API_KEY", "lambda": "LAMBDA_API_KEY"}
#: Laptop environment variable replacing each provider's API base URL.
URL_ENV = {"vast": "GPURENT_VAST_URL", "runpod": "GPURENT_RUNPOD_URL",
           "lambda": "GPURENT_LAMBDA_URL"}


def resolve_api_key(provider: str, *, env: Mapping[str, str] | None = None,
                    path: str | os.PathLike[str] | None = None) -> str | None:
    """The API key for ``provider`` from the environment, else the config file (read only
    when the environment has none). ``None`` when neither has one (and for ``manual``)."""
    env = os.environ if env is None else env
    var = KEY_ENV.get(provider)
    if var is None:
        return None
    if env.get(var):
        return env[var].strip()
    key = section(load_config(path), provider).get("api_key")
    return key.strip() if isinstance(key, str) and key.strip() else None


def sends_account_key(provider: str, path: str | os.PathLike[str] | None = None) -> bool:
    """Whether the config file asks for ``provider``'s account key to be sent to the box's
    guard (``send_account_key = true`` under ``[vast]``, ``[runpod]`` or ``[lambda]``);
    by default it stays on the laptop. ``ConfigError`` when the value is not a boolean."""
    value = section(load_config(path), provider).get("send_account_key", False)
    if not isinstance(value, bool):
        raise ConfigError(f"send_account_key under [{provider}] in {path or config_path()} "
                          "must be true or false")
    return value


def notify_config(path: str | os.PathLike[str] | None = None) -> tuple[list[str], str | None]:
    """The webhook URLs and format under ``[notify]`` in the config file (``[]`` and
    ``None`` when it has none). Raises ``ConfigError`` for a malformed section; the
    message never repeats a URL."""
    found = section(load_config(path), "notify")
    urls, fmt = found.get("urls", []), found.get("format")
    if isinstance(urls, str):
        urls = [urls]
    if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
        raise ConfigError(f"[notify] urls in {path or config_path()} must be a list of "
                          "strings")
    if fmt is not None and not isinstance(fmt, str):
        raise ConfigError(f"[notify] format in {path or config_path()} must be a string")
    return [u.strip() for u in urls if u.strip()], fmt


def resolve_base_url(provider: str, *, env: Mapping[str, str] | None = None,
                     path: str | os.PathLike[str] | None = None) -> str | None:
    """The API base URL for ``provider`` from the environment, else ``base_url`` in its
    config section; ``None`` means the provider's documented one. A URL that is not
    http(s) is a ``ConfigError``."""
    env = os.environ if env is None else env
    var = URL_ENV.get(provider)
    if var is None:
        return None
    url = env.get(var, "").strip()
    where = var
    if not url:
        found = section(load_config(path), provider).get("base_url")
        url = found.strip() if isinstance(found, str) else ""
        where = f"base_url under [{provider}] in {path or config_path(env)}"
    if url and not url.startswith(("https://", "http://")):
        raise ConfigError(f"{where} must be an http(s) URL, not {url[:60]!r}")
    return url or None


def get_provider(name: str, api_key: str | None, base_url: str | None = None,
                 **options: Any) -> Provider:
    """A provider client (see ``trainer.providers.get_provider``)."""
    return _get_provider(name, api_key, base_url, **options)


def can_stop(name: str) -> bool:
    """Whether provider ``name`` can stop an instance (Lambda cannot); unknown: yes."""
    cls = PROVIDERS.get(name)
    return cls is None or cls.can_stop


def provider_for(name: str, *, base_url: str | None = None,
                 env: Mapping[str, str] | None = None,
                 path: str | os.PathLike[str] | None = None, **options: Any) -> Provider:
    """A client for ``name`` with its key resolved; a one-line ``ProviderError`` saying
    where to put the key when there is none."""
    if name not in PROVIDERS:
        raise ProviderError(f"unknown provider {name!r}; choose one of "
                            f"{', '.join(PROVIDERS)}", kind="bad_input")
    key = resolve_api_key(name, env=env, path=path)
    if name != "manual" and not key:
        where = path or config_path(env)
        raise ProviderError(f"no API key for {PROVIDERS[name].title}: set {KEY_ENV[name]} or "
                            f"put api_key under [{name}] in {where} (mode 600)", kind="auth")
    base_url = base_url or resolve_base_url(name, env=env, path=path)
    return get_provider(name, key, base_url, **options)


#: Providers whose instances can name a box (``vast:4242``).
INSTANCE_PROVIDERS = ("vast", "runpod", "lambda")


@dataclass(frozen=True)
class InstanceTarget:
    """A box named by its rented instance: ``PROVIDER:ID``."""

    provider: str
    instance: str

    @property
    def text(self) -> str:
        """``vast:4242``: how the user wrote it, and the name its host key is filed under."""
        return f"{self.provider}:{self.instance}"


def split_instance_target(text: str) -> tuple[InstanceTarget, str | None] | None:
    """``vast:4242[:PATH]`` as the instance and the path after it (``None`` when there is
    none); ``None`` when ``text`` does not start with ``vast:``, ``runpod:`` or
    ``lambda:`` and an id without ``/``. Raises ``ValueError`` (one line) when the id is
    not one the provider uses."""
    name, sep, rest = text.partition(":")
    if not sep or name not in INSTANCE_PROVIDERS:
        return None
    ident, sep, path = rest.partition(":")
    if "/" in ident:
        return None  # `vast:runs/x`: an ssh alias called vast, and a path
    try:
        ident = PROVIDERS[name](None).check_id(ident)
    except ProviderError as exc:
        raise ValueError(f"{text!r}: {exc}") from None
    return InstanceTarget(name, ident), (path if sep else None)


def parse_instance_target(text: str | None) -> InstanceTarget | None:
    """The instance ``text`` names when it is exactly ``PROVIDER:ID`` (see
    ``split_instance_target``), else ``None``."""
    found = split_instance_target(text) if text else None
    return found[0] if found and found[1] is None else None


@dataclass(frozen=True)
class InstanceRef:
    """Which provider and instance a host is, and where we learned it."""

    provider: str
    instance: str
    source: str


def detect_on_box(transport: Transport, timeout: float = 20.0) -> tuple[str, str] | None:
    """``(provider, instance_id)`` from the box's environment (session, then PID 1's).
    Only the identifying variables leave the box."""
    try:
        result = transport.run(shell_probe(), timeout=timeout)
    except (TransportError, TimeoutError, OSError):
        return None
    if not result.ok:
        return None
    return instance_from_env(parse_probe(result.stdout.decode("utf-8", errors="replace")))


def resolve_instance(host: str | None, *, provider: str | None = None,
                     instance: str | None = None, transport: Transport | None = None,
                     path: str | os.PathLike[str] | None = None) -> InstanceRef:
    """A ``HOST`` that names its instance (``vast:4242``), then flags, then
    ``[hosts."HOST"]`` in the config, then detection on the box.

    Raises ``ProviderError`` (one line) when the instance cannot be found, or when the
    flags contradict the instance ``HOST`` names."""
    named = parse_instance_target(host)
    if named is not None:
        if (provider and provider != named.provider) or (instance and instance
                                                         != named.instance):
            raise ProviderError(f"{host} names its instance: leave out --provider and "
                                "--instance, or give the same", kind="bad_input")
        return InstanceRef(named.provider, named.instance, "target")
    if provider and provider == "manual":
        return InstanceRef("manual", instance or "", "flags")
    if provider and instance:
        return InstanceRef(provider, instance, "flags")
    if host:
        entry = section(load_config(path), "hosts", host)
        p, i = entry.get("provider"), entry.get("instance")
        if isinstance(p, str) and i is not None and (not provider or provider == p):
            return InstanceRef(p, str(i), "config")
    if transport is not None:
        found = detect_on_box(transport)
        if found and (not provider or provider == found[0]):
            return InstanceRef(found[0], instance or found[1], "box")
    raise ProviderError("cannot tell which instance this is: pass --provider and --instance, "
                        f"or add [hosts.\"{host or 'HOST'}\"] with provider and instance to "
                        f"{path or config_path()}", kind="bad_input")
