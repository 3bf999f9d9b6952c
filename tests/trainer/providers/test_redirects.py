"""The provider API key never follows a redirect to another origin: two real local HTTP
servers, one answering 302 to the other, and the real client code path
(``trainer.providers.base.Provider.request``)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from trainer.providers import get_provider

KEY = "vast-secret-key-0123456789"
INSTANCE = {"instances": {"id": 7, "actual_status": "running", "intended_status": "running",
                          "dph_total": 0.5}}


class Server:
    """A local HTTP server that records the headers it got and answers with ``reply``
    (``(status, headers, body)``) for each path."""

    def __init__(self, host: str) -> None:
        self.seen: list[tuple[str, dict[str, str]]] = []
        self.replies: dict[str, tuple[int, dict[str, str], bytes]] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                server.seen.append((self.path, dict(self.headers.items())))
                status, headers, body = server.replies.get(self.path.split("?")[0],
                                                           (404, {}, b"{}"))
                self.send_response(status)
                for key, value in {"Content-Length": str(len(body)), **headers}.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.host = host
        self.url = f"http://{host}:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def servers() -> Iterator[tuple[Server, Server]]:
    api, other = Server("127.0.0.1"), Server("localhost")
    yield api, other
    api.close()
    other.close()


def auth_of(headers: dict[str, str]) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == "authorization"), None)


def test_a_redirect_to_another_host_sends_no_key(servers: tuple[Server, Server]) -> None:
    api, other = servers
    api.replies["/instances/7/"] = (302, {"Location": f"{other.url}/collect"}, b"")
    other.replies["/collect"] = (200, {"Content-Type": "application/json"},
                                 json.dumps(INSTANCE).encode())
    provider = get_provider("vast", KEY, base_url=api.url, retries=0)
    provider.get_instance("7")
    assert auth_of(api.seen[0][1]) == f"Bearer {KEY}"
    assert [path for path, _ in other.seen] == ["/collect"]
    assert auth_of(other.seen[0][1]) is None
    assert all(KEY not in value for value in other.seen[0][1].values())


def test_a_redirect_within_the_api_keeps_the_key(servers: tuple[Server, Server]) -> None:
    api, _ = servers
    api.replies["/instances/7/"] = (301, {"Location": "/v2/instances/7/"}, b"")
    api.replies["/v2/instances/7/"] = (200, {"Content-Type": "application/json"},
                                       json.dumps(INSTANCE).encode())
    provider = get_provider("vast", KEY, base_url=api.url, retries=0)
    assert provider.get_instance("7").state == "running"
    assert [auth_of(h) for _, h in api.seen] == [f"Bearer {KEY}"] * 2


def test_a_redirect_to_another_port_of_the_same_host_sends_no_key(
        servers: tuple[Server, Server]) -> None:
    api, _ = servers
    elsewhere = Server("127.0.0.1")
    try:
        api.replies["/instances/7/"] = (307, {"Location": f"{elsewhere.url}/x"}, b"")
        elsewhere.replies["/x"] = (200, {}, json.dumps(INSTANCE).encode())
        get_provider("vast", KEY, base_url=api.url, retries=0).get_instance("7")
        assert auth_of(elsewhere.seen[0][1]) is None
    finally:
        elsewhere.close()
