"""Pushing a run's weights to the Hub from the box itself (``trainer push`` over the
transport), with the token on the command's stdin: never in argv, never in a file."""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from typing import Any

from remote.transport.base import Transport
from trainer.hub.client import read_token
from trainer.text import clean_text

#: Same rule as the box side (``trainer.hub.client.REPO_RE``).
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: A multi-GB checkpoint over a slow uplink takes a while.
PUSH_TIMEOUT = 6 * 3600.0


class PushFailed(Exception):
    """The push ran and failed; the message is one line from the box."""

    def __init__(self, message: str, rc: int | None = None) -> None:
        super().__init__(message)
        self.rc = rc


#: What to do when no token is found here (the CLI and the TUI say the same).
NO_TOKEN = "no Hugging Face token here: set HF_TOKEN or log in with `hf auth login`"


def laptop_token() -> str | None:
    """The Hub token on this laptop: ``HF_TOKEN``, else the huggingface_hub token store."""
    return read_token(use_stdin=False)


def require_token() -> str:
    """The laptop's Hub token; ``ValueError`` (:data:`NO_TOKEN`) when there is none."""
    token = laptop_token()
    if not token:
        raise ValueError(NO_TOKEN)
    return token


def check_push_args(repo: str, files: Sequence[str] | None) -> None:
    """Raise ``ValueError`` with one line for a malformed repository id or file name."""
    if not REPO_RE.match(repo) or ".." in repo:
        raise ValueError(f"{repo!r} is not a repository id of the form ORG/NAME")
    for name in files or ():
        if not FILE_RE.match(name) or ".." in name:
            raise ValueError(f"{name!r} is not a file name (expected e.g. best.pt)")


def build_push_command(transport: Transport, run_dir: str, repo: str,
                       files: Sequence[str] | None = None, public: bool = False) -> str:
    """The shell command run on the box (it holds no secret)."""
    check_push_args(repo, files)
    words = [f"{transport.trainer_prefix} -m trainer push", shlex.quote(run_dir),
             "--repo", shlex.quote(repo), "--token-stdin", "--json"]
    if files:
        words += ["--files", shlex.quote(",".join(files))]
    if public:
        words.append("--public")
    return " ".join(words)


def last_json_object(data: bytes) -> dict[str, Any] | None:
    """The last stdout line that is a JSON object, or ``None``."""
    for line in reversed(data.decode("utf-8", errors="replace").splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    return None


def push_from_box(transport: Transport, run_dir: str, repo: str, token: str,
                  files: Sequence[str] | None = None, public: bool = False,
                  timeout: float = PUSH_TIMEOUT) -> dict[str, Any]:
    """Run ``trainer push`` on the box with ``token`` on stdin and return its JSON result
    (``repo``, ``commit``, ``commit_url``, ``epoch``, ``files`` with their sha256...).

    Raises ``ValueError`` for bad arguments or a missing token, ``PushFailed`` when the
    push fails and ``remote.transport.base.TransportError`` when the box cannot be reached."""
    if not token or not token.strip() or "\n" in token.strip():
        raise ValueError(NO_TOKEN)
    command = build_push_command(transport, run_dir, repo, files, public)
    result = transport.run(command, stdin=(token.strip() + "\n").encode(), timeout=timeout)
    answer = last_json_object(result.stdout)
    if result.ok and answer is not None and answer.get("ok"):
        return answer
    if answer is not None and answer.get("error"):
        message = str(answer["error"])
    else:
        lines = result.stderr.decode("utf-8", errors="replace").strip().splitlines()
        message = lines[-1] if lines else f"trainer push exited with {result.rc}"
    raise PushFailed(clean_text(message), result.rc)
