"""A run's last checkpoint known to be safe off its box, from what this laptop can verify
when the box is gone: on the Hub, asked with the user's own token, the ``last.pt`` a
resume would take (``trainer.hub.client.pushed_checkpoint``, the rule ``trainer restore``
applies): the newest version of it that is the run's (another run may have pushed over
it since, to the same repository), an LFS file whose sha256 the Hub keeps, taken at the
commit that changed it, where the ``status.json`` pushed with it names the run (its
``save_dir``) and says which epoch it is. When no recent version is the run's, whose the
repository holds is said, with no epoch. On the laptop, a
pulled copy of the run's ``last.pt`` or ``best.pt`` that the pull ledger holds and that
is still intact.

Only a repository of the user's (``remote.config.hub_repos``) counts, as for the weights
gate (``remote.weights.safety``). A Hub that cannot be asked confirms nothing.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from remote.config import ConfigError, hub_repos
from remote.weights.ckptepoch import UnreadableCheckpoint, read_epoch
from remote.weights.pull import HISTORY_FILES, copy_is_intact, ledger_path
from trainer.hub.client import (
    CHECKPOINT,
    HubError,
    describe_error,
    import_hub,
    pushed_checkpoint,
    read_token,
)
from trainer.runfiles import epoch_count
from trainer.text import clean_text, one_line


@dataclass(frozen=True)
class HubCopy:
    """``repo`` at ``commit`` holds the run's ``last.pt`` of ``epoch`` (``None``: its
    status names none; ``state``: the run's state in that status), or why not
    (``error``; ``commit``, when known, is then the one that last changed ``last.pt``)."""

    repo: str
    commit: str = ""
    epoch: int | None = None
    state: str = ""
    error: str = ""

    @property
    def where(self) -> str:
        """``on the Hub org/exp@abc1234``."""
        return f"on the Hub {self.repo}@{self.commit[:7]}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return {"repo": self.repo, "commit": self.commit or None, "epoch": self.epoch,
                "state": self.state or None, "error": self.error or None}


def hub_copy(repo: str, name: str, token: str | None = None) -> HubCopy:
    """What the Hub holds of run ``name``, pushed to ``repo`` (see the module doc)."""
    try:
        if repo not in hub_repos():
            return HubCopy(repo, error=f"{repo} is not one of your Hub repositories")
        hub = import_hub(progress_bars=False)
    except (ConfigError, HubError) as exc:
        return HubCopy(repo, error=one_line(clean_text(str(exc)), 200))
    token = token if token is not None else read_token(use_stdin=False)
    endpoint = os.environ.get("HF_ENDPOINT") or None
    try:
        found = pushed_checkpoint(hub, repo, token, endpoint, run=name)
    except HubError as exc:
        return HubCopy(repo, error=one_line(clean_text(str(exc)), 300))
    except Exception as exc:  # the client raises many types; all are "cannot verify"
        return HubCopy(repo, error=f"cannot ask the Hub: {describe_error(exc, endpoint)}")
    commit = found.commit
    if not found.lfs:
        return HubCopy(repo, commit, error=f"{repo}'s {CHECKPOINT} at {commit[:12]} is not an "
                                           "LFS file: the Hub keeps no sha256 of it")
    if found.status is None:
        return HubCopy(repo, commit, error=f"{repo}'s {CHECKPOINT} ({found.pushed}) came "
                                           "without a status.json: cannot tell which run's "
                                           "it is")
    owner = found.run
    if owner is None:
        return HubCopy(repo, commit, error=f"the status.json pushed with {repo}'s "
                                           f"{CHECKPOINT} names no run (no save_dir): cannot "
                                           "tell it is this run's")
    if owner != name:
        return HubCopy(repo, commit, error=f"{repo}'s {CHECKPOINT} is run "
                                           f"{one_line(clean_text(owner), 100)}'s, not this "
                                           "run's")
    state = found.status.get("state")
    return HubCopy(repo, commit, epoch_count(found.status.get("completed_epochs")),
                   one_line(clean_text(state), 20) if isinstance(state, str) else "")


@dataclass(frozen=True)
class LaptopCopy:
    """A pulled copy of a run's checkpoint ``file`` at ``local_path``, pulled at ``time``."""

    file: str
    local_path: str
    time: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return dict(self.__dict__)


def laptop_copy(name: str, project: str = "") -> LaptopCopy | None:
    """The newest intact pulled ``last.pt`` or ``best.pt`` of run ``name`` (of ``project``
    when it is an absolute path on the box), from the pull ledger; ``None`` when none."""
    try:
        lines = ledger_path().read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    want = f"{project.rstrip('/')}/{name}" if project.startswith("/") else f"/{name}"
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict) or entry.get("file") not in (CHECKPOINT, "best.pt"):
            continue
        run_dir = entry.get("run_dir")
        if isinstance(run_dir, str) and run_dir.endswith(want) and \
                isinstance(entry.get("local_path"), str) and copy_is_intact(entry):
            return LaptopCopy(entry["file"], entry["local_path"], str(entry.get("time") or ""))
    return None


@dataclass(frozen=True)
class LaptopRun:
    """The laptop's verified pulled ``last.pt`` of a run (of ``epoch``) and the pulled
    history files of the same box run (``history``: file name -> local path)."""

    local_path: str
    epoch: int
    run_dir: str
    history: dict[str, str]


def laptop_run(name: str, project: str = "",
               unreadable: list[str] | None = None) -> LaptopRun | None:
    """The newest intact pulled ``last.pt`` of run ``name`` whose epoch can be read, with
    the newest intact pulled history of that run directory; ``None`` when none. Why each
    pulled ``last.pt`` passed over could not be read is appended to ``unreadable``."""
    try:
        lines = ledger_path().read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    want = f"{project.rstrip('/')}/{name}" if project.startswith("/") else f"/{name}"
    entries = []
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(entry, dict) and isinstance(entry.get("run_dir"), str) \
                and entry["run_dir"].endswith(want) and isinstance(entry.get("local_path"), str):
            entries.append(entry)
    for entry in entries:
        if entry.get("file") != CHECKPOINT or not copy_is_intact(entry):
            continue
        try:
            epoch = read_epoch(entry["local_path"])
        except UnreadableCheckpoint as exc:
            if unreadable is not None:
                unreadable.append(str(exc))
            continue
        history: dict[str, str] = {}
        for other in entries:
            if other["run_dir"] == entry["run_dir"] and other.get("file") in HISTORY_FILES \
                    and other["file"] not in history and copy_is_intact(other):
                history[other["file"]] = other["local_path"]
        return LaptopRun(entry["local_path"], epoch, entry["run_dir"], history)
    return None
