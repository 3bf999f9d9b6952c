"""How far a Hugging Face token reaches, where the Hub tells: ``GET /api/whoami-v2`` with
the token gives its role and, for a fine-grained token, what it may write. A push (and a
launch with ``hub=``) hands the token to the box, whose host can read it, so ``gpurent
push`` and ``gpurent launch`` say in one line when it can write more than the one
repository the run goes to. A Hub that does not answer (offline, an error, an answer of
another shape) makes no warning: nothing is claimed that was not told."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from typing import Any

from trainer.text import clean_text

#: Seconds to wait for the Hub's answer (the push waits for it).
WHOAMI_TIMEOUT = 10.0
#: Largest answer read (a whoami is a few kB; more is not one).
MAX_WHOAMI_BYTES = 1 << 20
#: How many of the other things it can write the warning names.
SHOWN = 4
#: The fine-grained permission that writes a repository's content.
REPO_WRITE = "repo.write"
#: Classic token roles that write every repository of the user and their organizations.
WRITE_ROLES = ("write", "admin")


def endpoint() -> str:
    """The Hub's address: ``HF_ENDPOINT`` (as huggingface_hub reads it), else the Hub."""
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def whoami(token: str, base: str | None = None,
           timeout: float = WHOAMI_TIMEOUT) -> dict[str, Any] | None:
    """The Hub's ``whoami-v2`` answer for ``token``, or ``None`` when it gave none."""
    request = urllib.request.Request(f"{base or endpoint()}/api/whoami-v2",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            data = response.read(MAX_WHOAMI_BYTES + 1)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    if len(data) > MAX_WHOAMI_BYTES:
        return None
    try:
        info = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None
    return info if isinstance(info, dict) else None


def _names(items: Any) -> list[str]:
    """The ``name`` of each object in ``items`` (a list the Hub sent)."""
    if not isinstance(items, list):
        return []
    return [str(i["name"]) for i in items if isinstance(i, dict) and i.get("name")]


def wider_than(info: dict[str, Any], repo: str) -> list[str]:
    """What else than model repository ``repo`` a token with this ``whoami`` can write:
    ``every repository of NAME`` for a classic write token (the user's and each
    organization's), or for each fine-grained scope with ``repo.write`` on a user or an
    organization, and ``KIND NAME`` for another single repository. ``[]`` when it
    writes ``repo`` alone, or nothing, or the answer does not say."""
    auth = info.get("auth")
    token = auth.get("accessToken") if isinstance(auth, dict) else None
    role = token.get("role") if isinstance(token, dict) else None
    if role in WRITE_ROLES:
        owners = [str(info["name"])] if info.get("name") else []
        return [f"every repository of {name}" for name in owners + _names(info.get("orgs"))]
    if role != "fineGrained":
        return []
    fine = token.get("fineGrained")
    scoped = fine.get("scoped") if isinstance(fine, dict) else None
    wider = []
    for scope in scoped if isinstance(scoped, list) else []:
        entity = scope.get("entity") if isinstance(scope, dict) else None
        permissions = scope.get("permissions") if isinstance(scope, dict) else None
        if not isinstance(entity, dict) or not isinstance(permissions, list) or \
                REPO_WRITE not in permissions:
            continue
        kind, name = entity.get("type"), str(entity.get("name") or entity.get("_id") or "?")
        if kind in ("user", "org"):
            wider.append(f"every repository of {name}")
        elif not (kind == "model" and name == repo):
            wider.append(f"{kind} {name}")
    return wider


def reach_warning(token: str, repo: str, base: str | None = None) -> str | None:
    """One line when ``token`` can write more than ``repo`` (asked of the Hub), naming
    what else and what to use instead; ``None`` when it cannot or the Hub does not say."""
    info = whoami(token, base)
    wider = [] if info is None else wider_than(info, repo)
    if not wider:
        return None
    more = f" and {len(wider) - SHOWN} more" if len(wider) > SHOWN else ""
    return clean_text(
        f"the Hugging Face token can write more than {repo}: {', '.join(wider[:SHOWN])}"
        f"{more}; it goes to the box, whose host can read it: a fine-grained token that "
        f"writes {repo} alone is safer (huggingface.co/settings/tokens)")
