"""What every Hub command shares: importing huggingface_hub lazily with timeouts on,
reading the token without argv, turning client errors into one line that names the host
tried, and which run a repository's ``last.pt`` is of (``pushed_checkpoint``: what
``trainer restore`` takes and what the laptop calls a run's last safe copy on the Hub).
The Hub is ``HF_ENDPOINT`` as huggingface_hub reads it: the laptop sets it on the command
of every box tool that talks to the Hub (``remote.link.tools``).

huggingface_hub is imported only inside functions so that ``import trainer.hub.push``
works on a box where it is not installed yet (``trainer safe`` never needs it).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from types import ModuleType
from typing import Any, NamedTuple, TextIO
from urllib.parse import urlsplit

from trainer import runfiles
from trainer.text import one_line

#: Seconds to wait for a connection, and for any single read or write on it.
CONNECT_TIMEOUT = 20.0
IO_TIMEOUT = 120.0

REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
#: Where huggingface_hub goes when ``HF_ENDPOINT`` is not set.
DEFAULT_ENDPOINT = "https://huggingface.co"
#: The ``[Errno 111] `` before an OS error's words.
ERRNO_RE = re.compile(r"^\[Errno -?\d+\] ")
#: The checkpoint a resume starts from.
CHECKPOINT = "last.pt"
#: Versions of ``last.pt`` looked at before a resume gives up finding a run's own.
MAX_VERSIONS = 64


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


def endpoint_host(url: str) -> str:
    """``host`` or ``host:port`` of ``url``: what a person recognizes, never the user or
    password a URL may hold; the URL's text when it names no host."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except ValueError:
        host, port = None, None
    if not host:
        return one_line(url.rpartition("@")[2], 80)
    host = f"[{host}]" if ":" in host else host
    return host if port is None else f"{host}:{port}"


def hub_endpoint(endpoint: str | None = None) -> str:
    """The Hub a call goes to when it names none: ``endpoint``, else ``HF_ENDPOINT`` (as
    huggingface_hub reads it), else the Hub itself."""
    return (endpoint or os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what it was raised from, outermost first (the client wraps errors)."""
    seen: set[int] = set()
    link: BaseException | None = exc
    while link is not None and id(link) not in seen:
        seen.add(id(link))
        yield link
        link = link.__cause__ or link.__context__


def _request(link: BaseException) -> Any:
    """The HTTP request ``link`` (a client error) was about, or ``None``."""
    try:  # httpx raises RuntimeError for an error made outside a request
        response = getattr(link, "response", None)
        request = getattr(response, "request", None) or getattr(link, "request", None)
    except RuntimeError:
        return None
    return request if getattr(request, "url", None) is not None else None


def _network_error(exc: BaseException) -> tuple[BaseException, Any] | None:
    """The first error in ``exc``'s chain that came from the network (an HTTP status, or a
    request that got no answer) and its request; ``None`` for a local failure."""
    for link in _chain(exc):
        status = getattr(getattr(link, "response", None), "status_code", None)
        request = _request(link)
        if status is not None or request is not None:
            return link, request
    return None


def _from_client(exc: BaseException) -> bool:
    """Whether ``exc`` is the Hub client's own (offline mode, a file not found...)."""
    return type(exc).__module__.split(".")[0] in ("huggingface_hub", "httpx", "httpx2",
                                                  "httpcore", "httpcore2", "requests")


def describe_error(exc: BaseException, endpoint: str | None = None, *,
                   request: bool = True) -> str:
    """One line for a failed Hub call that names the host it tried (``HOST: HTTP 500:
    ...``, ``HOST: cannot connect: Connection refused``): the request's host, else that
    of ``endpoint`` (see :func:`hub_endpoint`). The HTTP status comes with the Hub's own
    message when there is one, and (``request``) the request's method and path. A local
    failure (a disk error) and our own messages are said as they are. Tokens never appear
    (the client does not echo them)."""
    if type(exc) is HubError and str(exc):  # our own messages are complete
        return one_line(str(exc))
    found = _network_error(exc)
    if found is None:
        if isinstance(exc, OSError) and exc.strerror:
            where = f": {exc.filename}" if exc.filename else ""
            return one_line(f"{exc.strerror}{where}")
        if type(exc) is OSError and str(exc):  # ours, too
            return one_line(str(exc))
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if _from_client(exc):
            return one_line(f"{endpoint_host(hub_endpoint(endpoint))}: {text}")
        return one_line(text)
    link, sent = found
    host = endpoint_host(str(sent.url) if sent is not None else hub_endpoint(endpoint))
    status = getattr(getattr(link, "response", None), "status_code", None)
    if status is not None:
        server = getattr(link, "server_message", None) or ""
        where = f" ({sent.method} {sent.url.path})" if sent is not None and request else ""
        text = server or str(link).split("\n", 1)[0]
        return one_line(f"{host}: HTTP {status}: {text}{where}")
    name = type(link).__name__
    if name in ("ConnectError", "ConnectTimeout"):
        return one_line(f"{host}: cannot connect: {ERRNO_RE.sub('', str(link)) or name}")
    if "Timeout" in name:
        return one_line(f"{host}: no answer in time ({name})")
    return one_line(f"{host}: {name}: {link}" if str(link) else f"{host}: {name}")


class Verified(NamedTuple):
    """The Hub's word on a file: ``ok`` (confirmed), ``why`` (where it is, or why not) and,
    when the Hub could not be asked, ``failure``: why not, the same for every file it
    fails (status and message, then the Hub's address; no request path), so that a
    caller listing many files says it once."""

    ok: bool
    why: str
    failure: str = ""

    @property
    def said(self) -> str:
        """``why`` with the failure, in one line."""
        return f"{self.why}: {self.failure}" if self.failure else self.why


@dataclass(frozen=True)
class PushedCheckpoint:
    """``repo``'s ``last.pt`` as a resume takes it. A repository may hold the pushes of
    many runs, each over the last (pushes put every file at its root), so its newest
    ``status.json`` may be another run's: ``commit`` is the newest commit that changed
    ``last.pt`` (made at ``date``), ``lfs`` whether the Hub keeps its sha256, and
    ``status`` the fields of the ``status.json`` pushed in that same commit (milestones
    and final pushes send both), ``None`` when none came with it."""

    repo: str
    commit: str
    date: datetime
    lfs: bool
    status: dict[str, Any] | None

    @property
    def run(self) -> str | None:
        """The run this ``last.pt`` is of: the last component of its status's
        ``save_dir`` (both engines write it); ``None`` when that cannot be told."""
        save_dir = (self.status or {}).get("save_dir")
        name = PurePosixPath(save_dir).name if isinstance(save_dir, str) else ""
        return name or None

    @property
    def pushed(self) -> str:
        """``pushed 2026-12-03 21:42 UTC``."""
        return f"pushed {self.date:%Y-%m-%d %H:%M} UTC"


def pushed_checkpoint(hub: ModuleType, repo: str, token: str | None = None,
                      endpoint: str | None = None, revision: str | None = None,
                      run: str | None = None) -> PushedCheckpoint:
    """``repo``'s ``last.pt`` at its head (or at ``revision``: the commit a resume was
    shown), with the status pushed with it (``hub``: the imported huggingface_hub).
    With ``run``, when that ``last.pt`` is another run's (a repository other runs push
    to as well), the earlier versions of ``last.pt`` are looked at, newest first (at
    most ``MAX_VERSIONS``), for the newest that is ``run``'s; the one at the head when
    none is. Raises ``HubError`` when there is no ``last.pt`` there or a status cannot
    be read; the client's own errors when the Hub cannot be asked."""
    api = hub.HfApi(endpoint=endpoint, token=token)
    head = str(api.model_info(repo, revision=revision).sha)
    info = _path_info(api, repo, CHECKPOINT, head)
    if info is None:
        raise HubError(f"{repo} holds no {CHECKPOINT} at {head[:12]}: nothing to resume from "
                       "(its milestones push it every hub_period epochs)")
    found = _checkpoint(hub, api, repo, info, token, endpoint)
    if run is None or found.run in (None, run):
        return found
    order = [c.commit_id for c in api.list_repo_commits(repo, revision=head)]
    older = found
    for _ in range(MAX_VERSIONS):
        at = order.index(older.commit) + 1 if older.commit in order else len(order)
        info = _path_info(api, repo, CHECKPOINT, order[at]) if at < len(order) else None
        if info is None:  # no last.pt before that one
            break
        older = _checkpoint(hub, api, repo, info, token, endpoint)
        if older.run == run:
            return older
    return found


def _checkpoint(hub: ModuleType, api: Any, repo: str, info: Any, token: str | None,
                endpoint: str | None) -> PushedCheckpoint:
    """The ``last.pt`` that ``info`` describes, at the commit that last changed it, with
    the status pushed in that same commit (``None`` when none came with it)."""
    last = _last_commit(repo, info)
    status = _path_info(api, repo, runfiles.STATUS_FILE, last.oid)
    with_it = status is not None and _last_commit(repo, status).oid == last.oid
    return PushedCheckpoint(repo, last.oid, last.date, info.lfs is not None,
                            _status_at(hub, repo, last.oid, token, endpoint) if with_it
                            else None)


def _path_info(api: Any, repo: str, name: str, revision: str) -> Any:
    """``name`` at ``revision`` (``RepoFile``, with the commit that last changed it);
    ``None`` when ``revision`` holds no ``name``."""
    infos = api.get_paths_info(repo, [name], expand=True, revision=revision)
    return next((i for i in infos if i.path == name), None)


def _last_commit(repo: str, info: Any) -> Any:
    """The last commit (``LastCommitInfo``: ``oid``, ``date``) that changed ``info``'s
    file."""
    if info.last_commit is None:
        raise HubError(f"{repo} did not say which commit pushed its {info.path}")
    return info.last_commit


def _status_at(hub: ModuleType, repo: str, commit: str, token: str | None,
               endpoint: str | None) -> dict[str, Any]:
    """The fields of ``repo``'s ``status.json`` at ``commit``, pushed with its
    ``last.pt``; ``HubError`` when it cannot be read."""
    try:
        path = hub.hf_hub_download(repo, runfiles.STATUS_FILE, revision=commit, token=token,
                                   endpoint=endpoint)
    except Exception as exc:
        raise HubError(f"download of {runfiles.STATUS_FILE} from {repo} failed: "
                       f"{describe_error(exc, endpoint)}") from exc
    read = runfiles.read_status(path)
    if read.fields is None:
        raise HubError(f"the {runfiles.STATUS_FILE} pushed with {repo}'s {CHECKPOINT} cannot "
                       f"be read: {read.reason}")
    return read.fields


def verify_pushed(entries: Sequence[dict[str, Any]], sha256: str, size: int | None = None,
                  *, repos: Collection[str], token: str | None = None,
                  endpoint: str | None = None) -> Verified:
    """Ask the Hub whether a ledger entry for a file with content ``sha256`` is true: the
    file exists at the entry's commit and its LFS sha256 (and size) match. One request
    (``paths-info`` at that commit) per entry tried, newest first, until one is confirmed.
    Only entries for ``repos`` (the user's own repositories) are asked: the ledger is the
    box's word, and a copy in a repository someone else controls is not the user's.

    Returns ``Verified(True, "ORG/NAME at COMMIT12")`` or ``Verified(False, why)``; a Hub
    that cannot be asked is ``Verified(False, "cannot verify (...)", failure)``: unknown
    counts as unsafe."""
    if not entries:
        return Verified(False, "never pushed")
    others = [e.get("repo") for e in entries if e.get("repo") not in repos]
    entries = [e for e in entries if e.get("repo") in repos]
    if not entries:
        named = ", ".join(dict.fromkeys(one_line(r, 60) for r in others))
        return Verified(False, f"pushed only to {named}, which is not one of your Hub "
                               "repositories (those you pushed to or launched with, or named)")
    try:
        hub = import_hub(progress_bars=False)
    except HubError as exc:
        return Verified(False, "cannot verify", str(exc))
    api = hub.HfApi(endpoint=endpoint or os.environ.get("HF_ENDPOINT") or None, token=token)
    why, failure = "", ""
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
            if not why:  # a 404 is the Hub's answer; any other failure is the Hub's own
                status = getattr(getattr(exc, "response", None), "status_code", None)
                said = describe_error(exc, endpoint, request=False)
                why, failure = ((f"not on the Hub ({where}): {said}", "") if status == 404
                                else (f"cannot verify ({where})", said))
            continue
        lfs = next((getattr(i, "lfs", None) for i in infos if getattr(i, "path", "") == path),
                   None)
        if not any(getattr(i, "path", "") == path for i in infos):
            why = why or f"not on the Hub: {one_line(path, 80)} is not in {where}"
        elif lfs is None or lfs.sha256 != sha256 or (size is not None and lfs.size != size):
            why = why or f"the Hub holds other content as {one_line(path, 80)} in {where}"
        else:
            return Verified(True, where)
    return Verified(False, why, failure)  # why the newest claim failed
