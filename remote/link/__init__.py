"""Reaching a box and making the trainer runnable there: the one connector
(``connector``), the gate (one exec that installs, checks and starts a box tool), the
bootstrap, the box's python (``interpreter``) and the early connection (``early``)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "connector": ["Connector", "link_broken", "retry_delay", "worth_retrying"],
    "bootstrap": ["bootstrap_box", "install_name", "install_needs"],
})
