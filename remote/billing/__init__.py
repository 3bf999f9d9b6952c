"""Money and instances: which provider instance a box is (``providers``), what it costs
running, stopped or destroyed (``cost``), and the gate that stops or destroys it only when
the weights are safe (``teardown``)."""

from remote.billing.cost import CostReport, cost_report, money
from remote.billing.providers import InstanceRef, provider_for, resolve_instance
from remote.billing.teardown import GateRefused, check_destroy

__all__ = ["CostReport", "GateRefused", "InstanceRef", "check_destroy", "cost_report",
           "money", "provider_for", "resolve_instance"]
