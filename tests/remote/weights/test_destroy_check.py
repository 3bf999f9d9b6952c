"""The destroy check cannot be fooled (issue 14): ``gpurent instance HOST destroy``
against the provider stand-ins and the Hub stand-in, with the box on this machine
(``local``, the box side run for real as ``python -m trainer safe``).

Each attack is refused, the provider stand-in sees no DELETE, and the message names the
file that is not safe; the honest cases (pushed and confirmed by the Hub, pulled and
intact, the typed override) still destroy.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.cli import main as gpurent
from remote.config import remember_hub_repo
from remote.runs.launch import LaunchResult, record_launch
from remote.transport.local import LocalTransport
from remote.weights.pull import copy_is_intact, ledger_path, pull_weights
from remote.weights.safety import judge, laptop_verify, weights_safety
from tests.fixtures.hub_standin import VALID_TOKEN, record_push
from tests.fixtures.paths import ROOT
from trainer import engines, procid, runfiles
from trainer.hub import safe as box_safe
from trainer.hub.ledger import append_entries, file_identity, sha256_file

#: What pushing a finished run sends of what it holds here: its weights and its end (the
#: final push; an ended run counts as safe on the Hub only with it).
END = ("best.pt", "status.json")


@pytest.fixture
def laptop(tmp_path, monkeypatch, hub_standin):
    """A laptop with no keys or config, a Hub token, and the Hub stand-in as its Hub."""
    for var in ("VAST_API_KEY", "RUNPOD_API_KEY", "LAMBDA_API_KEY", "CONTAINER_ID",
                "VAST_CONTAINERLABEL", "RUNPOD_POD_ID"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    remember_hub_repo("org/run")  # the user's repository (record_push pushes there)
    return tmp_path


@pytest.fixture
def vast(vast_standin, monkeypatch):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    return vast_standin


def weights(run: Path, name: str, size: int = 2048, mtime_s: int | None = None) -> Path:
    """Write ``weights/NAME`` atomically, with a chosen mtime (so "newer" is exact)."""
    path = run / "weights" / name
    runfiles.atomic_write_bytes(path, os.urandom(size))
    if mtime_s is not None:
        os.utime(path, ns=(mtime_s * 10**9, mtime_s * 10**9))
    return path


def our_run(run: Path, *, best: bool = True, last: bool = False,
            state: str = "completed") -> Path:
    """A run of our trainer (finished, unless ``state`` says otherwise): status.json,
    best.pt (epoch 2), maybe last.pt written before it (so not newer)."""
    runfiles.RunWriter(run).write_status({"state": state, "total_epochs": 3,
                                          "completed_epochs": 3, "best_epoch": 2})
    if last:
        weights(run, "last.pt", mtime_s=1_700_000_000)
    if best:
        weights(run, "best.pt", mtime_s=1_700_000_100)
    return run


def rewritten_in_place(path: Path) -> None:
    """Other bytes written into ``path`` itself and its times put back, as ``cp -p`` or
    ``rsync -t --inplace`` leave it: same inode, size and mtime; only the ctime moved."""
    was = path.stat()
    deadline = time.monotonic() + 5
    while True:
        with open(path, "r+b") as fh:
            fh.write(os.urandom(was.st_size))
        os.utime(path, ns=(was.st_atime_ns, was.st_mtime_ns))
        now = path.stat()
        if now.st_ctime_ns != was.st_ctime_ns:  # file times tick coarsely: wait for one
            break
        assert time.monotonic() < deadline, "the ctime never moved"
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == \
        (was.st_ino, was.st_size, was.st_mtime_ns)


def libreyolo_run(run: Path) -> Path:
    """A LibreYOLO 1.6 run trained with val=False: its status keys, no pid_start, and
    only weights/last.pt (best.pt is written on a validated improvement only)."""
    (run / "weights").mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "schema_version": 1, "state": "completed", "model_family": "yolo9",
        "save_dir": str(run), "total_epochs": 5, "completed_epochs": 5, "validated": False,
        "started_at": "2026-07-31T09:00:00Z", "updated_at": "2026-07-31T10:00:00Z",
        "checkpoints": {"best": None, "last": str(run / "weights" / "last.pt")}}))
    (run / "results.csv").write_text("epoch,time\n1,1.0\n")
    weights(run, "last.pt")
    return run


def destroy(standin, iid: str, *extra: str) -> int:
    return gpurent(["instance", "local", "destroy", "--provider", standin.provider,
                    "--instance", iid, "--base-url", standin.base_url, "--interval", "0",
                    "--timeout", "10", *extra])


def refused(capsys, standin, *names: str) -> str:
    """The refusal (naming ``names``): why on its first line, then a short line for each
    file or check, none said twice, and what to do last; nothing was deleted."""
    err = capsys.readouterr().err
    first, *more = err.splitlines()
    assert first.startswith("gpurent instance: refusing to destroy instance"), err
    assert more and all(line.startswith("  ") for line in more), err
    assert len(set(more)) == len(more) and more[-1].startswith("  to destroy it: "), err
    for name in names:
        assert name in err, (name, err)
    assert not standin.calls("DELETE")
    return err


# ---------------------------------------------------------------------- what is at stake


def test_a_path_that_is_not_a_run_is_refused(laptop, vast, capsys):
    iid = vast.add_instance()
    project = laptop / "proj"
    our_run(project / "exp1")
    for wrong in (project, project / "exp1" / "weights", project / "nope"):
        assert destroy(vast, iid, "--run", str(wrong), "--yes") == 1
        refused(capsys, vast, str(wrong))
    assert box_safe.is_run_dir(project / "exp1") and not box_safe.is_run_dir(project)


def test_a_libreyolo_run_with_only_last_pt_is_unsafe(laptop, vast, hub_standin, capsys):
    iid = vast.add_instance()
    run = libreyolo_run(laptop / "proj" / "exp1")
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    err = refused(capsys, vast, str(run / "weights" / "last.pt"), "never pushed")
    assert "nothing to lose" not in err
    record_push(hub_standin, run, ("last.pt", "status.json"))
    assert destroy(vast, iid, "--run", str(run), "--yes") == 0
    assert len(vast.calls("DELETE")) == 1


def test_one_unsafe_run_makes_the_project_unsafe(laptop, vast, hub_standin, capsys):
    iid = vast.add_instance()
    safe_run = our_run(laptop / "proj" / "exp1")
    other = our_run(laptop / "proj" / "exp2")
    record_push(hub_standin, safe_run, END)
    assert destroy(vast, iid, "--run", str(safe_run), "--yes") == 1
    err = refused(capsys, vast, str(other / "weights" / "best.pt"))
    assert str(safe_run / "weights" / "best.pt") not in err  # only what is not safe
    record_push(hub_standin, other, END, repo="org/other")
    hub_standin.requests.clear()
    assert destroy(vast, iid, "--run", str(safe_run), "--yes", "--hub-repo", "org/other",
                   "--json") == 0
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["safe"] and "exp1/weights/best.pt" in gate["reason"] \
        and "exp2/weights/best.pt" in gate["reason"]
    # one paths-info request per file at its recorded commit, at each of the two checks
    asked = [r.path.rsplit("/", 3)[-3] for r in hub_standin.routes("paths_info")]
    assert sorted(asked) == ["other", "other", "run", "run"]
    assert len(vast.calls("DELETE")) == 1


def test_last_pt_newer_than_best_pt_must_be_safe_too(laptop, vast, hub_standin, capsys):
    iid = vast.add_instance()
    run = our_run(laptop / "exp1", last=True, state="running")  # last.pt older:
    record_push(hub_standin, run)  # best.pt alone matters while the run goes on
    assert weights_safety(LocalTransport(), str(run), registry=False).safe
    weights(run, "last.pt", mtime_s=1_700_000_200)  # a later epoch without improvement
    weights(run, "epoch_3.pt", mtime_s=1_700_000_200)  # snapshots: listed, not required
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    err = refused(capsys, vast, str(run / "weights" / "last.pt"))
    assert "epoch_3.pt" not in err and str(run / "weights" / "best.pt") not in err
    safety = weights_safety(LocalTransport(), str(run), registry=False)
    assert safety.weight_files == 3 and safety.unsafe_names == "exp1/weights/last.pt"


def test_runs_launched_through_gpurent_elsewhere_are_at_stake(laptop, vast, hub_standin,
                                                              capsys):
    iid = vast.add_instance()
    run = our_run(laptop / "proj" / "exp1")
    record_push(hub_standin, run, END)
    elsewhere = our_run(laptop / "scratch" / "try3")
    proc = subprocess.Popen(["sleep", "60"])
    try:  # what remote.runs.launch.launch does after starting a run
        record_launch(LocalTransport(), LaunchResult(proc.pid, "", str(elsewhere)))
        identity = (proc.pid, procid.start_ticks(proc.pid), procid.boot_id())
    finally:
        proc.kill()
        proc.wait()
    registry = Path(os.environ[runfiles.RUN_REGISTRY_ENV]).read_text().splitlines()
    assert registry == [str(elsewhere.resolve())]
    pid, start, boot = (elsewhere / "launch.pid").read_text().split()
    assert (int(pid), int(start), boot) == identity
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    refused(capsys, vast, str(elsewhere / "weights" / "best.pt"))


def test_a_box_with_no_weights_has_nothing_to_lose(laptop, vast, capsys):
    iid = vast.add_instance()
    run = our_run(laptop / "exp1", best=False)
    safety = weights_safety(LocalTransport(), str(run))
    assert safety.safe and safety.nothing and "no weights yet" in safety.reason
    assert destroy(vast, iid, "--run", str(run), "--yes") == 0


# ---------------------------------------------------------------------- the pull ledger


def test_an_older_pulled_best_pt_is_not_a_copy_of_the_new_one(laptop, vast, capsys):
    """Issue 20: any pulled file of the run counted as a safe copy, whatever its sha."""
    iid = vast.add_instance()
    run = our_run(laptop / "exp1")
    pull_weights(LocalTransport(), str(run), laptop / "pulled")
    assert weights_safety(LocalTransport(), str(run)).where == "laptop"
    weights(run, "best.pt")  # a new best after the pull
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    refused(capsys, vast, str(run / "weights" / "best.pt"), "not pulled")
    pull_weights(LocalTransport(), str(run), laptop / "pulled")
    assert destroy(vast, iid, "--run", str(run), "--yes", "--json") == 0
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["safe"] and "pulled to" in gate["reason"]


def test_pulls_of_two_runs_never_share_a_destination(laptop, vast, capsys):
    iid = vast.add_instance()
    one, two = our_run(laptop / "p1" / "exp1"), our_run(laptop / "p2" / "exp1")
    box = LocalTransport()
    [a] = pull_weights(box, str(one), laptop / "dest")
    [b] = pull_weights(box, str(two), laptop / "dest")
    assert a.local_path != b.local_path
    assert a.local_path.endswith(f"local{one}/weights/best.pt".replace("/", os.sep))
    assert Path(a.local_path).read_bytes() == (one / "weights" / "best.pt").read_bytes()
    assert weights_safety(box, str(one), registry=False).safe
    assert weights_safety(box, str(two), registry=False).safe
    # The copy of run one is overwritten with other bytes of the same size: re-hashed.
    Path(a.local_path).write_bytes(os.urandom(2048))
    assert destroy(vast, iid, "--run", str(one), "--yes") == 1
    refused(capsys, vast, str(one / "weights" / "best.pt"))


def test_the_pull_ledger_holds_absolute_paths_and_the_copies_identity(
        laptop, vast, capsys, monkeypatch):
    iid = vast.add_instance()
    run = our_run(laptop / "exp1")
    (laptop / "here").mkdir()
    (laptop / "there").mkdir()
    monkeypatch.chdir(laptop / "here")
    [got] = pull_weights(LocalTransport(), str(run), "dest")  # a relative DEST
    entry = json.loads(ledger_path().read_text().splitlines()[-1])
    assert os.path.isabs(entry["local_path"]) and entry["local_path"] == got.local_path
    assert entry["remote_path"] == str((run / "weights" / "best.pt").resolve())
    assert {"inode", "mtime_ns", "size", "sha256"} <= set(entry)
    monkeypatch.chdir(laptop / "there")  # standing elsewhere changes nothing
    assert weights_safety(LocalTransport(), str(run)).safe
    copy = Path(got.local_path)
    shutil.copyfile(copy, copy.with_suffix(".tmp"))  # same bytes, new inode and mtime
    os.replace(copy.with_suffix(".tmp"), copy)
    assert weights_safety(LocalTransport(), str(run)).safe
    # An old-style line with a relative path, even to a right copy, counts for nothing.
    shutil.copyfile(copy, laptop / "there" / "best.pt")
    with open(ledger_path(), "a") as fh:
        fh.write(json.dumps({**entry, "local_path": "best.pt"}) + "\n")
    copy.unlink()
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    refused(capsys, vast, str(run / "weights" / "best.pt"))


def test_a_pulled_copy_rewritten_in_place_with_its_mtime_put_back_is_not_intact(laptop):
    run = our_run(laptop / "exp1")
    [got] = pull_weights(LocalTransport(), str(run), str(laptop / "dest"))
    entry = json.loads(ledger_path().read_text().splitlines()[-1])
    assert copy_is_intact(entry)
    rewritten_in_place(Path(got.local_path))
    assert not copy_is_intact(entry)


# ---------------------------------------------------------------------- the Hub ledger


def test_pushed_and_confirmed_by_the_hub_is_safe_until_the_repo_goes(laptop, vast,
                                                                     hub_standin, capsys):
    iid = vast.add_instance()
    run = our_run(laptop / "exp1")
    commit = record_push(hub_standin, run, END)
    safety = weights_safety(LocalTransport(), str(run))
    assert safety.safe and safety.where == "hub" and commit[:12] in safety.reason
    hub_standin.delete_repo("org/run")  # deleted (or renamed) on the Hub since
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    refused(capsys, vast, str(run / "weights" / "best.pt"), "not on the Hub")


def test_a_forged_or_stale_hub_ledger_is_not_believed(laptop, vast, hub_standin, capsys):
    iid = vast.add_instance()
    run = our_run(laptop / "exp1")
    best = run / "weights" / "best.pt"
    entry = {"file": "best.pt", "path_in_repo": "best.pt", "sha256": sha256_file(best),
             "size": best.stat().st_size, "repo": "org/run", "commit": "f" * 40,
             "epoch": 2, "time": runfiles.utc_now_iso(), **file_identity(best)}
    append_entries(run, [entry])  # a commit the Hub never had
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    refused(capsys, vast, str(best))
    # A real commit, but of other bytes under that name: the LFS sha256 disagrees.
    shutil.copyfile(best, laptop / "kept.pt")
    weights(run, "best.pt")
    commit = record_push(hub_standin, run, END)
    shutil.copyfile(laptop / "kept.pt", best)
    append_entries(run, [{**entry, "commit": commit, **file_identity(best)}])
    assert destroy(vast, iid, "--run", str(run), "--yes") == 1
    refused(capsys, vast, str(best), "other content")


def test_an_unreachable_hub_cannot_verify_and_the_override_still_works(
        laptop, runpod_standin, hub_standin, monkeypatch, capsys):
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_standin.key)
    pod = runpod_standin.add_instance()
    run = our_run(laptop / "exp1")
    record_push(hub_standin, run, END)
    hub_standin.fail("paths_info")  # 500 on every check
    assert destroy(runpod_standin, pod, "--run", str(run), "--yes") == 1
    refused(capsys, runpod_standin, str(run / "weights" / "best.pt"), "cannot verify")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    assert destroy(runpod_standin, pod, "--run", str(run), "--yes") == 1
    refused(capsys, runpod_standin, "cannot verify")
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{pod}\n"))
    assert destroy(runpod_standin, pod, "--run", str(run), "--override-unsafe",
                   "--json") == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gate"]["overridden"] and data["outcome"]["state"] == "destroyed"
    assert len(runpod_standin.calls("DELETE")) == 1


def test_a_refusal_names_each_file_once_and_a_failing_hub_once(laptop, vast, hub_standin,
                                                               capsys):
    """Three pushed runs whose Hub fails (500 on every check), one with a last.pt never
    pushed: why in one line, a short line per file, the Hub's failure and address once,
    then what to do. Not a line per file repeating the Hub's answer and its URL."""
    iid = vast.add_instance()
    runs = [our_run(laptop / "proj" / f"exp{i}", last=(i == 1)) for i in range(3)]
    commits = [record_push(hub_standin, run, END)[:12] for run in runs]
    weights(runs[1], "last.pt", mtime_s=1_700_000_200)  # newer than best.pt: at stake
    hub_standin.fail("paths_info")
    assert destroy(vast, iid, "--run", str(runs[0]), "--yes") == 1
    err = refused(capsys, vast)
    why, *files, hub, fix = err.splitlines()
    assert why == f"gpurent instance: refusing to destroy instance {iid}: 4 weight files " \
        "are not safe off the box"
    assert files == [f"  {path}: {said}; not pulled to this laptop" for path, said in (
        (runs[0] / "weights" / "best.pt", f"cannot verify (org/run at {commits[0]})"),
        (runs[1] / "weights" / "best.pt", f"cannot verify (org/run at {commits[1]})"),
        (runs[1] / "weights" / "last.pt", "never pushed"),
        (runs[2] / "weights" / "best.pt", f"cannot verify (org/run at {commits[2]})"))]
    host = hub_standin.url.split("//", 1)[1].rstrip("/")  # 127.0.0.1:PORT
    assert hub.startswith(f"  the Hub could not be asked: {host}: HTTP 500: "), hub
    assert err.count("HTTP 500") == 1 and err.count(host) == 1
    assert "paths-info" not in err  # no request path, once per file
    assert fix == "  to destroy it: push (gpurent push local:RUN --repo ORG/NAME) or pull " \
        "(gpurent pull local:RUN) each run above first, or add --override-unsafe and type " \
        "the instance id"
    assert destroy(vast, iid, "--run", str(runs[0]), "--yes", "--json") == 1
    gate = json.loads(capsys.readouterr().out)["gate"]
    assert gate["details"] == [line.strip() for line in (*files, hub)]
    assert gate["runs"] == [str(run) for run in runs] and not vast.calls("DELETE")


# ---------------------------------------------------------------------- the moment of acting


class Terminal(io.StringIO):
    """A terminal whose user answers the prompt after ``meanwhile`` ran."""

    def __init__(self, answer: str, meanwhile) -> None:
        super().__init__(answer)
        self.meanwhile = meanwhile

    def isatty(self) -> bool:
        return True

    def readline(self, *args) -> str:
        self.meanwhile()
        return super().readline(*args)


def test_the_cli_checks_again_after_the_prompt(laptop, vast, hub_standin, monkeypatch,
                                               capsys):
    iid = vast.add_instance()
    run = our_run(laptop / "exp1")
    record_push(hub_standin, run, END)
    monkeypatch.setattr("sys.stdin", Terminal("y\n", lambda: weights(run, "best.pt")))
    assert destroy(vast, iid, "--run", str(run)) == 1  # best.pt replaced at the prompt
    err = capsys.readouterr().err
    assert "not safe" in err and str(run / "weights" / "best.pt") in err
    assert not vast.calls("DELETE")
    record_push(hub_standin, run, END)
    monkeypatch.setattr("sys.stdin", Terminal("y\n", lambda: None))
    assert destroy(vast, iid, "--run", str(run)) == 0
    assert len(vast.calls("DELETE")) == 1


# ---------------------------------------------------------------------- the box side


def test_trainer_safe_lists_every_weight_file_stdlib_only(laptop, hub_standin):
    run = our_run(laptop / "proj" / "exp1", last=True)
    weights(run, "epoch_2.pt", mtime_s=1_699_000_000)
    commit = record_push(hub_standin, run, ("best.pt", "last.pt", "status.json"))
    result = subprocess.run([sys.executable, "-S", "-m", "trainer", "safe", "--json",
                             "--project", str(laptop / "proj")], cwd=ROOT,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    [listed] = json.loads(result.stdout)["runs"]
    files = {f["file"]: f for f in listed["files"]}
    assert sorted(files) == ["best.pt", "epoch_2.pt", "last.pt"]
    # The run has ended and is pushed: its final push must hold last.pt too, older or not.
    assert files["best.pt"]["required"] and files["last.pt"]["required"]
    assert not files["epoch_2.pt"]["required"] and "sha256" not in files["epoch_2.pt"]
    assert files["best.pt"]["sha256"] == sha256_file(run / "weights" / "best.pt")
    assert [e["commit"] for e in files["best.pt"]["hub"]] == [commit]
    assert [e["commit"] for e in files["last.pt"]["hub"]] == [commit]
    bad = subprocess.run([sys.executable, "-m", "trainer", "safe", str(laptop / "proj")],
                         cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "is not a run directory" in bad.stderr


def test_a_weight_file_rewritten_in_place_with_its_mtime_put_back_is_hashed_again(
        laptop, hub_standin):
    """Neither the box's hash cache nor the Hub ledger may answer for the new bytes of a
    file that kept its inode, size and mtime: a pushed best.pt overwritten so is no
    longer on the Hub."""
    cached = our_run(laptop / "a" / "exp1")
    best = cached / "weights" / "best.pt"
    [item] = box_safe.inventory([cached])["runs"][0]["files"]
    assert item["sha256"] == sha256_file(best)
    assert engines.run_cache(cached, box_safe.HASH_CACHE).is_file()  # hashed and kept
    rewritten_in_place(best)
    [item] = box_safe.inventory([cached])["runs"][0]["files"]
    assert item["sha256"] == sha256_file(best)

    pushed = our_run(laptop / "b" / "exp2")
    best = pushed / "weights" / "best.pt"
    record_push(hub_standin, pushed, END)  # the ledger entry holds best.pt's identity
    verify = laptop_verify(("org/run",))
    assert judge(box_safe.inventory([pushed]), "local", verify).where == "hub"
    rewritten_in_place(best)
    answer = box_safe.inventory([pushed])
    [item] = answer["runs"][0]["files"]
    assert item["sha256"] == sha256_file(best) and item["hub"] == []
    safety = judge(answer, "local", verify)
    assert not safety.safe and safety.unsafe_names == "exp2/weights/best.pt", safety


def test_which_files_must_leave_the_box(tmp_path):
    def need(*names_mtimes: tuple[str, int]) -> set[str]:
        run = tmp_path / f"r{len(list(tmp_path.iterdir()))}"
        for name, mtime in names_mtimes:
            weights(run, name, 16, mtime)
        return box_safe.required_names(box_safe.weight_files(run))

    assert need(("best.pt", 2), ("last.pt", 1)) == {"best.pt"}
    assert need(("best.pt", 1), ("last.pt", 2)) == {"best.pt", "last.pt"}
    assert need(("last.pt", 1), ("epoch_5.pt", 3)) == {"last.pt"}
    assert need(("epoch_5.pt", 3), ("epoch_4.pt", 2)) == {"epoch_5.pt"}
    assert need() == set()
