"""Reaching a box: the ``Transport`` interface (``base``), OpenSSH-compatible connections
(``ssh``, with ``sshconfig`` and ``hostkeys``) and this machine (``local``)."""

import os
import shutil
import sys
from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.transport.base import (
        FileStat,
        LineTooLong,
        NeedsSetup,
        RunResult,
        Stream,
        Transport,
        TransportError,
        Unreachable,
    )
    from remote.transport.hostkeys import forget_command, forget_host_key
    from remote.transport.hostpolicy import refusal
    from remote.transport.local import LocalTransport

__all__, __getattr__ = typed_exports(__name__, __file__)

# paramiko imports invoke (and with it unittest.mock, asyncio and yaml: about 0.1 s of
# every start) only to run `Match exec` in its own ssh_config parser, which is used only
# where no OpenSSH client answers `ssh -G` (remote.transport.openssh). Where one does,
# paramiko loads without it (a None entry in sys.modules makes the import fail quietly).
_client = os.environ.get("GPURENT_SSH", "").strip()
if "invoke" not in sys.modules and _client.lower() not in ("none", "no", "off") \
        and shutil.which(_client or "ssh"):
    sys.modules["invoke"] = None  # type: ignore[assignment]
