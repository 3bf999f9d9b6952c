"""Running the glance page: a fresh token, the URL that carries it, the server and its
gatherer started and stopped together, and the record of the running one
(``remote.glance.record``) written while it serves.

The token travels in the URL's fragment (``#t=...``): a browser never sends a fragment
to a server, so it never lands in a log, a proxy or a ``Referer``; the page's script
reads it and sends it as ``Authorization: Bearer``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from remote.billing.accounts import Account, configured_accounts
from remote.billing.providers import ConfigError, notify_config
from remote.fleet.fleet import Fleet, FleetOptions
from remote.glance.gather import EVERY, Gatherer
from remote.glance.record import record_path, write_private
from remote.glance.server import GlanceServer

#: Where it listens unless told: this machine only.
LISTEN = "127.0.0.1"
PORT = 8765


def new_token() -> str:
    """A fresh token (``secrets.token_urlsafe(32)``: 256 random bits)."""
    return secrets.token_urlsafe(32)


def is_loopback(listen: str) -> bool:
    """Whether ``listen`` is this machine only (``127.0.0.1``, ``::1``, ``localhost``)."""
    if listen == "localhost":
        return True
    try:
        return ipaddress.ip_address(listen).is_loopback
    except ValueError:
        return False


def page_url(listen: str, port: int, token: str) -> str:
    """``http://HOST:PORT/#t=TOKEN``; a wildcard address is named by this machine's
    host name (the address a phone would use is the user's to pick: a Tailscale name)."""
    host = socket.gethostname() if listen in ("", "0.0.0.0", "::") else listen
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}/#t={token}"


def laptop_secrets(accounts: Callable[[], list[Account]]) -> list[str]:
    """What must never appear in an answer: the accounts' keys, the webhook URLs, the
    Hub token (read once, when the server starts)."""
    found: list[str] = []
    with contextlib.suppress(ConfigError, ValueError, OSError):
        found += [a.key for a in accounts() if a.key]
    with contextlib.suppress(ConfigError, ValueError, OSError):
        found += notify_config()[0]
    with contextlib.suppress(Exception):
        from remote.weights.push import laptop_token

        found.append(laptop_token() or "")
    return [s for s in found if s]


@dataclass
class Glance:
    """A started glance page: its server, gatherer, token and URL."""

    server: GlanceServer
    gatherer: Gatherer
    token: str
    url: str
    thread: threading.Thread | None = None

    def start(self, record: bool = True) -> Glance:
        """Start the gatherer and serve (in a thread); write the record."""
        self.gatherer.start()
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.2,),
                                       daemon=True, name="glance-http")
        self.thread.start()
        if record:
            write_private(record_path(), {"url": self.url, "pid": os.getpid(),
                                           "started": time.time()})
        return self

    def close(self) -> None:
        """Stop serving and gathering; remove the record when it is this one's."""
        self.server.shutdown()
        self.server.server_close()
        self.gatherer.stop()
        with contextlib.suppress(OSError, ValueError):
            data = json.loads(record_path().read_text(encoding="utf-8"))
            if isinstance(data, dict) and data.get("pid") == os.getpid():
                record_path().unlink()


def open_glance(options: FleetOptions, *, listen: str = LISTEN, port: int = PORT,
                every: float = EVERY,
                accounts: Callable[[], list[Account]] = configured_accounts,
                lister: Callable[[list[Account], FleetOptions], Fleet] | None = None,
                token: str | None = None) -> Glance:
    """A glance page bound to ``listen:port`` (port 0: any free one), not started yet.
    ``OSError`` when the address cannot be bound."""
    token = token or new_token()
    gatherer = Gatherer(options, every, accounts=accounts, lister=lister)
    hidden = laptop_secrets(accounts)
    server = GlanceServer((listen, port), gatherer, token, lambda: [*hidden, *gatherer.keys])
    return Glance(server, gatherer, token, page_url(listen, server.port, token))
