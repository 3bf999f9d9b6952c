"""The provider interface, the normalised instance, errors and the HTTP client.

Standard library only: the guard (``python3 -m trainer guard``) runs these clients on the
box, where only the ``trainer`` package is uploaded. The laptop reaches them through
``remote.billing.providers``.

Normalised instance states (``Instance.state``), whatever the provider calls them:

==============  ===============================================================  ==========
state           meaning                                                          billing
==============  ===============================================================  ==========
``starting``    being provisioned, booting, pulling its image, or asked to start GPU price
``running``     up and billed by the hour                                        GPU price
``stopping``    asked to stop, not stopped yet                                   GPU price
``stopped``     halted; GPUs released, the disk is kept                          storage
``paused``      frozen with memory kept (Vast ``frozen``)                        GPU price
``exited``      the container exited unexpectedly, not asked to stop            GPU price
``error``       the provider reports a fault (host offline, unhealthy, ERROR)    GPU price
``destroying``  asked to go away, not gone yet (Lambda ``terminating``)         GPU price
``destroyed``   the API confirms it is gone (404, null, terminated, preempted)  nothing
``unknown``     the provider does not say (or an unrecognised status)           GPU price
==============  ===============================================================  ==========

"Billing" is the worst case we assume: anything not confirmed stopped or destroyed is
treated as still costing the full price.
"""

from __future__ import annotations

import email.utils
import http.client
import json
import random
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from trainer.providers.pace import PACER, Pacer, Slot, fingerprint, pace_from_env
from trainer.providers.values import integer
from trainer.text import one_line

STATES = ("starting", "running", "stopping", "stopped", "paused", "exited", "error",
          "destroying", "destroyed", "unknown")

#: Hours in a billing month, to turn $/GB/month into $/h. A 30-day month: it reproduces the
#: published figure (250 GB at $0.20/GB/month = $0.0694/h); 730 (an average month) would
#: give $0.0685/h.
HOURS_PER_MONTH = 720.0

#: The default per-request timeout in seconds (connect and each read).
DEFAULT_TIMEOUT = 15.0
#: Longest wait we honour from a ``Retry-After`` header, in seconds.
MAX_RETRY_AFTER = 120.0
#: How long one request may spend waiting out rate limits (429s), in seconds.
DEFAULT_MAX_RATE_WAIT = 60.0
#: Response bodies larger than this are cut (a real answer is a few kilobytes).
MAX_BODY_BYTES = 4 * 1024 * 1024

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")
_ID_OK = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
#: What an API may give as an SSH host: a name, an IPv4 or an IPv6 address.
_HOST_OK = re.compile(r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$")


class _NoKeyAcrossOrigins(urllib.request.HTTPRedirectHandler):
    """Follows a redirect with the ``Authorization`` header only within the same origin
    (scheme, host and port): a redirect to another host, or from https to http, gets no
    key."""

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and _origin(newurl) != _origin(req.full_url):
            new.remove_header("Authorization")
        return new


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    port = parts.port or {"http": 80, "https": 443}.get(parts.scheme.lower())
    return parts.scheme.lower(), (parts.hostname or "").lower(), port


#: The one opener of every provider request (environment proxies as ``urlopen``).
_OPENER = urllib.request.build_opener(_NoKeyAcrossOrigins)


class ProviderError(Exception):
    """A provider call failed. ``str(exc)`` is one line a user can act on; ``kind`` is one of
    ``auth``, ``not_found``, ``conflict``, ``rate_limited``, ``server``, ``timeout``,
    ``network``, ``bad_response``, ``unsupported``, ``manual``, ``still_billing``,
    ``bad_input``; ``status`` is the HTTP status when there was one."""

    def __init__(self, message: str, *, kind: str = "error", status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(one_line(message, 500))
        self.kind = kind
        self.status = status
        #: Seconds the provider asked us to wait (``Retry-After``), when it said.
        self.retry_after = retry_after


class NotFoundError(ProviderError):
    """The instance does not exist (a wrong id, or it is already destroyed)."""

    def __init__(self, message: str, *, status: int | None = 404) -> None:
        super().__init__(message, kind="not_found", status=status)


@dataclass(frozen=True)
class Instance:
    """One rented instance as the provider reports it, in normalised terms.

    ``price_per_hour`` is the running price whatever the state (Vast: ``dph_base`` plus
    storage, not the state-dependent ``dph_total``);
    ``storage_per_hour`` is what a stopped instance keeps costing; ``raw`` is the
    provider's own object, for display and debugging."""

    state: str
    price_per_hour: float | None
    storage_per_hour: float | None
    disk_gb: float | None
    gpu: str | None
    ssh_host: str | None
    ssh_port: int | None
    raw: dict[str, Any] = field(default_factory=dict)
    id: str = ""
    provider: str = ""
    raw_state: str = ""
    storage_per_gb_month: float | None = None
    #: When the instance last started (epoch seconds), when the provider says.
    started_at: float | None = None
    #: GPU utilisation in percent as the provider reports it (Vast ``gpu_util``).
    gpu_util: float | None = None
    #: When the instance was created (epoch seconds), when the provider says.
    created_at: float | None = None
    #: What bills beside the instance and is not in its prices (RunPod: a network
    #: volume), in words; ``""`` when nothing is known to.
    also_bills: str = ""

    @property
    def gone(self) -> bool:
        """Whether the provider confirms the instance no longer exists."""
        return self.state == "destroyed"

    @property
    def billing_per_hour(self) -> float | None:
        """What the instance costs per hour in its current state (worst case)."""
        if self.state == "destroyed":
            return 0.0
        if self.state == "stopped":
            return self.storage_per_hour
        return self.price_per_hour

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (``raw`` left out; it can be large and holds provider secrets
        such as Jupyter tokens)."""
        out = asdict(self)
        out.pop("raw")
        out["billing_per_hour"] = self.billing_per_hour
        return out


@dataclass(frozen=True)
class SshAddress:
    """Where an instance's SSH server answers, as its provider reports it."""

    host: str
    port: int
    user: str

    @property
    def label(self) -> str:
        """``user@host:port`` (an IPv6 host in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.user}@{host}:{self.port}"


def ssh_address(host: Any, port: Any, user: Any) -> SshAddress | None:
    """An ``SshAddress`` from API fields, or ``None`` when a field is missing or is not
    a plausible host name / address, port or user name (API text goes into argv)."""
    host = host.strip() if isinstance(host, str) else ""
    port = integer(port)
    user = user.strip() if isinstance(user, str) else ""
    if not _HOST_OK.match(host) or port is None or not 0 < port < 65536:
        return None
    if not re.fullmatch(r"[A-Za-z0-9._][A-Za-z0-9._-]{0,63}", user):
        return None
    return SshAddress(host, port, user)


@dataclass(frozen=True)
class Response:
    """A decoded HTTP response."""

    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body as JSON (``None`` for an empty body); raises ``ValueError`` otherwise."""
        if not self.body.strip():
            return None
        return json.loads(self.body.decode("utf-8"))


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date)."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class Provider:
    """One provider's API. Subclasses set the class attributes and implement the calls.

    Every request has a timeout and waits its turn (``trainer.providers.pace``: the
    provider's minimum interval per key and endpoint, ``intervals``). A 429 is waited out
    (the wait its answer names: ``rate_wait``) and sent again, for at most
    ``max_rate_wait`` seconds in all; 5xx, timeouts and dropped connections are retried
    ``retries`` times with exponential backoff (honouring ``Retry-After``); then the
    failure is a ``ProviderError`` whose message is one line. ``sleep`` (the backoff's)
    is injectable for tests; the turns and the 429 waits are ``pacer``'s (its own clock
    and sleep: the process's, or a simulation's). ``pace`` scales every interval
    (default: ``GPURENT_API_PACE``, else 1)."""

    #: Short name used on the command line and in the config (``vast``).
    name = ""
    #: Human name (``Vast.ai``).
    title = ""
    #: The documented API base URL.
    default_base_url = ""
    #: Whether the provider can stop (and later start) an instance, keeping its disk.
    can_stop = True
    #: Seconds between two calls of one endpoint with one key (``endpoint`` names it).
    intervals: Mapping[str, float] = {}
    #: Seconds to wait after a 429 that does not say how long.
    rate_wait_default = 1.0
    #: The fields of the provider's instance object this client reads (a dotted path:
    #: ``instance_type.price_cents_per_hour``) and the JSON types each may have
    #: (``number``, ``string``, ``object``, ``array``, ``boolean``, ``null``): what
    #: ``gpurent providers check`` compares a real answer with.
    fields: Mapping[str, tuple[str, ...]] = {}
    #: Which API answered the last list (``v1``; a provider with several says which).
    list_api = ""

    def __init__(self, api_key: str | None, base_url: str | None = None, *,
                 timeout: float = DEFAULT_TIMEOUT, retries: int = 4, backoff: float = 1.0,
                 max_backoff: float = 30.0, max_rate_wait: float = DEFAULT_MAX_RATE_WAIT,
                 sleep: Callable[[float], None] = time.sleep,
                 pacer: Pacer | None = None, pace: float | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.api_key = api_key or ""
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self.timeout = timeout
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.max_rate_wait = max(0.0, max_rate_wait)
        self.sleep = sleep
        self.pacer = pacer or PACER
        #: The factor on every interval of ``intervals``.
        self.pace = pace_from_env() if pace is None else pace
        #: The wall clock that times the provider gives relative (an uptime) are put on.
        self.clock = clock
        #: Seconds this client waited for its turns and out 429s (for reports).
        self.waited = 0.0
        #: 429 answers this client met.
        self.rate_limited = 0

    def __repr__(self) -> str:  # never show the key
        return f"<{type(self).__name__} {self.base_url}>"

    # ------------------------------------------------------------------ the interface

    def get_instance(self, instance_id: str) -> Instance:
        """The instance now. Raises ``NotFoundError`` when the API says it does not exist."""
        raise NotImplementedError

    def list_instances(self) -> list[Instance]:
        """Every instance of the account (an account-level call: an instance's own key is
        refused). Raises ``ProviderError`` (one line)."""
        raise ProviderError(f"{self.title or 'this provider'} cannot list instances",
                            kind="unsupported")

    def stop(self, instance_id: str) -> None:
        """Ask the provider to stop the instance (returns before it has stopped)."""
        raise NotImplementedError

    def start(self, instance_id: str) -> None:
        """Ask the provider to start a stopped instance (returns before it runs)."""
        raise NotImplementedError

    def destroy(self, instance_id: str) -> None:
        """Ask the provider to destroy the instance and its disk (returns before it is
        gone; use ``trainer.providers.confirm.destroy_and_confirm`` to know)."""
        raise NotImplementedError

    def can_stop_now(self, instance: Instance) -> bool:
        """Whether a stop of ``instance`` in its state now can be accepted (a provider
        without stop: never)."""
        return self.can_stop

    def ssh_addresses(self, instance: Instance) -> list[SshAddress]:
        """Every address at which the provider says the instance's SSH server answers,
        the one to connect to first (``[]`` when it gives none: not running, no public
        address). What a stop or destroy compares with the box connected to. Subclasses
        read their own shape from ``instance.raw``."""
        found = ssh_address(instance.ssh_host, instance.ssh_port, "root")
        return [found] if found is not None else []

    def ssh_address(self, instance: Instance) -> SshAddress | None:
        """Where to connect to the instance now: the first of :meth:`ssh_addresses`."""
        found = self.ssh_addresses(instance)
        return found[0] if found else None

    def console_hint(self, action: str, instance_id: str) -> str:
        """What a person would do in the provider's web console instead."""
        return f"open the {self.title} console and {action} instance {instance_id}"

    # ------------------------------------------------------------------ helpers

    def check_id(self, instance_id: str) -> str:
        """``instance_id`` when it is a plausible id; a ``ProviderError`` otherwise."""
        text = str(instance_id).strip()
        if not _ID_OK.match(text):
            raise ProviderError(f"{self.title}: {one_line(text, 60)!r} is not an instance id",
                                kind="bad_input")
        return text

    def error_detail(self, status: int, payload: Any, text: str) -> tuple[str, str]:
        """``(code, message)`` from an error response; subclasses read their own shape."""
        return "", one_line(text, 200)

    def endpoint(self, method: str, path: str) -> str:
        """The name of the endpoint ``method path`` calls, as ``intervals`` keys it
        (``any`` where the provider keeps one limit for all)."""
        return "any"

    def rate_wait(self, headers: Mapping[str, str], text: str) -> float:
        """Seconds a 429 asks us to wait: its ``Retry-After``, else
        ``rate_wait_default``; subclasses read their own answer."""
        lower = {k.lower(): v for k, v in headers.items()}
        found = parse_retry_after(lower.get("retry-after"))
        return self.rate_wait_default if found is None else min(found, MAX_RETRY_AFTER)

    def request(self, method: str, path: str, *, body: Any = None,
                query: Mapping[str, str] | None = None,
                what: str = "request", base: str | None = None) -> Response:
        """Send one API request with auth, timeout, its turn and retries; return a 2xx
        response or raise a ``ProviderError`` (``NotFoundError`` for 404). ``base``: another
        root of the same API (a newer version), else ``base_url``."""
        url = (base or self.base_url) + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = None if body is None else json.dumps(body).encode("utf-8")
        name = self.endpoint(method, path)
        slot = Slot(self.base_url, fingerprint(self.api_key), name)
        interval = float(self.intervals.get(name, 0.0)) * self.pace
        attempt = limited = 0
        rate_waited = 0.0
        while True:
            wait = self.pacer.turn(slot, interval)
            if wait > 0:
                self.waited += wait
                self.pacer.sleep(wait)
            # The next turn counts from this send, not from this turn's booking: a send
            # that left late (a busy machine) must not bring the next one closer.
            self.pacer.hold(slot, interval)
            try:
                try:
                    return self._send_once(method, url, data, what)
                finally:
                    # ...and again from its answer: the provider counts from when the
                    # request reached it, somewhere between the send and the answer; a
                    # request that reached it late (a slow connection, a busy machine at
                    # either end) must not bring the next one closer there either.
                    self.pacer.hold(slot, interval)
            except ProviderError as exc:
                if exc.kind == "rate_limited":
                    limited += 1
                    self.rate_limited += 1
                    pause = exc.retry_after if exc.retry_after is not None \
                        else self.rate_wait_default
                    if rate_waited + pause > self.max_rate_wait:
                        exc.args = (f"{exc} (still limited after {limited} answers and "
                                    f"{rate_waited:.0f} s of waiting)",)
                        raise
                    rate_waited += pause
                    self.pacer.hold(slot, pause)
                    continue
                if exc.kind not in ("server", "timeout", "network") \
                        or attempt >= self.retries:
                    if attempt:
                        exc.args = (f"{exc} (after {attempt + 1} attempts)",)
                    raise
                delay = exc.retry_after if exc.retry_after is not None \
                    else self._backoff(attempt)
                attempt += 1
                self.waited += delay
                self.sleep(delay)

    def _backoff(self, attempt: int) -> float:
        base = min(self.max_backoff, self.backoff * (2 ** attempt))
        return base * (0.5 + random.random() / 2)

    def _send_once(self, method: str, url: str, data: bytes | None, what: str) -> Response:
        headers = {"Accept": "application/json", "User-Agent": "gpurent/0.1"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with _OPENER.open(req, timeout=self.timeout) as resp:
                return Response(resp.status, dict(resp.headers.items()),
                                resp.read(MAX_BODY_BYTES))
        except urllib.error.HTTPError as exc:
            try:
                body = exc.read(MAX_BODY_BYTES)
            except (OSError, ValueError):
                body = b""
            raise self._http_error(exc.code, dict(exc.headers.items()), body, what) from None
        except (TimeoutError, urllib.error.URLError, OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError) or isinstance(exc, TimeoutError):
                raise ProviderError(f"{self.title}: {what} timed out after {self.timeout:g} s "
                                    f"({self.base_url})", kind="timeout") from None
            raise ProviderError(f"{self.title}: cannot reach {self.base_url}: "
                                f"{one_line(getattr(reason, 'strerror', None) or reason, 120)}",
                                kind="network") from None
        except http.client.HTTPException as exc:  # a dropped or malformed answer
            raise ProviderError(f"{self.title}: {what} got a broken answer: "
                                f"{one_line(exc, 120)}", kind="network") from None

    def _http_error(self, status: int, headers: Mapping[str, str], body: bytes,
                    what: str) -> ProviderError:
        text = body.decode("utf-8", errors="replace")
        try:
            payload = json.loads(text) if text.strip() else None
        except ValueError:
            payload = None
        code, message = self.error_detail(status, payload, text)
        label = f"HTTP {status}" + (f" {one_line(code, 60)}" if code else "")
        detail = f": {message}" if message else ""
        lower = {k.lower(): v for k, v in headers.items()}
        if status in (401, 403):
            return ProviderError(f"{self.title}: {what} refused ({label}){detail}; check the "
                                 "API key", kind="auth", status=status)
        if status == 404:
            return NotFoundError(f"{self.title}: {what}: not found ({label}){detail}",
                                 status=status)
        if status == 409:
            return ProviderError(f"{self.title}: {what} not allowed now ({label}){detail}",
                                 kind="conflict", status=status)
        retry_after = parse_retry_after(lower.get("retry-after"))
        if retry_after is not None:
            retry_after = min(retry_after, MAX_RETRY_AFTER)
        if status == 429:
            return ProviderError(f"{self.title}: {what} rate limited ({label}){detail}",
                                 kind="rate_limited", status=status,
                                 retry_after=self.rate_wait(headers, text))
        if status >= 500:
            return ProviderError(f"{self.title}: {what} failed on the provider's side "
                                 f"({label}){detail}", kind="server", status=status,
                                 retry_after=retry_after)
        return ProviderError(f"{self.title}: {what} failed ({label}){detail}",
                             kind="bad_response", status=status)

    def json_of(self, resp: Response, what: str) -> Any:
        """The JSON body of a 2xx response, or a ``ProviderError`` when it is not JSON."""
        try:
            return resp.json()
        except (ValueError, UnicodeDecodeError):
            raise ProviderError(f"{self.title}: {what} answered something that is not JSON",
                                kind="bad_response", status=resp.status) from None
