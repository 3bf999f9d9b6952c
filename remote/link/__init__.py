"""Reaching a box and making the trainer runnable there: the one connector
(``connector``), the gate (one exec that installs, checks and starts a box tool), the
bootstrap, the box's python (``interpreter``), the early connection (``early``) and the
one door to the box tools (``tools``: ``python -m trainer VERB`` run, its report read)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "connector": ["Connector", "changed_host_key", "link_broken", "retry_delay", "whole_line",
                  "worth_retrying"],
    "bootstrap": ["bootstrap_box", "install_name", "install_needs"],
    "tools": ["BoxToolFailed", "ToolAnswer", "ask_tool", "laptop_endpoint", "parse_report",
              "tool_report", "trainer_command"],
})
