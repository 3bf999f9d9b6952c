"""Vast.ai: ``https://console.vast.ai/api/v0``, ``Authorization: Bearer KEY``.

Documented shapes used here: ``GET /api/v1/instances/`` lists the account's instances, 25
a page (``{"instances": [...], "next_token": ...}``; the next page is asked with
``after_token``), and the v0 ``GET /instances/?owner=me`` (``{"instances": [...]}``, which
Vast's CLI calls deprecated) is asked only when v1 is not there. Each instance has
``start_date`` (epoch seconds: its creation, which a restart does not change),
``uptime_mins`` (minutes since its last start; ``null`` while not running) and ``gpu_util``
in percent when the host reports it. ``GET /instances/{id}/?owner=me`` answers
``{"instances": {...}}`` (or ``{"instances": null}`` for an id that is not there) whose
SSH address is ``public_ipaddr`` with the host port mapped to ``ports["22/tcp"]``
(``[{"HostIp": "0.0.0.0", "HostPort": "41022"}]``, direct) or ``ssh_host``/``ssh_port``
(Vast's SSH proxy, ``sshN.vast.ai``), user ``root``;
``PUT /instances/{id}/`` with ``{"state": "stopped"|"running"}`` and
``DELETE /instances/{id}/`` answer ``{"success": true, ...}``; errors are
``{"success": false, "error": CODE, "msg": ...}``, except 429, which is plain text naming
the endpoint's interval. A destroyed instance can linger a while with ``cur_state``
``unloaded`` (released) before its id answers ``null``. An account key that needs a 2FA
session is refused with 401 (a message naming Two Factor Authentication), and an expired
session answers 404 ``{"msg": "Session expired. Please log in again."}``: that 404 is a
refused key, never "not found".

Prices: ``dph_total`` follows the instance's state (running: ``dph_base`` plus storage;
stopped: the storage alone), so the running price is taken from the running-rate fields,
``dph_base + storage_total_cost``; ``dph_total`` is used only while it is running and
``dph_base`` is missing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from trainer.providers.base import (
    Instance,
    NotFoundError,
    Provider,
    ProviderError,
    SshAddress,
    ssh_address,
)
from trainer.providers.values import epoch_of, integer, listed, number, text_or_none
from trainer.text import one_line


def vast_state(actual: Any, intended: Any) -> str:
    """Normalise Vast's ``actual_status`` given the ``intended_status``.

    ``exited`` means the container ended on its own (still billed until stopped); once
    the user asked for ``stopped`` it is a plain stop. A stopped instance whose intended
    status is ``running`` is waiting to start (its GPUs may be taken: it can wait long)."""
    actual = (actual or "").lower() if isinstance(actual, str) or actual is None else "?"
    intended = intended.lower() if isinstance(intended, str) else ""
    if actual in ("destroyed", "unloaded"):
        return "destroyed"
    if actual in ("", "created", "loading", "rebooting"):
        return "starting"
    if actual == "running":
        return "stopping" if intended == "stopped" else "running"
    if actual == "stopped":
        return "starting" if intended == "running" else "stopped"
    if actual == "exited":
        return "stopped" if intended == "stopped" else "exited"
    if actual == "frozen":
        return "paused"
    if actual == "offline":
        return "error"
    return "unknown"


def last_start(raw: dict[str, Any], now: float) -> float | None:
    """When the instance last started (epoch seconds), from ``uptime_mins`` while it
    runs; ``None`` when Vast does not say. Never ``start_date``: that is its creation."""
    if str(raw.get("actual_status") or "").lower() != "running":
        return None
    uptime = number(raw.get("uptime_mins"))
    return None if uptime is None or uptime < 0 else now - uptime * 60.0


def running_price(raw: dict[str, Any]) -> float | None:
    """What the instance costs per hour while it runs, whatever its state now."""
    base = number(raw.get("dph_base"))
    if base is not None:
        return base + (number(raw.get("storage_total_cost")) or 0.0)
    if str(raw.get("actual_status") or "").lower() == "running":
        return number(raw.get("dph_total"))
    return None


def vast_ssh_addresses(raw: Any) -> list[SshAddress]:
    """The direct address (``public_ipaddr`` and the host port of ``22/tcp``) when Vast
    reports one, then its SSH proxy (``ssh_host``/``ssh_port``)."""
    if not isinstance(raw, dict):
        return []
    found: list[SshAddress | None] = []
    ports = raw.get("ports")
    mapped = ports.get("22/tcp") if isinstance(ports, dict) else None
    for binding in mapped if isinstance(mapped, list) else []:
        if isinstance(binding, dict) and ":" not in str(binding.get("HostIp") or ""):
            found.append(ssh_address(raw.get("public_ipaddr"), binding.get("HostPort"),
                                     "root"))
    found.append(ssh_address(raw.get("ssh_host"), raw.get("ssh_port"), "root"))
    return [address for address in found if address is not None]


class VastProvider(Provider):
    """The Vast.ai REST API (v0)."""

    name = "vast"
    title = "Vast.ai"
    default_base_url = "https://console.vast.ai/api/v0"
    can_stop = True
    #: Vast's minimum seconds between two calls of an endpoint with one key (its docs'
    #: rate limits, the OpenAPI files' ``x-rate-limit`` thresholds).
    intervals = {"show": 2.0, "list": 1.0, "change": 1.0, "destroy": 3.0}
    rate_wait_default = 2.0
    fields = {
        "id": ("number",), "actual_status": ("string", "null"),
        "intended_status": ("string", "null"), "cur_state": ("string", "null"),
        "start_date": ("number", "null"), "uptime_mins": ("number", "null"),
        "dph_base": ("number", "null"), "dph_total": ("number", "null"),
        "storage_total_cost": ("number", "null"), "storage_cost": ("number", "null"),
        "disk_space": ("number", "null"), "gpu_name": ("string", "null"),
        "num_gpus": ("number", "null"), "gpu_util": ("number", "null"),
        "public_ipaddr": ("string", "null"), "ports": ("object", "null"),
        "ssh_host": ("string", "null"), "ssh_port": ("number", "null"),
    }

    def endpoint(self, method: str, path: str) -> str:
        """``list`` (``GET /instances/``), ``show`` (one instance), ``change`` (a PUT:
        start, stop) or ``destroy`` (a DELETE)."""
        parts = [p for p in path.split("/") if p]
        if method == "DELETE":
            return "destroy"
        if method == "PUT":
            return "change"
        return "show" if len(parts) >= 2 else "list"

    def rate_wait(self, headers: Mapping[str, str], text: str) -> float:
        """Vast's 429 is plain text naming the interval (``API requests too frequent
        endpoint threshold=2.0``), with no ``Retry-After``."""
        found = re.search(r"threshold\s*=\s*([0-9]+(?:\.[0-9]+)?)", text)
        if found:
            return min(float(found.group(1)), 120.0)
        return super().rate_wait(headers, text)

    def check_id(self, instance_id: str) -> str:
        """Vast ids are numbers; ``C.12345`` (the container label) is accepted too."""
        text = str(instance_id).strip()
        if text.startswith("C."):
            text = text[2:]
        if not text.isdigit():
            raise ProviderError(f"Vast.ai: {one_line(text, 60)!r} is not an instance id "
                                "(a number such as 12345)", kind="bad_input")
        return text

    def error_detail(self, status: int, payload: Any, text: str) -> tuple[str, str]:
        """``{"success": false, "error": CODE, "msg": ...}``, or a plain-text body."""
        if isinstance(payload, dict):
            code = payload.get("error")
            msg = payload.get("msg") or payload.get("message") or payload.get("detail")
            return one_line(code or "", 60), one_line(msg or "", 200)
        return "", one_line(text, 200)

    def _http_error(self, status: int, headers: Mapping[str, str], body: bytes,
                    what: str) -> ProviderError:
        """An expired 2FA session (a 404) and a 2FA refusal are refused keys."""
        text = body.decode("utf-8", errors="replace")
        lowered = text.lower()
        if status in (401, 403, 404) and ("session expired" in lowered
                                          or "two factor" in lowered or "2fa" in lowered):
            return ProviderError(f"Vast.ai: {what} refused (HTTP {status}: "
                                 f"{one_line(text, 120)}): this key needs a 2FA session "
                                 "that expired or was never opened; renew the key (an API "
                                 "key without 2FA sessions, or log in again)", kind="auth",
                                 status=status)
        return super()._http_error(status, headers, body, what)

    def get_instance(self, instance_id: str) -> Instance:
        """``GET /instances/{id}/?owner=me``; ``{"instances": null}`` means not found."""
        iid = self.check_id(instance_id)
        what = f"get instance {iid}"
        data = self.json_of(self.request("GET", f"/instances/{iid}/", query={"owner": "me"},
                                         what=what), what)
        found = data.get("instances") if isinstance(data, dict) else None
        if isinstance(found, list):
            found = found[0] if found else None
        if not isinstance(found, dict):
            raise NotFoundError(f"Vast.ai: no instance {iid} on this account (wrong id, or "
                                "already destroyed)", status=200)
        return self.parse(iid, found)

    def parse(self, iid: str, raw: dict[str, Any]) -> Instance:
        """An ``Instance`` from Vast's instance object."""
        gpus = integer(raw.get("num_gpus"))
        name = text_or_none(raw.get("gpu_name"))
        gpu = f"{gpus}x {name}" if name and gpus else name
        addresses = vast_ssh_addresses(raw)
        address = addresses[0] if addresses else None
        state = vast_state(raw.get("actual_status"), raw.get("intended_status"))
        if str(raw.get("cur_state") or "").lower() == "unloaded":
            state = "destroyed"  # released by a destroy, not forgotten yet
        return Instance(
            state=state,
            price_per_hour=running_price(raw),
            storage_per_hour=number(raw.get("storage_total_cost")),
            disk_gb=number(raw.get("disk_space")),
            gpu=gpu,
            ssh_host=address.host if address else None,
            ssh_port=address.port if address else None,
            raw=raw,
            id=iid,
            provider=self.name,
            raw_state=one_line(raw.get("actual_status"), 40),
            storage_per_gb_month=number(raw.get("storage_cost")),
            started_at=last_start(raw, self.clock()),
            gpu_util=number(raw.get("gpu_util")),
            created_at=epoch_of(raw.get("start_date")),
        )

    #: Pages of the v1 list read at most (25 instances each).
    max_pages = 40

    def list_instances(self) -> list[Instance]:
        """``GET /api/v1/instances/`` page by page; the v0 list when there is no v1."""
        what = "list instances"
        rows: list[dict[str, Any]] = []
        v1 = self._v1_base()
        if v1 is not None:
            try:
                rows = self._list_v1(v1, what)
                self.list_api = "v1"
            except ProviderError as exc:
                if exc.status not in (404, 405, 410):
                    raise
                v1 = None
        if v1 is None:
            data = self.json_of(self.request("GET", "/instances/", query={"owner": "me"},
                                             what=what), what)
            rows = listed(data, "instances")
            self.list_api = "v0 (deprecated)"
        seen: dict[str, Instance] = {}
        for raw in rows:
            iid = str(raw.get("id") or "")
            if iid.isdigit():
                seen[iid] = self.parse(iid, raw)
        return list(seen.values())

    def _v1_base(self) -> str | None:
        """The v1 API's root beside ``base_url`` (``.../api/v0`` -> ``.../api/v1``)."""
        return self.base_url[:-3] + "/v1" if self.base_url.endswith("/v0") else None

    def _list_v1(self, v1: str, what: str) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = []
        query = {"limit": "25", "order_by": '[{"col": "id", "dir": "asc"}]'}
        for _page in range(self.max_pages):
            data = self.json_of(self.request("GET", "/instances/", query=query, what=what,
                                             base=v1), what)
            rows.extend(listed(data, "instances"))
            token = data.get("next_token") if isinstance(data, dict) else None
            if not isinstance(token, str) or not token or token == query.get("after_token"):
                return rows
            query["after_token"] = token
        raise ProviderError(f"Vast.ai: {what}: more than {self.max_pages} pages",
                            kind="bad_response")

    def ssh_addresses(self, instance: Instance) -> list[SshAddress]:
        """See ``vast_ssh_addresses``."""
        return vast_ssh_addresses(instance.raw)

    def _put_state(self, iid: str, state: str, what: str) -> None:
        data = self.json_of(self.request("PUT", f"/instances/{iid}/", body={"state": state},
                                         what=what), what)
        self._check_success(data, what)

    def _check_success(self, data: Any, what: str) -> None:
        if isinstance(data, dict) and data.get("success") is False:
            code, msg = self.error_detail(200, data, "")
            raise ProviderError(f"Vast.ai: {what} failed ({code or 'no code'}): {msg}",
                                kind="bad_response", status=200)

    def stop(self, instance_id: str) -> None:
        """``PUT /instances/{id}/ {"state": "stopped"}``."""
        iid = self.check_id(instance_id)
        self._put_state(iid, "stopped", f"stop instance {iid}")

    def start(self, instance_id: str) -> None:
        """``PUT /instances/{id}/ {"state": "running"}``."""
        iid = self.check_id(instance_id)
        self._put_state(iid, "running", f"start instance {iid}")

    def destroy(self, instance_id: str) -> None:
        """``DELETE /instances/{id}/``."""
        iid = self.check_id(instance_id)
        what = f"destroy instance {iid}"
        self._check_success(self.json_of(self.request("DELETE", f"/instances/{iid}/",
                                                      what=what), what), what)

    def console_hint(self, action: str, instance_id: str) -> str:
        """Where to click on https://cloud.vast.ai/instances/."""
        return (f"open https://cloud.vast.ai/instances/, find instance {instance_id} and press "
                f"its {'delete (trash)' if action == 'destroy' else action} button")
