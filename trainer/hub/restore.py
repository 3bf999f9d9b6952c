"""``python3 -m trainer restore REPO --run-dir DIR --token-stdin --json``: put a run's last
safe checkpoint and its history from the run's Hub repository into DIR, so that
``trainer train resume=True project=... name=...`` continues it on this box.

All files are taken at one commit (the repository's head when asked): ``last.pt`` (it
must be there: it holds the training state), ``best.pt``, ``metrics.jsonl``,
``results.csv`` and, for a LibreYOLO run, ``train_config.yaml`` (the push watcher sends
it; it is how the report tells the engine). Each checkpoint's sha256 is checked against
the Hub's LFS ETag. Files land in a staging folder inside DIR and are moved into place
only when all arrived.
The Hub's ``status.json`` is read, never put in place: it names the old box's pid, which
here could be any process; the resumed trainer writes its own. The trainer itself drops
history rows after the checkpoint's epoch when it resumes; LibreYOLO appends to what is
there, so for its runs the rows after the Hub status's epoch (the milestone the watcher
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
from trainer.hub.client import HubError, check_repo_id, describe_error, import_hub, read_token
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
            endpoint: str | None = None) -> dict[str, Any]:
    """Download and place the run's files; return the ``--json`` object. Raises
    ``HubError``, ``OSError`` or ``ValueError`` (a run is already there)."""
    check_repo_id(repo)
    if holds_run(run_dir):
        raise ValueError(f"{run_dir} already holds a run: resume it there, or pick another "
                         "name")
    hub = import_hub(progress_bars=False)
    try:
        api = hub.HfApi(endpoint=endpoint, token=token)
        info = api.model_info(repo)
        commit = str(info.sha)
        present = {s.rfilename for s in info.siblings or []}
    except Exception as exc:  # the client raises many types; all become one line
        raise HubError(f"cannot read {repo}: {describe_error(exc)}") from exc
    if "last.pt" not in present:
        raise HubError(f"{repo} holds no last.pt at {commit[:12]}: nothing to resume from "
                       "(its milestones push it every hub_period epochs)")
    run_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".restore-", dir=run_dir))
    try:
        placed = []
        for name, place, _required in FILES:
            if name in present:
                placed.append((_fetch(hub, repo, name, commit, token, endpoint, staging),
                               place))
        status = _hub_status(hub, repo, commit, token, endpoint) \
            if runfiles.STATUS_FILE in present else {}
        files = []
        for path, place in placed:
            dest = run_dir / place
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, dest)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    engine = "libreyolo" if engines.TRAIN_CONFIG_FILE in present else "trainer"
    epoch = status.get("completed_epochs")
    if engine == "libreyolo" and isinstance(epoch, int):
        runfiles.trim_history(run_dir, epoch)
    for _path, place in placed:
        dest = run_dir / place
        files.append({"file": place, "sha256": sha256_file(dest), "size": dest.stat().st_size})
    return {"ok": True, "repo": repo, "commit": commit, "run_dir": str(run_dir.absolute()),
            "engine": engine, "epoch": epoch, "files": files,
            "status": {k: status.get(k) for k in STATUS_FIELDS if k in status}}


def _fetch(hub: Any, repo: str, name: str, commit: str, token: str | None,
           endpoint: str | None, staging: Path) -> Path:
    """Download ``name`` at ``commit`` into ``staging``; a checkpoint is checked against
    the Hub's sha256."""
    try:
        url = hub.hf_hub_url(repo, name, revision=commit, endpoint=endpoint)
        etag = hub.get_hf_file_metadata(url, token=token, endpoint=endpoint).etag
        path = Path(hub.hf_hub_download(repo, name, revision=commit, token=token,
                                        endpoint=endpoint))
    except Exception as exc:
        raise HubError(f"download of {name} from {repo} failed: {describe_error(exc)}") \
            from exc
    dest = staging / name
    shutil.copyfile(path, dest)
    if name.endswith(".pt") and etag and re.fullmatch(r"[0-9a-f]{64}", etag) \
            and sha256_file(dest) != etag:
        raise HubError(f"{name} from {repo} does not match the Hub's sha256; not restored")
    return dest


def _hub_status(hub: Any, repo: str, commit: str, token: str | None,
                endpoint: str | None) -> dict[str, Any]:
    try:
        path = hub.hf_hub_download(repo, runfiles.STATUS_FILE, revision=commit, token=token,
                                   endpoint=endpoint)
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except Exception:  # the history is optional: the checkpoint is what resumes
        return {}
    return value if isinstance(value, dict) else {}


def main(argv: list[str]) -> int:
    """Run ``trainer restore``; exit 0 restored, 1 failed, 2 bad input."""
    p = argparse.ArgumentParser(
        prog="python3 -m trainer restore",
        description="Put a run's last.pt, best.pt, metrics.jsonl and results.csv from its "
        "Hub repository (one commit) into RUN_DIR, to resume it on this box.")
    p.add_argument("repo", metavar="REPO", help="the run's model repository, ORG/NAME")
    p.add_argument("--run-dir", required=True, metavar="DIR")
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
        result = restore_run(args.repo, Path(args.run_dir).expanduser(), token=token)
    except ValueError as exc:
        return fail(str(exc), 2)
    except (HubError, OSError) as exc:
        return fail(describe_error(exc), 1)
    print(runfiles.dumps(result) if args.json else
          f"restored {args.repo} at {result['commit'][:12]} into {result['run_dir']} "
          f"(epoch {result['epoch']})")
    return 0
