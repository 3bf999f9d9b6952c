"""Lambda Cloud: ``https://cloud.lambda.ai/api/v1``, ``Authorization: Bearer KEY``.

Documented shapes used here: ``GET /instances`` lists the account's running instances
(``{"data": [...]}``; the objects carry no start time); ``GET /instances/{id}`` answers
``{"data": {...}}`` with
``status`` (booting, active, unhealthy, terminating, terminated, preempted), ``ip`` (the
SSH address, port 22, user ``ubuntu``),
``instance_type`` {name, description, gpu_description, price_cents_per_hour,
specs.storage_gib}. ``POST /instance-operations/terminate`` with ``{"instance_ids": [id]}``.
Lambda has no stop: ``can_stop`` is false and terminate is the destroy. Errors are
``{"error": {"code", "message", "suggestion"}}`` (401 ``global/invalid-api-key``, 404
``global/object-does-not-exist``).
"""

from __future__ import annotations

from typing import Any

from trainer.providers.base import (
    Instance,
    Provider,
    ProviderError,
    SshAddress,
    ssh_address,
)
from trainer.providers.values import integer, listed, number, text_or_none
from trainer.text import one_line

_STATES = {
    "booting": "starting",
    "active": "running",
    "unhealthy": "error",
    "terminating": "destroying",
    "terminated": "destroyed",
    "preempted": "destroyed",
}


def lambda_ssh_address(raw: Any) -> SshAddress | None:
    """``ip``, port 22, user ``ubuntu`` (Lambda's images log in as ubuntu)."""
    return ssh_address(raw.get("ip"), 22, "ubuntu") if isinstance(raw, dict) else None


class LambdaProvider(Provider):
    """The Lambda Cloud API (v1)."""

    name = "lambda"
    title = "Lambda Cloud"
    default_base_url = "https://cloud.lambda.ai/api/v1"
    can_stop = False
    #: About one request a second per key, every endpoint together (Lambda's docs).
    intervals = {"any": 1.0}
    list_api = "v1"
    fields = {
        "id": ("string",), "status": ("string",), "ip": ("string", "null"),
        "instance_type": ("object",), "instance_type.price_cents_per_hour": ("number",),
        "instance_type.specs": ("object", "null"),
        "instance_type.specs.storage_gib": ("number", "null"),
        "instance_type.specs.gpus": ("number", "null"),
    }

    def error_detail(self, status: int, payload: Any, text: str) -> tuple[str, str]:
        """``{"error": {"code", "message", "suggestion"}}``."""
        err = payload.get("error") if isinstance(payload, dict) else None
        if isinstance(err, dict):
            message = err.get("message") or ""
            if err.get("suggestion"):
                message = f"{message} ({err['suggestion']})"
            return one_line(err.get("code") or "", 60), one_line(message, 200)
        return "", one_line(text, 200)

    def get_instance(self, instance_id: str) -> Instance:
        """``GET /instances/{id}``."""
        iid = self.check_id(instance_id)
        what = f"get instance {iid}"
        data = self.json_of(self.request("GET", f"/instances/{iid}", what=what), what)
        raw = data.get("data") if isinstance(data, dict) else None
        if not isinstance(raw, dict):
            raise ProviderError(f"Lambda Cloud: {what} answered an unexpected shape",
                                kind="bad_response")
        return self.parse(iid, raw)

    def parse(self, iid: str, raw: dict[str, Any]) -> Instance:
        """An ``Instance`` from Lambda's instance object."""
        status = str(raw.get("status") or "").lower()
        itype = raw.get("instance_type")
        itype = itype if isinstance(itype, dict) else {}
        cents = number(itype.get("price_cents_per_hour"))
        specs = itype.get("specs")
        specs = specs if isinstance(specs, dict) else {}
        gpu = text_or_none(itype.get("gpu_description") or itype.get("description")
                           or itype.get("name"))
        gpus = integer(specs.get("gpus"))
        address = lambda_ssh_address(raw)
        return Instance(
            state=_STATES.get(status, "unknown"),
            price_per_hour=None if cents is None else cents / 100.0,
            storage_per_hour=None,  # no stop: nothing is billed for a kept disk
            disk_gb=number(specs.get("storage_gib")),
            gpu=f"{gpus}x {gpu}" if gpu and gpus else gpu,
            ssh_host=address.host if address else None,
            ssh_port=address.port if address else None,
            raw=raw,
            id=iid,
            provider=self.name,
            raw_state=one_line(status, 40),
        )

    def list_instances(self) -> list[Instance]:
        """``GET /instances``: ``{"data": [...]}``."""
        what = "list instances"
        data = self.json_of(self.request("GET", "/instances", what=what), what)
        return [self.parse(str(raw.get("id")), raw) for raw in listed(data, "data")
                if raw.get("id")]

    def ssh_addresses(self, instance: Instance) -> list[SshAddress]:
        """See ``lambda_ssh_address``."""
        address = lambda_ssh_address(instance.raw)
        return [address] if address is not None else []

    def _no_stop(self, action: str) -> ProviderError:
        return ProviderError(f"Lambda Cloud has no {action}: an instance can only be "
                             "terminated (which deletes its disk)", kind="unsupported")

    def stop(self, instance_id: str) -> None:
        """Lambda cannot stop an instance."""
        raise self._no_stop("stop")

    def start(self, instance_id: str) -> None:
        """Lambda cannot start a stopped instance (there are none)."""
        raise self._no_stop("start")

    def destroy(self, instance_id: str) -> None:
        """``POST /instance-operations/terminate {"instance_ids": [id]}``."""
        iid = self.check_id(instance_id)
        self.request("POST", "/instance-operations/terminate", body={"instance_ids": [iid]},
                     what=f"terminate instance {iid}")

    def console_hint(self, action: str, instance_id: str) -> str:
        """Where to click on https://cloud.lambda.ai/instances."""
        if action != "destroy":
            return "Lambda Cloud has no stop; terminate is the only way to end billing"
        return (f"open https://cloud.lambda.ai/instances, select instance {instance_id} and "
                "choose Terminate")
