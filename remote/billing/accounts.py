"""The provider accounts this laptop can list: several per provider.

Each provider's single key (``VAST_API_KEY``..., or ``api_key`` under ``[vast]``...: see
``remote.billing.providers``) is the account labelled ``default``. More accounts are
``[[accounts]]`` tables in the config file (mode 600)::

    [[accounts]]
    provider = "vast"
    label = "work"
    key_env = "VAST_API_KEY_WORK"      # the key from this environment variable, or
    # api_key = "..."                  # the key itself, in this 0600 file
    # base_url = "https://..."         # optional, as for the provider's section

A label is unique per provider. An account whose key is missing is still listed, with
the reason (``Account.problem``), so the fleet says so in that account's row instead of
failing the whole listing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from remote.billing.providers import (
    INSTANCE_PROVIDERS,
    KEY_ENV,
    get_provider,
    resolve_api_key,
    resolve_base_url,
)
from remote.config import ConfigError, config_path, load_config
from trainer.providers import Provider

#: The label of each provider's own key (environment or its config section).
DEFAULT_LABEL = "default"


@dataclass(frozen=True)
class Account:
    """One provider account: its key (never shown) or why there is none."""

    provider: str
    label: str
    key: str | None = field(default=None, repr=False)
    base_url: str | None = None
    problem: str = ""

    @property
    def name(self) -> str:
        """``vast/work``: how rows and messages name the account."""
        return f"{self.provider}/{self.label}"

    def client(self, **options: Any) -> Provider:
        """A provider client with this account's key (``options`` as ``Provider``)."""
        return get_provider(self.provider, self.key, self.base_url, **options)


def _text(entry: Mapping[str, Any], key: str, where: str) -> str | None:
    value = entry.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{where}: {key} must be a non-empty string")
    return value.strip()


def _configured(entry: Any, index: int, env: Mapping[str, str], where: str) -> Account:
    here = f"[[accounts]] #{index} in {where}"
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{here} must be a table")
    provider = _text(entry, "provider", here)
    if provider not in INSTANCE_PROVIDERS:
        raise ConfigError(f"{here}: provider must be one of {', '.join(INSTANCE_PROVIDERS)}")
    label = _text(entry, "label", here) or provider
    key_env, api_key = _text(entry, "key_env", here), _text(entry, "api_key", here)
    if (key_env is None) == (api_key is None):
        raise ConfigError(f"{here} ({provider}/{label}): give key_env (an environment "
                          "variable) or api_key, one of them")
    base_url = _text(entry, "base_url", here)
    if base_url and not base_url.startswith(("https://", "http://")):
        raise ConfigError(f"{here}: base_url must be an http(s) URL")
    if key_env is not None:
        key = env.get(key_env, "").strip() or None
        problem = "" if key else f"no key: {key_env} is not set"
    else:
        key, problem = api_key, ""
    return Account(provider, label, key, base_url or resolve_base_url(provider, env=env),
                   problem)


#: How to configure accounts, said where there are none.
NO_ACCOUNTS = ("no provider account configured: set VAST_API_KEY, RUNPOD_API_KEY or "
               "LAMBDA_API_KEY, or add [[accounts]] tables to ~/.config/gpurent/config.toml "
               "(see the README)")


class NoAccounts(ConfigError):
    """No provider account is configured: ``NO_ACCOUNTS`` says how to add one."""

    def __init__(self) -> None:
        super().__init__(NO_ACCOUNTS)


def some_accounts(**options: Any) -> list[Account]:
    """``configured_accounts``, or ``NoAccounts`` (a ``ConfigError`` saying how to add
    one) when there are none: what a command that lists or watches them needs."""
    found = configured_accounts(**options)
    if not found:
        raise NoAccounts()
    return found


def configured_accounts(*, env: Mapping[str, str] | None = None,
                        path: str | os.PathLike[str] | None = None) -> list[Account]:
    """Every account: each provider's ``default`` (when it has a key), then the
    ``[[accounts]]`` tables in file order. ``ConfigError`` (one line) for a malformed
    table or a label used twice for one provider."""
    env = os.environ if env is None else env
    where = str(path or config_path(env))
    found: list[Account] = []
    for provider in KEY_ENV:
        key = resolve_api_key(provider, env=env, path=path)
        if key:
            found.append(Account(provider, DEFAULT_LABEL, key,
                                 resolve_base_url(provider, env=env, path=path)))
    tables = load_config(path).get("accounts", [])
    if not isinstance(tables, list):
        raise ConfigError(f"accounts in {where} must be [[accounts]] tables")
    for index, entry in enumerate(tables, 1):
        account = _configured(entry, index, env, where)
        if any(a.name == account.name for a in found):
            raise ConfigError(f"{where}: two accounts are called {account.name}; give "
                              "each a label of its own")
        found.append(account)
    return found
