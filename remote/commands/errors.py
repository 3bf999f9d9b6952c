"""One-line errors for the headless commands (not a command itself)."""

from __future__ import annotations

import json
import sys

from trainer.text import clean_text


def fail(command: str, message: object, code: int, as_json: bool = False) -> int:
    """Print ``gpurent COMMAND: message`` on stderr (and ``{"ok": false, "error"}`` on
    stdout with ``--json``); return ``code`` for the command to exit with."""
    text = " ".join(clean_text(str(message)).split()) or "failed"
    print(f"gpurent {command}: {text}", file=sys.stderr)
    if as_json:
        print(json.dumps({"ok": False, "error": text}))
    return code
