"""What every Hub command shares: importing huggingface_hub lazily with timeouts on,
reading the token without argv, and turning client errors into one line.

huggingface_hub is imported only inside functions so that ``import trainer.hub.push``
works on a box where it is not installed yet (``trainer safe`` never needs it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection, Sequence
from types import ModuleType
from typing import Any, TextIO

from trainer.text import one_line

#: Seconds to wait for a connection, and for any single read or write on it.
CONNECT_TIMEOUT = 20.0
IO_TIMEOUT = 120.0

REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")


class HubError(Exception):
    """A Hub operation failed; the message is one line a user can act on."""


def check_repo_id(repo: str) -> str:
    """Return ``repo`` when it looks like ``ORG/NAME``; raise ``ValueError`` otherwise."""
    if not REPO_RE.match(repo) or ".." in repo:
        raise ValueError(f"{repo!r} is not a repository id of the form ORG/NAME")
    return repo


def import_hub(progress_bars: bool = True) -> ModuleType:
    """Import huggingface_hub and give its shared HTTP client a timeout (its default is
    none, so a silent Hub would hang a push forever)."""
    try:
        import huggingface_hub
        from huggingface_hub.utils import disable_progress_bars, get_session
    except ImportError as exc:
        raise HubError("huggingface_hub is not installed on this machine "
                       "(pip install huggingface_hub)") from exc
    session = get_session()
    timeout = getattr(session, "timeout", None)  # an httpx-style client (huggingface_hub 1+)
    if timeout is not None and getattr(timeout, "read", 0) is None:
        session.timeout = type(timeout)(IO_TIMEOUT, connect=CONNECT_TIMEOUT)
    if not progress_bars:
        disable_progress_bars()
    return huggingface_hub


def read_token(use_stdin: bool, stdin: TextIO | None = None) -> str | None:
    """The Hub token: the first line of stdin when ``use_stdin``, else ``HF_TOKEN`` or the
    huggingface_hub token store. Never from argv; never written anywhere."""
    if use_stdin:
        line = (stdin or sys.stdin).readline().strip()
        return line or None
    token = os.environ.get("HF_TOKEN", "").strip()
    if token:
        return token
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def describe_error(exc: BaseException) -> str:
    """One line for a failed Hub call: HTTP status and the Hub's own message when there
    is one. Tokens never appear (the client does not echo them)."""
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    if status is not None:
        server = getattr(exc, "server_message", None) or ""
        request = getattr(response, "request", None)
        where = f" ({request.method} {request.url.path})" if request is not None else ""
        text = server or str(exc).split("\n", 1)[0]
        return one_line(f"HTTP {status}: {text}{where}")
    name = type(exc).__name__
    if name in ("ConnectError", "ConnectTimeout"):
        return one_line(f"cannot reach the Hub: {exc}")
    if "Timeout" in name:
        return one_line(f"the Hub did not answer in time ({name})")
    if isinstance(exc, OSError) and exc.strerror:
        where = f": {exc.filename}" if exc.filename else ""
        return one_line(f"{exc.strerror}{where}")
    if type(exc) in (OSError, HubError) and str(exc):  # our own messages are complete
        return one_line(str(exc))
    return one_line(f"{name}: {exc}" if str(exc) else name)




def verify_pushed(entries: Sequence[dict[str, Any]], sha256: str, size: int | None = None,
                  *, repos: Collection[str], token: str | None = None,
                  endpoint: str | None = None) -> tuple[bool, str]:
    """Ask the Hub whether a ledger entry for a file with content ``sha256`` is true: the
    file exists at the entry's commit and its LFS sha256 (and size) match. One request
    (``paths-info`` at that commit) per entry tried, newest first, until one is confirmed.
    Only entries for ``repos`` (the user's own repositories) are asked: the ledger is the
    box's word, and a copy in a repository someone else controls is not the user's.

    Returns ``(True, "ORG/NAME at COMMIT12")`` or ``(False, why)``; an unreachable Hub is
    ``(False, "cannot verify ...")``: unknown counts as unsafe."""
    if not entries:
        return False, "never pushed"
    others = [e.get("repo") for e in entries if e.get("repo") not in repos]
    entries = [e for e in entries if e.get("repo") in repos]
    if not entries:
        named = ", ".join(dict.fromkeys(one_line(r, 60) for r in others))
        return False, (f"pushed only to {named}, which is not one of your Hub "
                       "repositories (those you pushed to or launched with, or named)")
    try:
        hub = import_hub(progress_bars=False)
    except HubError as exc:
        return False, f"cannot verify: {exc}"
    api = hub.HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
    why = ""
    for entry in entries:
        repo, commit = entry.get("repo"), entry.get("commit")
        path = entry.get("path_in_repo") or entry.get("file")
        if not (isinstance(repo, str) and REPO_RE.match(repo) and isinstance(commit, str)
                and COMMIT_RE.match(commit) and isinstance(path, str) and path):
            why = why or "its ledger entry is malformed"
            continue
        where = f"{repo} at {commit[:12]}"
        try:
            infos = api.get_paths_info(repo, [path], revision=commit)
        except Exception as exc:  # any failure to confirm is "not safe"; say which
            status = getattr(getattr(exc, "response", None), "status_code", None)
            verb = "not on the Hub" if status == 404 else "cannot verify"
            why = why or f"{verb} ({where}): {describe_error(exc)}"
            continue
        lfs = next((getattr(i, "lfs", None) for i in infos if getattr(i, "path", "") == path),
                   None)
        if not any(getattr(i, "path", "") == path for i in infos):
            why = why or f"not on the Hub: {one_line(path, 80)} is not in {where}"
        elif lfs is None or lfs.sha256 != sha256 or (size is not None and lfs.size != size):
            why = why or f"the Hub holds other content as {one_line(path, 80)} in {where}"
        else:
            return True, where
    return False, why  # why the newest claim failed
