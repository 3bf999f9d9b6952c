"""How far a Hugging Face token reaches, where the Hub tells: ``GET /api/whoami-v2`` with
the token gives its role and, for a fine-grained token, what it may write. A push (and a
launch with ``hub=``) hands the token to the box, whose host can read it, so ``gpurent
push`` and ``gpurent launch`` say in one line when it can write more than the one
repository the run goes to. When the Hub gives no usable answer (offline, an error, a
mirror without ``whoami-v2``, an answer of another shape) that line says that the reach
was not checked and why, naming the host asked; nothing is claimed that was not told. A
token the Hub refuses (HTTP 401) is :class:`TokenRefused`: the box would be refused too.

The Hub asked is this laptop's ``HF_ENDPOINT`` (``remote.link.laptop_endpoint``), the
one the box is told to use, else the Hub itself."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from typing import Any

from remote.link import laptop_endpoint
from trainer.hub.client import DEFAULT_ENDPOINT, ERRNO_RE, endpoint_host
from trainer.text import clean_text, one_line

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
#: Where the token is made narrow (the advice ends with it).
TOKENS_PAGE = "huggingface.co/settings/tokens"


class TokenRefused(Exception):
    """The Hub refused the token (HTTP 401); the message names the host and its words."""


class ReachUnknown(Exception):
    """The Hub gave no usable ``whoami-v2`` answer; the message says why, naming the host."""


def endpoint() -> str:
    """The Hub's address: this laptop's ``HF_ENDPOINT`` (checked: ``ValueError`` for one
    that may not go to the box), else the Hub."""
    return laptop_endpoint() or DEFAULT_ENDPOINT


def whoami(token: str, base: str | None = None,
           timeout: float = WHOAMI_TIMEOUT) -> dict[str, Any]:
    """The Hub's ``whoami-v2`` answer for ``token``. ``TokenRefused`` when the Hub
    refuses the token, ``ReachUnknown`` when it gave no answer of that shape."""
    base = base or endpoint()
    host = endpoint_host(base)
    request = urllib.request.Request(f"{base}/api/whoami-v2",
                                     headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310
            data = response.read(MAX_WHOAMI_BYTES + 1)
    except urllib.error.HTTPError as exc:
        told = exc.headers.get("X-Error-Message") if exc.headers is not None else None
        words = one_line(told or exc.reason or "", 200)
        said = f"HTTP {exc.code}: {words}" if words else f"HTTP {exc.code}"
        if exc.code == 401:
            raise TokenRefused(f"{host} refused the Hugging Face token ({said}): set a "
                               "valid one in HF_TOKEN or log in with `hf auth login`") from None
        raise ReachUnknown(f"{host} answered whoami-v2 with {said}") from None
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise ReachUnknown(f"{host}: no answer in {timeout:g} s") from None
        why = reason.strerror if isinstance(reason, OSError) and reason.strerror else reason
        raise ReachUnknown(f"{host}: cannot connect: {ERRNO_RE.sub('', str(why))}") from None
    except TimeoutError:
        raise ReachUnknown(f"{host}: no answer in {timeout:g} s") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:
        raise ReachUnknown(f"{host}: {one_line(exc, 200)}") from None
    try:
        info = json.loads(data[:MAX_WHOAMI_BYTES].decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        info = None
    if len(data) > MAX_WHOAMI_BYTES or not isinstance(info, dict):
        raise ReachUnknown(f"{host} answered whoami-v2 with something other than its JSON")
    return info


def role(info: dict[str, Any]) -> Any:
    """The token's role in a ``whoami-v2`` answer (``None`` when it names none)."""
    auth = info.get("auth")
    token = auth.get("accessToken") if isinstance(auth, dict) else None
    return token.get("role") if isinstance(token, dict) else None


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
    given = role(info)
    if given in WRITE_ROLES:
        owners = [str(info["name"])] if info.get("name") else []
        return [f"every repository of {name}" for name in owners + _names(info.get("orgs"))]
    if given != "fineGrained":
        return []
    fine = info["auth"]["accessToken"].get("fineGrained")
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
    what else and what to use instead, or when the Hub could not tell (saying why);
    ``None`` when it writes ``repo`` alone or nothing. ``TokenRefused`` when the Hub
    refuses the token; ``ValueError`` for an ``HF_ENDPOINT`` that may not go to the box."""
    advice = (f"it goes to the box, whose host can read it: a fine-grained token that "
              f"writes {repo} alone is safer ({TOKENS_PAGE})")
    try:
        info = whoami(token, base)
    except ReachUnknown as exc:
        return clean_text(f"could not check the Hugging Face token's reach ({exc}); {advice}")
    if role(info) is None:
        host = endpoint_host(base or endpoint())
        return clean_text(f"could not check the Hugging Face token's reach ({host}'s "
                          f"whoami-v2 answer names no token role); {advice}")
    wider = wider_than(info, repo)
    if not wider:
        return None
    more = f" and {len(wider) - SHOWN} more" if len(wider) > SHOWN else ""
    return clean_text(
        f"the Hugging Face token can write more than {repo}: {', '.join(wider[:SHOWN])}"
        f"{more}; {advice}")
