"""``python3 -m trainer restore REPO --run-dir DIR --token-stdin --json``: put a run's last
safe checkpoint and its history from the run's Hub repository into DIR, so that
``trainer train resume=True project=... name=...`` continues it on this box.

All files are taken at one commit, one that changed ``last.pt`` (it must be there: it
holds the training state), with ``best.pt``, ``metrics.jsonl``, ``results.csv`` and, for
a LibreYOLO run, ``train_config.yaml`` (the push watcher sends it; it is how the report
tells the engine). A repository may hold the pushes of many runs, each over the last:
the commit is the newest (from the head, or from ``--revision``) whose ``status.json``
was pushed with ``last.pt`` (milestones and final pushes send both) and names, by its
``save_dir``, the run DIR names (its last component); another run's newer push is
passed over. When none of the recent versions is the run's, nothing is restored and the
one line says whose ``last.pt`` the repository holds. Each checkpoint's sha256 is
checked against the Hub's LFS ETag; a copy that does not match is also removed from the
box's Hugging Face cache, where it would be taken again by every later restore of that
commit. Files land in a staging folder inside DIR and are moved into place only when
all arrived.
The Hub's ``status.json`` is read, never put in place: it names the old box's pid, which
here could be any process; the resumed trainer writes its own. The trainer itself drops
history rows after the checkpoint's epoch when it resumes; LibreYOLO appends to what is
there, so for its runs the rows after that status's epoch (the milestone the watcher
pushed ``last.pt`` at) are dropped here.

A DIR that already holds a run (status, metrics or weights) is refused. Standard
library, plus huggingface_hub for the download.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from trainer import engines, runfiles
from trainer.hub.client import (
    MAX_VERSIONS,
    HubError,
    PushedCheckpoint,
    check_repo_id,
    describe_error,
    import_hub,
    pushed_checkpoint,
    read_token,
)
from trainer.hub.ledger import sha256_file
from trainer.text import one_line

#: (name in the repository, place in the run directory, required)
FILES = (("last.pt", "weights/last.pt", True), ("best.pt", "weights/best.pt", False),
         ("metrics.jsonl", runfiles.METRICS_FILE, False),
         ("results.csv", runfiles.RESULTS_FILE, False),
         (engines.TRAIN_CONFIG_FILE, engines.TRAIN_CONFIG_FILE, False))
#: Fields of the Hub's ``status.json`` the report passes on.
STATUS_FIELDS = ("state", "completed_epochs", "total_epochs", "best_epoch", "best_metric",
                 "best_metric_name", "mean_epoch_seconds", "updated_at", "args", "host")


def holds_run(run_dir: Path) -> bool:
    """Whether ``run_dir`` already holds (the start of) a run."""
    return any((run_dir / p).exists() for p in (runfiles.STATUS_FILE, runfiles.METRICS_FILE,
                                                  "weights/last.pt", "weights/best.pt"))


def restore_run(repo: str, run_dir: Path, *, token: str | None = None,
                endpoint: str | None = None, revision: str | None = None) -> dict[str, Any]:
    """Download and place the files of the run ``run_dir`` names, as of the repository's
    head or of ``revision`` (the commit the laptop verified as this run's: a push of
    another run after it does not change what is restored); return the ``--json``
    object. Raises ``HubError`` (the ``last.pt`` there is another run's included),
    ``OSError`` or ``ValueError`` (a run is already there)."""
    check_repo_id(repo)
    if holds_run(run_dir):
        raise ValueError(f"{run_dir} already holds a run: resume it there, or pick another "
                         "name")
    hub = import_hub(progress_bars=False)
    try:
        found = pushed_checkpoint(hub, repo, token, endpoint, revision, run_dir.name)
        commit = found.commit
        api = hub.HfApi(endpoint=endpoint, token=token)
        present = {s.rfilename for s in api.model_info(repo, revision=commit).siblings or []}
    except HubError:
        raise
    except Exception as exc:  # the client raises many types; all become one line
        raise HubError(f"cannot read {repo}: {describe_error(exc, endpoint)}") from exc
    if found.status is None:
        raise HubError(f"{repo}'s last.pt ({found.pushed}) came without a status.json: cannot "
                       "tell which run's it is, so nothing is restored (push a run's last.pt "
                       "with its status.json: gpurent push HOST:RUN --repo REPO)")
    status = found.status
    epoch = status.get("completed_epochs")
    _check_run(found, run_dir.name, f"epoch {epoch}, {found.pushed}")
    run_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=run_dir))
    try:
        placed = []
        for name, place, _required in FILES:
            if name in present:
                placed.append((_fetch(hub, repo, name, commit, token, endpoint, staging),
                               place))
        files = []
        for path, place in placed:
            dest = run_dir / place
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    engine = "libreyolo" if engines.TRAIN_CONFIG_FILE in present else "trainer"
    if engine == "libreyolo" and isinstance(epoch, int):
        try:
            runfiles.trim_history(run_dir, epoch)
        except ValueError as exc:
            raise HubError(f"{repo}'s history cannot be cut at its epoch {epoch}: {exc}; "
                           f"the files are in {run_dir} as the Hub has them") from None
    for _path, place in placed:
        dest = run_dir / place
        files.append({"file": place, "sha256": sha256_file(dest), "size": dest.stat().st_size})
    return {"ok": True, "repo": repo, "commit": commit, "run_dir": str(run_dir.absolute()),
            "engine": engine, "epoch": epoch, "files": files,
            "status": {k: status.get(k) for k in STATUS_FIELDS if k in status}}


def _check_run(found: PushedCheckpoint, name: str, pushed: str) -> None:
    """Raise ``HubError`` unless the status pushed with ``found``'s ``last.pt`` is run
    ``name``'s."""
    repo, owner = found.repo, found.run
    if owner is None:
        raise HubError(f"the status.json pushed with {repo}'s last.pt ({pushed}) names no run "
                       f"(no save_dir): cannot tell it is run {name}'s, so nothing is "
                       "restored")
    if owner != name:
        owner = one_line(owner, 100)
        raise HubError(f"{repo} holds run {owner}'s last.pt ({pushed}), not run {name}'s, "
                       f"so nothing is restored: another run pushed to the same repository, "
                       f"and no earlier version of last.pt there (up to {MAX_VERSIONS} looked "
                       f"at) is run {name}'s (resume {repo}:{owner} to go on with that run)")


def _fetch(hub: Any, repo: str, name: str, commit: str, token: str | None,
           endpoint: str | None, staging: Path) -> Path:
    """Download ``name`` at ``commit`` into ``staging``; a checkpoint is checked against
    the Hub's sha256, and a bad one removed from the Hugging Face cache."""
    try:
        url = hub.hf_hub_url(repo, name, revision=commit, endpoint=endpoint)
        etag = hub.get_hf_file_metadata(url, token=token, endpoint=endpoint).etag
        path = Path(hub.hf_hub_download(repo, name, revision=commit, token=token,
                                        endpoint=endpoint))
    except Exception as exc:
        why = describe_error(exc, endpoint)
        raise HubError(f"download of {name} from {repo} failed: {why}") from exc
    dest = staging / name
    shutil.copyfile(path, dest)
    if name.endswith(".pt") and etag and re.fullmatch(r"[0-9a-f]{64}", etag) \
            and sha256_file(dest) != etag:
        raise HubError(f"{name} from {repo} does not match the Hub's sha256, so nothing is "
                       f"restored; {_uncache(path)}")
    return dest


def _uncache(path: Path) -> str:
    """Remove a download from the Hugging Face cache: the snapshot's entry ``path`` and
    the blob it links to (a later download at the same commit would take it from there
    without asking the Hub). What was done, in words."""
    blob = path.resolve()
    try:
        path.unlink(missing_ok=True)
        blob.unlink(missing_ok=True)
    except OSError as exc:
        return (f"the copy in this box's Hugging Face cache is bad and could not be removed "
                f"({exc.strerror or exc}): remove {blob}, or every later restore takes it "
                "again")
    return ("the copy in this box's Hugging Face cache was bad and was removed, so the next "
            "restore downloads it again")


def main(argv: list[str]) -> int:
    """Run ``trainer restore``; exit 0 restored, 1 failed, 2 bad input."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer restore",
        description="Put a run's last.pt, best.pt, metrics.jsonl and results.csv from its "
        "Hub repository (one commit) into RUN_DIR, to resume it on this box.")
    p.add_argument("repo", metavar="REPO", help="the run's model repository, ORG/NAME")
    p.add_argument("--run-dir", required=True, metavar="DIR")
    p.add_argument("--revision", metavar="COMMIT", help="restore the run's last.pt as "
                   "of this commit (default: the repository's head)")
    p.add_argument("--token-stdin", action="store_true",
                   help="read the Hub token from stdin")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    args = p.parse_args(argv)

    def fail(message: str, code: int) -> int:
        print(f"trainer restore: {one_line(message, 1000)}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "error": one_line(message, 1000)}))
        return code

    token = read_token(args.token_stdin) if args.token_stdin else None
    try:
        result = restore_run(args.repo, Path(args.run_dir).expanduser(), token=token,
                             revision=args.revision)
    except ValueError as exc:
        return fail(str(exc), 2)
    except HubError as exc:  # ours, whole (describe_error cuts at 300 characters)
        return fail(str(exc), 1)
    except OSError as exc:
        return fail(describe_error(exc), 1)
    print(runfiles.dumps(result) if args.json else
          f"restored {args.repo} at {result['commit'][:12]} into {result['run_dir']} "
          f"(epoch {result['epoch']})")
    return 0
