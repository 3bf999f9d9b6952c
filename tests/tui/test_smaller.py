"""The smaller items of issue 30, each as a user met it: runs in natural order, the
progress bar's 100 %, a header that does not say its state three times, a line of
information that leaves the status row, a stop dialog in the words of the run's own
engine, no ctrl+r resume for a run that never trained, preflight warnings whole. (The
pull prompt: ``test_tui_app.test_pull_makes_the_weights_safe``; the reattach line's
``-i KEY``: ``test_tui_words.test_reattach_commands``.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from remote.runs import list_runs
from remote.transport import LocalTransport
from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import until_shown
from tests.fixtures.tui_runs import FROZEN_NOW
from trainer import runfiles
from trainer.text import natural_key
from tui.box.lines import INFO_SECONDS, status_line
from tui.box.reports import findings_text
from tui.box.state import BoxState
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.launch import LaunchForm
from tui.spec import BoxSpec
from tui.widgets.runs import RunsList

pytestmark = pytest.mark.anyio


def same_update(*runs: Path) -> None:
    """Give ``runs`` one and the same ``updated_at`` (a project written by a script)."""
    for run in runs:
        path = run / runfiles.STATUS_FILE
        status = json.loads(path.read_text())
        status["updated_at"] = runfiles.utc_now_iso(FROZEN_NOW)
        runfiles.atomic_write_json(path, status)


def set_status(run: Path, **fields: object) -> None:
    """Change fields of a run's status.json."""
    path = run / runfiles.STATUS_FILE
    status = json.loads(path.read_text())
    status.update(fields)
    runfiles.atomic_write_json(path, status)


def test_natural_key_orders_numbers_by_value() -> None:
    names = ["exp10", "exp2", "exp1", "exp11", "Exp3", "run-b", "run-a"]
    assert sorted(names, key=natural_key) == ["exp1", "exp2", "Exp3", "exp10", "exp11",
                                              "run-a", "run-b"]


async def test_runs_updated_together_are_listed_in_natural_order(run_factory):
    runs = [run_factory(f"exp{n}", done=3, total=3, state="completed")
            for n in (1, 2, 10, 11, 3)]
    same_update(*runs)
    order = ["exp11", "exp10", "exp3", "exp2", "exp1"]  # newest first: the higher number
    assert [r.name for r in list_runs(LocalTransport(), str(runs[0].parent))] == order
    app = local_app(runs[0].parent)
    async with app.run_test(size=(160, 48)) as pilot:
        box = await connected(app, pilot)
        listed = box.query_one(RunsList)
        await until(pilot, lambda: len(listed.runs) == 5)
        assert [r.name for r in listed.runs] == order


async def test_the_header_says_100_percent_and_its_state_once(run_factory):
    done = run_factory("exp1", done=3, total=3, state="completed")
    app = local_app(done.parent)
    async with app.run_test(size=(80, 24)) as pilot:
        await connected(app, pilot)
        text = await until_shown(pilot, "epoch 3/3", "100%")
        header = text.splitlines()[:2]
        assert header[1].split("100%")[0].rstrip().endswith("━")  # no stray "1"
        assert "state completed" not in header[0]
        assert "✔ completed  after 3/3 epochs" in header[0]


async def test_a_stopped_run_reads_stopped_once(run_factory):
    run = run_factory("exp1", done=2, total=9, state="stopped")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        text = await until_shown(pilot, "■ stopped")
        first = text.splitlines()[0]
        assert "state stopped" not in first and "stopped stopped" not in first


def test_a_line_of_information_leaves_the_status_row() -> None:
    now = [1000.0]
    state = BoxState(BoxSpec("local", "local"), clock=lambda: now[0])
    state.say("link back after 32s without data")
    assert "link back after 32s" in status_line(state, 0).plain
    now[0] += INFO_SECONDS + 1
    assert status_line(state, 0).plain == ""  # gone from the row, kept in the events
    state.say("pull failed: no weights", "error")
    now[0] += 600
    assert "pull failed" in status_line(state, 0).plain  # a failure stays


@pytest.mark.parametrize("family, says, not_says", [
    ("gpdet", "Our trainer gets SIGTERM", "LibreYOLO"),
    ("yolox", "LibreYOLO gets SIGINT", "Our trainer"),
])
async def test_the_stop_dialog_speaks_of_the_runs_own_engine(run_factory, sleeper, family,
                                                            says, not_says):
    run = run_factory("exp1", done=2, total=9, pid=sleeper.pid)
    set_status(run, model_family=family)
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        await pilot.press("x")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        text = await until_shown(pilot, says)
        assert not_says not in text
        await pilot.press("escape")


async def test_no_resume_for_a_run_that_never_trained(run_factory):
    run = run_factory("exp1", done=2, total=9, state="completed")
    broken = run.parent / "broken"
    broken.mkdir()
    (broken / "launch.pid").write_text("999999\n")
    (broken / "console.log").write_text("ModuleNotFoundError: No module named 'torch'\n")
    app = local_app(run.parent, run="broken")
    async with app.run_test(size=(160, 48)) as pilot:
        box = await connected_to_any(app, pilot)
        assert box.state.run_name == "broken"
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        hint = await until_shown(pilot, "ctrl+o clone broken")
        assert "ctrl+r resume broken" not in hint
        await pilot.press("ctrl+r")
        await until_shown(pilot, "cannot resume broken: it never")
        form = app.screen
        assert form.query_one("#f-name").value != "broken"  # nothing was filled in
        await pilot.press("escape")


async def connected_to_any(app, pilot):
    """The box view once it has listed the runs (a run that never started has no
    status, metrics or log to wait for)."""
    from tui.box.view import BoxView

    box = app.query_one(BoxView)
    await until(pilot, lambda: len(box.query_one(RunsList).runs) >= 2
                and box.state.run_dir is not None)
    return box


def test_a_long_preflight_warning_is_shown_whole() -> None:
    message = ("HF_HOME is not set; the Hub cache goes to /root/.cache/huggingface, on the "
               "root filesystem (ext4), a real disk that lives as long as the instance. Set "
               "HF_HOME to a directory on a persistent volume")
    text = findings_text("preflight", {"ok": True, "checks": [
        {"name": "hf_home", "status": "warn", "message": message}]}).plain
    assert message in text and "…" not in text


async def test_the_hf_home_warning_is_whole_in_the_form_at_160_columns(run_factory,
                                                                      monkeypatch):
    monkeypatch.delenv("HF_HOME")  # the Hub cache in ~/.cache, on this machine's own disk
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        findings = form.query_one("#findings")
        await until(pilot, lambda: "hf_home" in str(findings.render()), timeout=120)
        shown_text = str(findings.render())
        assert "Set HF_HOME to a directory on a persistent volume" in shown_text
        assert "…" not in shown_text
        await until_shown(pilot, "persistent")  # on screen, wrapped in the form
        await pilot.press("escape")
