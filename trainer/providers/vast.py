"""Vast.ai: ``https://console.vast.ai/api/v0``, ``Authorization: Bearer KEY``.

Documented shapes used here: ``GET /instances/?owner=me`` lists the account's instances
(``{"instances": [...]}``, each with ``start_date`` in epoch seconds and ``gpu_util`` in
percent when the host reports it); ``GET /instances/{id}/?owner=me`` answers
``{"instances": {...}}`` (or ``{"instances": null}`` for an id that is not there) whose
SSH address is ``public_ipaddr`` with the host port mapped to ``ports["22/tcp"]``
(``[{"HostIp": "0.0.0.0", "HostPort": "41022"}]``, direct) or ``ssh_host``/``ssh_port``
(Vast's SSH proxy, ``sshN.vast.ai``), user ``root``;
``PUT /instances/{id}/`` with ``{"state": "stopped"|"running"}`` and
``DELETE /instances/{id}/`` answer ``{"success": true, ...}``; errors are
``{"success": false, "error": CODE, "msg": ...}``, except 429, which is plain text.

Prices: ``dph_total`` follows the instance's state (running: ``dph_base`` plus storage;
stopped: the storage alone), so the running price is taken from the running-rate fields,
``dph_base + storage_total_cost``; ``dph_total`` is used only while it is running and
``dph_base`` is missing.
"""

from __future__ import annotations

from typing import Any

from trainer.providers.base import (
    Instance,
    NotFoundError,
    Provider,
    ProviderError,
    SshAddress,
    epoch_of,
    integer,
    listed,
    number,
    ssh_address,
    text_or_none,
)
from trainer.text import one_line


def vast_state(actual: Any, intended: Any) -> str:
    """Normalise Vast's ``actual_status`` given the ``intended_status``.

    ``exited`` means the container ended on its own (still billed until stopped); once
    the user asked for ``stopped`` it is a plain stop. A stopped instance whose intended
    status is ``running`` is waiting to start (its GPUs may be taken: it can wait long)."""
    actual = (actual or "").lower() if isinstance(actual, str) or actual is None else "?"
    intended = intended.lower() if isinstance(intended, str) else ""
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
        return Instance(
            state=vast_state(raw.get("actual_status"), raw.get("intended_status")),
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
            started_at=epoch_of(raw.get("start_date")),
            gpu_util=number(raw.get("gpu_util")),
        )

    def list_instances(self) -> list[Instance]:
        """``GET /instances/?owner=me``: ``{"instances": [...]}``."""
        what = "list instances"
        data = self.json_of(self.request("GET", "/instances/", query={"owner": "me"},
                                         what=what), what)
        return [self.parse(str(raw.get("id")), raw) for raw in listed(data, "instances")
                if str(raw.get("id") or "").isdigit()]

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
