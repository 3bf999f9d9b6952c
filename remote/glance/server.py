"""The glance page's HTTP server: standard library (``http.server``), GET only, read-only.

Served: the page (``/``, ``/app.js``, ``/app.css``: static files, no data in them) and the
JSON the page polls, shaped like ``libreyolo monitor``'s: ``/api/runs``,
``/api/status?run=ID``, ``/api/metrics?run=ID``, ``/api/log?run=ID&bytes=N``, plus
``/api/instances``. Every answer comes from the gatherer's last snapshot: a request
never reaches a provider or a box.

Every ``/api/`` request needs the token (``Authorization: Bearer TOKEN``, compared with
``hmac.compare_digest``; 403 without it), on 127.0.0.1 too: any web page the browser
opens may send requests to a local port (and read the answers after a DNS rebinding),
and other users of the machine can reach it. Any other method than GET gets 405: there
is no action of any kind here. Every response carries a strict Content-Security-Policy
(scripts and styles from this origin only, no inline script, no framing, nothing
fetched from elsewhere) and ``nosniff``; the laptop's secrets are redacted from every
JSON body (``remote.glance.shape.redact``).
"""

from __future__ import annotations

import hmac
import json
import re
import socket
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from remote.glance.gather import Gatherer, KnownRun, run_entry
from remote.glance.shape import LOG_BYTES, MAX_LOG_BYTES, log_text, metrics_table, redact

#: The page's files (``remote/glance/static``) by path, with their types.
STATIC = Path(__file__).with_name("static")
PAGES = {"/": ("index.html", "text/html; charset=utf-8"),
         "/app.js": ("app.js", "text/javascript; charset=utf-8"),
         "/app.css": ("app.css", "text/css; charset=utf-8")}
#: The Content-Security-Policy of every response.
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
           "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY",
           "Cache-Control": "no-store", "Cross-Origin-Opener-Policy": "same-origin",
           "Cross-Origin-Resource-Policy": "same-origin"}
#: The longest request target served, and a run id's form.
MAX_TARGET = 2048
RUN_ID = re.compile(r"[0-9a-f]{16}")
#: What a refused method's body may be drained of (bytes).
MAX_DRAIN = 65536


class GlanceServer(ThreadingHTTPServer):
    """The server: ``gatherer`` answers, ``token`` guards ``/api/``, ``secrets()``
    names what must never appear in an answer."""

    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], gatherer: Gatherer, token: str,
                 secrets: Callable[[], Iterable[str]] = tuple) -> None:
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        self.gatherer = gatherer
        self.token = token
        self.secrets = secrets
        self.pages = {path: ((STATIC / name).read_bytes(), kind)
                      for path, (name, kind) in PAGES.items()}
        super().__init__(address, GlanceHandler)

    @property
    def port(self) -> int:
        """The port it listens on (the one the system chose for port 0)."""
        return int(self.server_address[1])


class GlanceHandler(BaseHTTPRequestHandler):
    """One request (see the module doc)."""

    server: GlanceServer
    server_version = "gpurent-glance"
    sys_version = ""
    #: Seconds a client may take to send its request.
    timeout = 15

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        """Quiet: nothing of a request is logged."""

    def version_string(self) -> str:
        """``Server:``: the name alone (no Python version)."""
        return self.server_version

    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):  # every method but GET
            return self._not_allowed
        raise AttributeError(name)

    def _send(self, status: int, body: bytes, kind: str, **more: str) -> None:
        self.send_response(status)
        for key, value in {**HEADERS, **more}.items():
            self.send_header(key, value)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, body: Any) -> None:
        clean = redact(body, [self.server.token, *self.server.secrets()])
        data = json.dumps(clean, allow_nan=False, separators=(",", ":")).encode()
        self._send(status, data, "application/json")

    def _not_allowed(self) -> None:
        length = self.headers.get("Content-Length", "")
        if length.isdigit() and int(length) <= MAX_DRAIN:
            self.rfile.read(int(length))
        self.close_connection = True
        self._json(405, {"error": "only GET is served: the glance page has no actions"})

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """An error the base class finds (a malformed request line, say), as JSON with
        the same headers as every answer."""
        self.close_connection = True
        self._json(code, {"error": message or self.responses.get(code, ("error",))[0]})

    def send_response(self, code: int, message: str | None = None) -> None:
        """The status line, and ``Allow: GET`` on a 405."""
        super().send_response(code, message)
        if code == 405:
            self.send_header("Allow", "GET")

    def do_GET(self) -> None:  # noqa: N802 - the base's name
        """A page file, or (with the token) one of the JSON answers."""
        if len(self.path) > MAX_TARGET:
            self._json(414, {"error": "request target too long"})
            return
        url = urlsplit(self.path)
        page = self.server.pages.get(url.path)
        if page is not None:
            self._send(200, page[0], page[1])
            return
        if not url.path.startswith("/api/"):
            self._json(404, {"error": "not found"})
            return
        if not self._authorized():
            self._json(403, {"error": "forbidden: open the link gpurent glance printed "
                                      "(its #t=... part is the token)"})
            return
        query = parse_qs(url.query, max_num_fields=8)
        answer = self._answer(url.path, {k: v[0] for k, v in query.items() if v})
        self._json(*answer)

    def _authorized(self) -> bool:
        scheme, _, given = self.headers.get("Authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode("utf-8", "replace"), self.server.token.encode())

    def _answer(self, path: str, query: dict[str, str]) -> tuple[int, Any]:
        snap = self.server.gatherer.snapshot()
        head = {"at": snap.at, "every": snap.every, "passes": snap.passes,
                "seconds": round(snap.seconds, 3), "error": snap.error or None}
        now = self.server.gatherer.clock()
        if path == "/api/runs":
            return 200, {**head, "runs": [run_entry(r, now) for r in snap.runs]}
        if path == "/api/instances":
            return 200, {**head, "billing": snap.billing, "instances": snap.instances}
        if path not in ("/api/status", "/api/metrics", "/api/log"):
            return 404, {"error": "not found"}
        wanted = query.get("run", "")
        if not RUN_ID.fullmatch(wanted):
            return 400, {"error": "run= must be a run's id, as /api/runs gives it"}
        run = snap.details.get(wanted)
        if run is None:
            return 404, {"error": "no such run (yet)"}
        if path == "/api/status":
            return 200, status_answer(run, now)
        if path == "/api/metrics":
            return 200, run.seen.metrics if run.seen is not None else metrics_table([])
        try:
            nbytes = max(1, min(int(query.get("bytes") or LOG_BYTES), MAX_LOG_BYTES))
        except ValueError:
            return 400, {"error": "bytes= must be a number"}
        log, cut = log_text(run.seen.log if run.seen is not None else b"", nbytes)
        return 200, {"log": log, "bytes": nbytes, "truncated": cut}


def status_answer(run: KnownRun, now: float) -> dict[str, Any]:
    """``/api/status``: the run's status.json (bounded; ``{"state": "missing"}`` when
    never read), and beside it what the laptop judged and where it is."""
    entry = run_entry(run, now)
    status = dict(run.seen.status) if run.seen is not None and run.seen.status else \
        {"state": "missing"}
    return {**status, "gpurent": {k: entry[k] for k in (
        "id", "name", "target", "account", "health", "reason", "reached", "seen_at",
        "lost_since", "why", "cost_usd", "projected_usd", "price_per_hour", "words")}}
