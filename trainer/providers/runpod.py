"""RunPod pods through REST v2: ``https://api.runpod.io/v2``, ``Authorization: Bearer KEY``.

Documented shapes used here: ``GET /pods?includeClusterPods=true`` lists the account's
pods (``{"pods": [...]}``; Instant Cluster members are left out without that flag), each
as ``GET /pods/{id}`` answers it, with ``startedAt`` (ISO-8601, its last start; v1 called
it ``lastStartedAt``, read too, as are ``desiredStatus`` and ``costPerHr``) and
``createdAt``. ``GET /pods/{id}`` answers the pod (``status`` one of
PROVISIONING, STARTING, RUNNING, EXITED, ERROR, TERMINATED; ``cost`` in $/h, 0 when
EXITED; ``disk``; ``mounts.persistent.size``; ``gpu.id``/``gpu.count``; ``ssh.direct``
{host, port, username}: the pod's public IP and the port mapped to its port 22; the v1
shape ``publicIp`` with ``portMappings {"22": PORT}`` is read too). The basic SSH proxy
(``ssh.runpod.io``) is never an address here: it runs no commands and no SFTP.
``POST /pods/{id}/action`` with ``{"action": "stop"|"start"}`` answers the pod, or 409
when the action is not allowed now (an EXITED or ERROR pod takes only start or
terminate). ``DELETE /pods/{id}`` answers 204 without a body. A network volume
(``mounts.network``) bills on its own ($0.07/GB-month), whatever the pod does.
A 429 says how long to wait in ``Retry-After`` (60 requests a minute per key).
Errors are ``application/problem+json`` ``{"title", "status", "detail"}``.
(REST v1, ``rest.runpod.io/v1``, is retired on 2026-11-15.)
"""

from __future__ import annotations

from typing import Any

from trainer.providers.base import (
    HOURS_PER_MONTH,
    Instance,
    Provider,
    ProviderError,
    SshAddress,
    ssh_address,
)
from trainer.providers.values import epoch_of, integer, listed, number, text_or_none
from trainer.text import one_line

#: RunPod's basic SSH proxy: a shell only, no commands, no SFTP.
BASIC_PROXY_HOST = "ssh.runpod.io"

#: What a stopped pod's volume disk costs, $/GB/month (RunPod pricing).
STOPPED_VOLUME_PER_GB_MONTH = 0.20
#: What a network volume costs, $/GB/month (under 1 TB; RunPod pricing).
NETWORK_VOLUME_PER_GB_MONTH = 0.07

_STATES = {
    "PROVISIONING": "starting",
    "STARTING": "starting",
    "RUNNING": "running",
    "EXITED": "stopped",
    "ERROR": "error",
    "TERMINATED": "destroyed",
}


def _get(raw: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(raw, dict):
            return None
        raw = raw.get(key)
    return raw


def runpod_ssh_address(raw: Any) -> SshAddress | None:
    """The pod's public IP and the port mapped to its port 22 (``ssh.direct``, else
    ``publicIp`` + ``portMappings["22"]``); never the basic proxy."""
    direct = _get(raw, "ssh", "direct")
    address = ssh_address(_get(direct, "host"), _get(direct, "port"),
                          _get(direct, "username") or "root")
    if address is None:
        mappings = _get(raw, "portMappings")
        port = mappings.get("22") if isinstance(mappings, dict) else None
        address = ssh_address(_get(raw, "publicIp"), port, "root")
    if address is None or address.host.lower().rstrip(".") == BASIC_PROXY_HOST:
        return None
    return address


def network_volume_words(raw: Any) -> str:
    """``a network volume (vol1, billed on its own at $0.07/GB-month)`` when the pod
    mounts one, else ``""``."""
    mounts = _get(raw, "mounts", "network")
    ids = [one_line(m.get("volumeId") or "?", 40) for m in mounts if isinstance(m, dict)] \
        if isinstance(mounts, list) else []
    if not ids:
        return ""
    return (f"a network volume ({', '.join(ids)}, billed on its own at "
            f"${NETWORK_VOLUME_PER_GB_MONTH:.2f}/GB-month until deleted)")


class RunPodProvider(Provider):
    """The RunPod REST API v2 (pods)."""

    name = "runpod"
    title = "RunPod"
    default_base_url = "https://api.runpod.io/v2"
    can_stop = True
    #: RunPod allows 60 requests a minute per key (its ``RateLimit-Policy``): spread
    #: evenly, a poll however long never meets the 429.
    intervals = {"any": 1.0}
    list_api = "v2"
    fields = {
        "id": ("string",), "status": ("string",), "cost": ("number",),
        "startedAt": ("string", "null"), "createdAt": ("string", "null"),
        "disk": ("number", "null"), "mounts": ("object", "null"),
        "mounts.persistent.size": ("number", "null"), "gpu": ("object", "null"),
        "gpu.id": ("string", "null"), "gpu.count": ("number", "null"),
        "ssh": ("object", "null"), "actions": ("array",),
    }

    def error_detail(self, status: int, payload: Any, text: str) -> tuple[str, str]:
        """``application/problem+json``: ``{"title", "status", "detail"}``."""
        if isinstance(payload, dict):
            title = payload.get("title") or ""
            detail = payload.get("detail") or payload.get("error") or ""
            return one_line(title, 60), one_line(detail, 200)
        return "", one_line(text, 200)

    def get_instance(self, instance_id: str) -> Instance:
        """``GET /pods/{id}``."""
        pid = self.check_id(instance_id)
        what = f"get pod {pid}"
        data = self.json_of(self.request("GET", f"/pods/{pid}", what=what), what)
        if not isinstance(data, dict):
            raise ProviderError(f"RunPod: {what} answered an unexpected shape",
                                kind="bad_response")
        return self.parse(pid, data)

    def parse(self, pid: str, raw: dict[str, Any]) -> Instance:
        """An ``Instance`` from a v2 pod object."""
        status = str(raw.get("status") or raw.get("desiredStatus") or "").upper()
        state = _STATES.get(status, "unknown")
        volume = number(_get(raw, "mounts", "persistent", "size"))
        container = number(raw.get("disk"))
        cost = number(raw.get("cost") if raw.get("cost") is not None
                      else raw.get("costPerHr"))
        if state == "stopped" and not cost:
            cost = None  # EXITED pods report 0: the running price is not known then
        count = integer(_get(raw, "gpu", "count"))
        gpu_name = text_or_none(_get(raw, "gpu", "id"))
        address = runpod_ssh_address(raw)
        kept = volume or 0.0
        return Instance(
            state=state,
            price_per_hour=cost,
            storage_per_hour=kept * STOPPED_VOLUME_PER_GB_MONTH / HOURS_PER_MONTH,
            disk_gb=volume if volume is not None else container,
            gpu=f"{count}x {gpu_name}" if gpu_name and count else gpu_name,
            ssh_host=address.host if address else None,
            ssh_port=address.port if address else None,
            raw=raw,
            id=pid,
            provider=self.name,
            raw_state=one_line(status, 40),
            storage_per_gb_month=STOPPED_VOLUME_PER_GB_MONTH,
            started_at=epoch_of(raw.get("startedAt") or raw.get("lastStartedAt"))
            if state == "running" else None,
            created_at=epoch_of(raw.get("createdAt")),
            also_bills=network_volume_words(raw),
        )

    def list_instances(self) -> list[Instance]:
        """``GET /pods``: a list of pods (``{"pods": [...]}`` read too)."""
        what = "list pods"
        data = self.json_of(self.request("GET", "/pods", query={"includeClusterPods": "true"},
                                         what=what), what)
        return [self.parse(str(raw.get("id")), raw) for raw in listed(data, "pods", "data")
                if raw.get("id")]

    def can_stop_now(self, instance: Instance) -> bool:
        """The pod's ``actions`` (its valid transitions), else its state: an EXITED or
        ERROR pod takes only start or terminate."""
        actions = instance.raw.get("actions")
        if isinstance(actions, list) and actions:
            return "stop" in actions
        return instance.state not in ("error", "stopped")

    def ssh_addresses(self, instance: Instance) -> list[SshAddress]:
        """See ``runpod_ssh_address``."""
        address = runpod_ssh_address(instance.raw)
        return [address] if address is not None else []

    def _action(self, pid: str, action: str) -> None:
        self.request("POST", f"/pods/{pid}/action", body={"action": action},
                     what=f"{action} pod {pid}")

    def stop(self, instance_id: str) -> None:
        """``POST /pods/{id}/action {"action": "stop"}`` (409 when not allowed now)."""
        self._action(self.check_id(instance_id), "stop")

    def start(self, instance_id: str) -> None:
        """``POST /pods/{id}/action {"action": "start"}`` (409 when not allowed now)."""
        self._action(self.check_id(instance_id), "start")

    def destroy(self, instance_id: str) -> None:
        """``DELETE /pods/{id}`` (204, no body)."""
        pid = self.check_id(instance_id)
        self.request("DELETE", f"/pods/{pid}", what=f"terminate pod {pid}")

    def console_hint(self, action: str, instance_id: str) -> str:
        """Where to click on https://console.runpod.io/pods."""
        verb = {"destroy": "Terminate", "stop": "Stop", "start": "Start"}.get(action, action)
        return (f"open https://console.runpod.io/pods, find pod {instance_id} and choose "
                f"{verb}")
