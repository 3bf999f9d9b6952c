"""Reaching a box and making the trainer runnable there: the one connector
(``connector``), the gate (one exec that installs, checks and starts a box tool), the
bootstrap, the box's python (``interpreter``), the early connection (``early``) and the
one door to the box tools (``tools``: ``python -m trainer VERB`` run, its report read)."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.link.bootstrap import bootstrap_box, install_name, install_needs
    from remote.link.connector import (
        Connector,
        changed_host_key,
        link_broken,
        retry_delay,
        whole_line,
        worth_retrying,
    )
    from remote.link.tools import (
        BoxToolFailed,
        ToolAnswer,
        ask_tool,
        laptop_endpoint,
        parse_report,
        tool_report,
        trainer_command,
    )

__all__, __getattr__ = typed_exports(__name__, __file__)
