"""SSH hosts that cannot serve as a box, refused before any connection is made.

RunPod's basic SSH proxy (``POD_ID-64411f3a@ssh.runpod.io``) is the address RunPod shows
first, but it gives an interactive shell only: no commands, no SFTP, so nothing here could
work through it. Standard library only (``gpurent-tui`` checks its arguments with it
before anything heavy loads).
"""

from __future__ import annotations

import re

#: RunPod's basic SSH proxy host.
RUNPOD_BASIC_PROXY = "ssh.runpod.io"

_POD_USER = re.compile(r"^([a-z0-9]{6,32})-[0-9a-f]{6,16}$")


def refusal(host: str, user: str | None = None) -> str | None:
    """Why ``host`` cannot be a box (one line, with the fix), or ``None`` when it can."""
    if host.strip("[]").lower().rstrip(".") != RUNPOD_BASIC_PROXY:
        return None
    match = _POD_USER.match(user or "")
    instead = f"runpod:{match.group(1)}" if match else "runpod:POD_ID"
    return (f"{RUNPOD_BASIC_PROXY} is RunPod's basic SSH proxy, which runs no commands "
            "and no SFTP: give the pod a public IP with TCP port 22 exposed (pod settings) "
            f"and use that IP and the port mapped to 22, or name the pod: {instead}")
