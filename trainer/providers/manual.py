"""``manual``: a provider without an API we can call. Every action is a precise instruction
for the person at the provider's web console, raised as a ``ProviderError`` of kind
``manual`` so that nothing pretends it happened."""

from __future__ import annotations

from trainer.providers.base import Instance, Provider, ProviderError

_WHAT = {
    "stop": "Stop it: the GPUs are released (they may be gone when you start again) and its "
            "disk keeps billing while stopped.",
    "start": "Start it: billing at the full price resumes once it runs; if its GPUs were "
             "taken, the start can wait or fail.",
    "destroy": "Destroy (terminate/delete) it: billing ends and its disk, with everything "
               "not copied off the box, is deleted.",
}


class ManualProvider(Provider):
    """No API: instructions instead of calls. ``get_instance`` knows nothing (``unknown``)."""

    name = "manual"
    title = "manual"
    default_base_url = ""
    can_stop = True

    def get_instance(self, instance_id: str) -> Instance:
        """An instance whose state and prices are unknown."""
        return Instance(state="unknown", price_per_hour=None, storage_per_hour=None,
                        disk_gb=None, gpu=None, ssh_host=None, ssh_port=None, raw={},
                        id=str(instance_id or ""), provider=self.name)

    def console_hint(self, action: str, instance_id: str) -> str:
        """The instruction for ``action``."""
        which = f"instance {instance_id}" if instance_id else "this box's instance"
        return (f"open your provider's web console, find {which}, and {action} it by hand. "
                f"{_WHAT.get(action, '')}").strip()

    def _manual(self, action: str, instance_id: str) -> ProviderError:
        hint = self.console_hint(action, instance_id)
        return ProviderError(f"no provider API configured: {hint}", kind="manual")

    def stop(self, instance_id: str) -> None:
        """Raise the instruction to stop by hand."""
        raise self._manual("stop", instance_id)

    def start(self, instance_id: str) -> None:
        """Raise the instruction to start by hand."""
        raise self._manual("start", instance_id)

    def destroy(self, instance_id: str) -> None:
        """Raise the instruction to destroy by hand."""
        raise self._manual("destroy", instance_id)
