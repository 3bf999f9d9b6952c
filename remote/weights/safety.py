"""Are the weights on a box safe somewhere off it? The TUI's weights badge and the
destroy check ask here.

What is at stake is every weight file of every run the box knows: the runs asked about,
the runs of their projects, and every run launched on the box through gpurent (the
box's registry). The box lists them (``trainer safe --json``): every ``*.pt`` under each
run's ``weights/``, with the ones that must be off the box before a destroy marked
(``best.pt``, and ``last.pt`` when it is newer) and hashed. A required file is safe when

* this laptop holds a copy: a pull ledger line for that very file on that box with the
  same sha256, whose local file is still intact (``remote.weights.pull.verified_copy``); or
* the Hub confirms it: a ``hub.json`` entry with the same sha256 for one of the user's
  own repositories (named by the caller, ``[hub] repos`` in the config file, or pushed
  to / launched with from this laptop: ``remote.config.hub_repos``), and the Hub, asked
  with this laptop's token, says the file exists at the recorded commit with that LFS
  sha256 (``verify_pushed``). The ledger is the box's word: a copy it names in another
  repository (``evil/copy``) is not the user's. A Hub that cannot be reached cannot
  confirm anything. A run that has ended and is pushed to the Hub counts there only once
  its final push (the status of its end, its history, ``best.pt`` and ``last.pt``, both
  required then) is in the ledger: the box names its entries only (``pending`` says
  why there are none).

Anything else (never pushed, pushed content that differs, a stale or forged ledger, an
unreachable Hub, a deleted local copy) is not safe. See ``docs/WEIGHTS-SAFETY.md``.
"""

from __future__ import annotations

import contextlib
import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from remote.config import ConfigError, hub_repos
from remote.link.tools import ToolAnswer, ToolGate, ask_tool
from remote.transport.base import Transport, TransportError
from remote.weights.pull import ledger_entries, verified_copy
from trainer.hub.client import HubError, Verified, import_hub, read_token, verify_pushed
from trainer.text import clean_text

SAFE_TIMEOUT = 600.0  # hashing a multi-GB checkpoint the first time takes a while
#: At most this many unsafe files are named in one line (the rest are counted).
NAMED = 4

#: ``verify(ledger_entries, sha256, size) -> Verified(confirmed, where or why, failure)``.
HubVerify = Callable[[Sequence[dict[str, Any]], str, int | None], Verified]


@dataclass(frozen=True)
class FileVerdict:
    """One weight file that must be off the box: where it is safe, or why it is not."""

    path: str
    run_dir: str
    safe: bool
    where: str | None
    detail: str
    #: Why a check could not be made (the Hub's failure and address), the same for every
    #: file it fails: said once where many files are listed, so not in ``detail``.
    failure: str = ""

    @property
    def short(self) -> str:
        """``RUN_NAME/weights/FILE``."""
        return posixpath.join(posixpath.basename(self.run_dir), "weights",
                              posixpath.basename(self.path))


@dataclass(frozen=True)
class Safety:
    """The verdict on every run the box knows. ``safe``: every required weight file is
    off the box (or there are no weight files at all: ``nothing``); ``where``: ``hub``,
    ``laptop`` or ``hub+laptop`` when safe; ``epoch``: the asked run's best epoch."""

    safe: bool
    where: str | None
    epoch: int | None
    reason: str
    files: tuple[FileVerdict, ...] = ()
    weight_files: int = 0
    runs: tuple[str, ...] = ()
    #: The box's ``trainer safe --json`` answer, as it came, and the box's label.
    box: dict[str, Any] = field(default_factory=dict, repr=False)
    host: str = ""

    @property
    def nothing(self) -> bool:
        """No weight file on the box at all: nothing to lose."""
        return self.weight_files == 0

    @property
    def unsafe(self) -> list[FileVerdict]:
        """The required files that are not safe."""
        return [f for f in self.files if not f.safe]

    @property
    def unsafe_names(self) -> str:
        """The unsafe files, short (``exp1/weights/last.pt, ...``)."""
        return _listed([f.short for f in self.unsafe])

    @property
    def failures(self) -> list[str]:
        """The checks that could not be made for the unsafe files, each once."""
        return _failures(self.unsafe)


def _failures(files: Iterable[FileVerdict]) -> list[str]:
    return list(dict.fromkeys(f.failure for f in files if f.failure))


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


def box_inventory(transport: Transport, run_dirs: Iterable[str] = (),
                  projects: Iterable[str] = (), registry: bool = True,
                  timeout: float = SAFE_TIMEOUT,
                  connector: ToolGate | None = None) -> dict[str, Any]:
    """The box's ``trainer safe --json`` answer for these runs and projects (and the
    registry), through ``connector``'s gate when given. Raises ``TransportError`` with
    the box's one-line reason, e.g. for a path that is not a run directory."""
    answer = ask_tool(transport, inventory_words(run_dirs, projects, registry),
                      connector=connector, timeout=timeout)
    return inventory(answer, transport.label)


def inventory_words(run_dirs: Iterable[str] = (), projects: Iterable[str] = (),
                    registry: bool = True, keep: str | None = None) -> list[str]:
    """The words of ``trainer safe --json`` for these runs, projects (and registry);
    ``keep``: the answer is kept on the box under that name (``--keep``)."""
    words = ["safe", "--json", *(f"--project={p}" for p in projects)]
    words += ["--registry"] if registry else []
    words += [f"--keep={keep}"] if keep is not None else []
    return [*words, "--", *run_dirs]


def inventory(answer: ToolAnswer, label: str) -> dict[str, Any]:
    """The report of a ``trainer safe --json`` that ran on the box ``label``;
    ``TransportError`` with the box's one-line reason when it printed none."""
    report = answer.report
    if not answer.ok or report is None or not isinstance(report.get("runs"), list):
        why = answer.why.removeprefix("trainer safe: ") or f"exit {answer.rc}"
        raise TransportError(f"cannot list the weights on {label}: {why}")
    return report


def load_hub_client() -> None:
    """Import the Hub client now (about 0.15 s), in a thread while other answers are
    awaited, so that the first verification does not pay it (nothing when it is not
    installed: the verification then says so)."""
    with contextlib.suppress(HubError):
        import_hub(progress_bars=False)


def laptop_verify(repos: Sequence[str]) -> HubVerify:
    """Hub verification of copies in ``repos`` only, with this laptop's token
    (``HF_TOKEN`` or the token store)."""
    token = read_token(use_stdin=False)
    return lambda entries, sha, size: verify_pushed(entries, sha, size, repos=repos,
                                                    token=token)


def judge(answer: dict[str, Any], host_label: str, verify: HubVerify) -> Safety:
    """The verdict on a ``trainer safe --json`` answer (see the module docstring)."""
    pulls = ledger_entries(host_label)
    verdicts: list[FileVerdict] = []
    count, epoch = 0, None
    runs: list[str] = []
    for run in answer["runs"]:
        if not isinstance(run, dict) or not isinstance(run.get("files"), list):
            continue
        run_dir = clean_text(str(run.get("run_dir")))
        runs.append(run_dir)
        if "run" in (run.get("sources") or ()) and isinstance(run.get("best_epoch"), int):
            epoch = run["best_epoch"]
        for item in run["files"]:
            count += 1
            if isinstance(item, dict) and item.get("required"):
                verdicts.append(_judge_file(item, run_dir, pulls, verify))
    unsafe = [v for v in verdicts if not v.safe]
    where = {v.where for v in verdicts if v.where}
    if not runs:  # nothing was looked at: that is not "nothing to lose"
        return Safety(False, None, None, "no run found on the box to check (name the run, "
                      "or its project)", (), 0, (), answer, host_label)
    if unsafe:
        details = "; ".join(f"{v.path} ({v.detail})" for v in unsafe[:NAMED])
        more = f"; and {len(unsafe) - NAMED} more" if len(unsafe) > NAMED else ""
        failed = "".join(f"; {f}" for f in _failures(unsafe))
        return Safety(False, None, epoch, f"not safe: {details}{more}{failed}",
                      tuple(verdicts), count, tuple(runs), answer, host_label)
    if not count:
        scope = f"{len(runs)} run{'s' if len(runs) != 1 else ''}"
        return Safety(True, None, epoch, f"no weights yet ({scope}): nothing to lose",
                      tuple(verdicts), 0, tuple(runs), answer, host_label)
    names = _listed([f"{v.short} ({v.detail})" for v in verdicts])
    return Safety(True, "+".join(sorted(where)) or None, epoch, names,
                  tuple(verdicts), count, tuple(runs), answer, host_label)


def _judge_file(item: dict[str, Any], run_dir: str, pulls: list[dict],
                verify: HubVerify) -> FileVerdict:
    path = clean_text(str(item.get("path")))
    sha = item.get("sha256")
    if not isinstance(sha, str):
        why = clean_text(str(item.get("error") or "not hashed"))
        return FileVerdict(path, run_dir, False, None, f"unknown: {why}")
    copy = verified_copy(pulls, str(item.get("path")), sha)
    if copy is not None:
        return FileVerdict(path, run_dir, True, "laptop",
                           f"pulled to {clean_text(copy['local_path'])}")
    hits = [e for e in item.get("hub") or () if isinstance(e, dict)]
    if item.get("pending"):
        return FileVerdict(path, run_dir, False, None,
                           f"{clean_text(str(item['pending']))}; not pulled to this laptop")
    size = item.get("size") if isinstance(item.get("size"), int) else None
    said = verify(hits, sha, size)
    if said.ok:
        return FileVerdict(path, run_dir, True, "hub", f"on the Hub: {clean_text(said.why)}")
    return FileVerdict(path, run_dir, False, None,
                       f"{clean_text(said.why)}; not pulled to this laptop",
                       clean_text(said.failure))


def weights_safety(transport: Transport, run_dir: str | None = None,
                   projects: Sequence[str] = (), *, registry: bool = True,
                   verify: HubVerify | None = None, repos: Sequence[str] = (),
                   connector: ToolGate | None = None,
                   timeout: float = SAFE_TIMEOUT) -> Safety:
    """Whether every required weight file of the runs the box knows is off the box: the
    run ``run_dir`` (refused when it is not a run directory), its project, ``projects``
    and (``registry``) the box's registry. A Hub copy counts in ``repos`` and the user's
    own repositories (``remote.config.hub_repos``) only. ``connector``: run the box's
    tool through its gate (a box that may not hold the trainer yet); ``timeout``: the
    tool's limit. Raises ``TransportError`` (one line; a malformed ``[hub] repos`` is one
    too)."""
    runs = [run_dir] if run_dir else []
    scopes = list(dict.fromkeys([*(posixpath.dirname(run_dir.rstrip("/")) or "."
                                   for run_dir in runs), *projects]))
    verify = verify or users_verify(repos)
    answer = box_inventory(transport, runs, scopes, registry, timeout, connector)
    return judge(answer, transport.label, verify)


def users_verify(repos: Sequence[str] = ()) -> HubVerify:
    """Hub verification of copies in ``repos`` and the user's own repositories
    (``remote.config.hub_repos``); ``TransportError`` for a malformed ``[hub] repos``."""
    try:
        return laptop_verify((*repos, *hub_repos()))
    except ConfigError as exc:
        raise TransportError(str(exc)) from None


def judged_again(safety: Safety, verify: HubVerify | None = None) -> Safety:
    """``safety`` judged anew from the same answer of its box, without asking the box
    (one that is gone): what this laptop and the user's Hub repositories hold now of
    the files it listed (a verdict made without the box's answer stays as it is)."""
    if not isinstance(safety.box.get("runs"), list):
        return safety
    return judge(safety.box, safety.host, verify or users_verify())
