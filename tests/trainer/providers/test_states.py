"""Every documented instance state of each provider, through the real parsers, mapped to
our state and to what it bills. A state that still bills must never read as stopped or
destroyed: that is how a destroy is "confirmed" while the meter runs.

Sources (the providers' API documentation):
- Vast.ai ``actual_status``: null, loading, running, stopped, frozen, exited, rebooting,
  unknown, offline; ``intended_status``: running, stopped, frozen
  (https://docs.vast.ai/sdk/python/reference/show-instance.md).
- Lambda Cloud ``InstanceStatus``: booting, active, unhealthy, terminated, terminating,
  preempted (the Cloud API's OpenAPI spec, ``GET /instances/{id}``).
- RunPod pod ``desiredStatus``: RUNNING, EXITED, TERMINATED
  (https://docs.runpod.io/api-reference/pods/GET/pods/podId), and the REST v2
  ``status`` values our client reads: PROVISIONING, STARTING, RUNNING, EXITED, ERROR,
  TERMINATED (``trainer.providers.runpod``).
"""

from __future__ import annotations

import pytest

from trainer.providers import STATES
from trainer.providers.base import Instance
from trainer.providers.lambda_cloud import LambdaProvider
from trainer.providers.runpod import RunPodProvider
from trainer.providers.vast import VastProvider

#: What a state bills: the GPU price, the kept disk only, or nothing.
GPU, STORAGE, NOTHING = "gpu", "storage", "nothing"
#: The billing of each of our states (the table in ``trainer.providers.base``).
BILLS = {"starting": GPU, "running": GPU, "stopping": GPU, "stopped": STORAGE,
         "paused": GPU, "exited": GPU, "error": GPU, "destroying": GPU, "destroyed": NOTHING,
         "unknown": GPU}

VAST_ACTUAL = [None, "loading", "running", "stopped", "frozen", "exited", "rebooting",
               "unknown", "offline"]
VAST_INTENDED = ["running", "stopped", "frozen"]


def vast_expected(actual: str | None, intended: str) -> str:
    """Our reading of Vast's two fields, written out case by case."""
    return {
        None: "starting", "loading": "starting", "rebooting": "starting",
        "running": "stopping" if intended == "stopped" else "running",
        # Asked to run but halted: it waits for its GPUs (worst case: billed as running).
        "stopped": "starting" if intended == "running" else "stopped",
        "frozen": "paused",
        # The container ended on its own while meant to run: the GPUs are still billed.
        "exited": "stopped" if intended == "stopped" else "exited",
        "unknown": "unknown", "offline": "error",
    }[actual]


LAMBDA = {"booting": "starting", "active": "running", "unhealthy": "error",
          "terminating": "destroying", "terminated": "destroyed", "preempted": "destroyed"}
RUNPOD = {"PROVISIONING": "starting", "STARTING": "starting", "RUNNING": "running",
          "EXITED": "stopped", "ERROR": "error", "TERMINATED": "destroyed"}


def billing_kind(inst: Instance) -> str:
    """What ``inst.billing_per_hour`` charges, in words."""
    rate = inst.billing_per_hour
    if rate == 0.0 and inst.state == "destroyed":
        return NOTHING
    if rate is not None and rate == inst.storage_per_hour and inst.state == "stopped":
        return STORAGE
    assert rate == inst.price_per_hour and rate, f"{inst.state} bills {rate}"
    return GPU


def test_our_states_all_have_a_billing() -> None:
    assert set(BILLS) == set(STATES)


@pytest.mark.parametrize("intended", VAST_INTENDED)
@pytest.mark.parametrize("actual", VAST_ACTUAL)
def test_every_vast_status_pair(actual: str | None, intended: str) -> None:
    inst = VastProvider("k").parse("7", {"actual_status": actual,
                                         "intended_status": intended, "dph_base": 1.15,
                                         "dph_total": 1.2, "storage_total_cost": 0.05})
    assert inst.state == vast_expected(actual, intended)
    assert billing_kind(inst) == BILLS[inst.state]


def test_a_vast_container_that_exited_on_its_own_still_bills() -> None:
    inst = VastProvider("k").parse("7", {"actual_status": "exited",
                                         "intended_status": "running", "dph_base": 1.15,
                                         "dph_total": 1.2, "storage_total_cost": 0.05})
    assert inst.state == "exited" and inst.billing_per_hour == 1.2


@pytest.mark.parametrize("status", sorted(LAMBDA))
def test_every_lambda_status(status: str) -> None:
    inst = LambdaProvider("k").parse("i-1", {"status": status, "ip": "198.51.100.4",
                                             "instance_type": {"price_cents_per_hour": 129}})
    assert inst.state == LAMBDA[status]
    assert billing_kind(inst) == BILLS[inst.state]
    if status == "unhealthy":  # a sick machine is still rented: never "destroyed"
        assert not inst.gone and inst.billing_per_hour == 1.29


@pytest.mark.parametrize("status", sorted(RUNPOD))
def test_every_runpod_status(status: str) -> None:
    inst = RunPodProvider("k").parse("p1", {"status": status,
                                            "cost": 0.0 if status == "EXITED" else 0.69,
                                            "mounts": {"persistent": {"size": 100}}})
    assert inst.state == RUNPOD[status]
    assert billing_kind(inst) == BILLS[inst.state]


@pytest.mark.parametrize(("provider", "raw"), [
    (VastProvider("k"), {"actual_status": "migrating", "intended_status": "running",
                         "dph_base": 0.95, "storage_total_cost": 0.05, "dph_total": 1.0}),
    (LambdaProvider("k"), {"status": "hibernating",
                           "instance_type": {"price_cents_per_hour": 100}}),
    (RunPodProvider("k"), {"status": "PAUSED", "cost": 1.0}),
])
def test_an_undocumented_state_is_unknown_and_billed(provider, raw: dict) -> None:
    inst = provider.parse("1", raw)
    assert inst.state == "unknown" and inst.billing_per_hour == 1.0 and not inst.gone
