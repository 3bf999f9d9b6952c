"""Provider clients for the laptop: API keys, the config file, and the instance id.

The clients themselves live in ``trainer.providers`` (standard library only, because the
guard calls them from the box); this module finds what they need on the laptop:

* the API key: ``VAST_API_KEY`` / ``RUNPOD_API_KEY`` / ``LAMBDA_API_KEY``, else
  ``api_key`` under ``[vast]`` / ``[runpod]`` / ``[lambda]`` in the config file;
* the instance: flags, else ``[hosts."TARGET"]`` (``provider``, ``instance``) in the
  config file, else detected on the box (``CONTAINER_ID`` / ``VAST_CONTAINERLABEL`` on
  Vast, ``RUNPOD_POD_ID`` on RunPod, read from ``/proc/1/environ`` when the SSH session
  lacks them).

The config file is ``$XDG_CONFIG_HOME/gpurent/config.toml`` (default
``~/.config/gpurent/config.toml``). It holds keys, so it is refused while group or others
can access it.
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


def get_provider(name: str, api_key: str | None, base_url: str | None = None,
                 **options: Any) -> Provider:
    """A provider client (see ``trainer.providers.get_provider``)."""
    return _get_provider(name, api_key, base_url, **options)


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
    return get_provider(name, key, base_url, **options)


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
    """Flags first, then ``[hosts."HOST"]`` in the config, then detection on the box.

    Raises ``ProviderError`` (one line) when the instance cannot be found."""
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
