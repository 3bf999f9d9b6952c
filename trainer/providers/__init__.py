"""GPU provider clients (Vast.ai, RunPod, Lambda Cloud, manual) behind one interface.

Standard library only, so the guard can call them from the box; the laptop uses them
through ``remote.billing.providers`` (which adds API-key and config handling). See
``trainer.providers.base`` for the normalised states and ``trainer.providers.confirm`` for
actions that are confirmed by polling.
"""

from __future__ import annotations

from typing import Any

from trainer.providers.base import (
    STATES,
    Instance,
    NotFoundError,
    Provider,
    ProviderError,
)
from trainer.providers.lambda_cloud import LambdaProvider
from trainer.providers.manual import ManualProvider
from trainer.providers.runpod import RunPodProvider
from trainer.providers.vast import VastProvider

#: Provider name -> client class.
PROVIDERS: dict[str, type[Provider]] = {
    "vast": VastProvider,
    "runpod": RunPodProvider,
    "lambda": LambdaProvider,
    "manual": ManualProvider,
}

__all__ = ["PROVIDERS", "STATES", "Instance", "NotFoundError", "Provider", "ProviderError",
           "get_provider"]


def get_provider(name: str, api_key: str | None, base_url: str | None = None,
                 **options: Any) -> Provider:
    """A client for provider ``name`` (``vast``, ``runpod``, ``lambda``, ``manual``).

    ``base_url`` replaces the documented one (tests, proxies); ``options`` go to
    ``Provider`` (``timeout``, ``retries``, ``backoff``, ``sleep``). Raises
    ``ProviderError`` for an unknown name or a missing key."""
    cls = PROVIDERS.get((name or "").strip().lower())
    if cls is None:
        raise ProviderError(f"unknown provider {name!r}; choose one of "
                            f"{', '.join(PROVIDERS)}", kind="bad_input")
    if cls is not ManualProvider and not api_key:
        raise ProviderError(f"{cls.title}: no API key", kind="auth")
    return cls(api_key, base_url, **options)
