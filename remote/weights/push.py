"""Pushing a run's weights to the Hub from the box itself (``trainer push`` over the
transport), with the token on the command's stdin: never in argv, never in a file."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from remote.config import remember_hub_repo
from remote.link.tools import ask_tool
from remote.transport.base import Transport
from trainer.hub.client import read_token
from trainer.text import clean_text

#: Same rule as the box side (``trainer.hub.client.REPO_RE``).
REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
FILE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
#: What ``trainer push`` sends when no files are named (``trainer.hub.push.DEFAULT_FILES``:
#: the checkpoints from ``weights/``, the rest from the run directory; a missing one is
#: skipped).
PUSHED_FILES = ("best.pt", "last.pt", "summary.json", "results.csv", "status.json",
                "metrics.jsonl")
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


def push_args(run_dir: str, repo: str, files: Sequence[str] | None = None,
              public: bool = False) -> list[str]:
    """The words of ``trainer push`` (they hold no secret: the token comes on stdin)."""
    check_push_args(repo, files)
    words = ["push", run_dir, "--repo", repo, "--token-stdin", "--json"]
    if files:
        words += ["--files", ",".join(files)]
    if public:
        words.append("--public")
    return words


def push_from_box(transport: Transport, run_dir: str, repo: str, token: str,
                  files: Sequence[str] | None = None, public: bool = False,
                  timeout: float = PUSH_TIMEOUT) -> dict[str, Any]:
    """Run ``trainer push`` on the box with ``token`` on stdin and return its JSON result
    (``repo``, ``commit``, ``commit_url``, ``epoch``, ``files`` with their sha256...).

    ``repo`` is remembered as one of the user's (``remote.config.remember_hub_repo``).
    Raises ``ValueError`` for bad arguments or a missing token, ``PushFailed`` when the
    push fails and ``remote.transport.base.TransportError`` when the box cannot be reached."""
    if not token or not token.strip() or "\n" in token.strip():
        raise ValueError(NO_TOKEN)
    answer = ask_tool(transport, push_args(run_dir, repo, files, public), timeout=timeout,
                      stdin=(token.strip() + "\n").encode())
    report = answer.report
    if answer.ok and report is not None and report.get("ok"):
        remember_hub_repo(repo)  # the user's: its copies count as safe from now on
        return report
    if report is not None and report.get("error"):
        message = str(report["error"])
    else:
        message = answer.why or f"trainer push exited with {answer.rc}"
    raise PushFailed(clean_text(message), answer.rc)
