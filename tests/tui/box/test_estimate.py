"""Estimates that hold (issue 30): the launch form's estimate measures the configuration
that will run and comes within ±35 % of the first epoch of the run that follows, on this
CPU machine; its probe ends when the form closes or the run launches, and lives in a
private per-user directory under a name nobody can guess; ``p`` on a box that trains
asks first; a profile's verdict arrives as a notification kept in the events."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from textual.widgets import Input

from remote.runs import EstimateCancelled, cancel_estimate, new_estimate_id
from remote.runs import profile as run_profile
from remote.transport import LocalTransport
from tests.fixtures.launched import kill_launched
from tests.fixtures.pilot import (  # noqa: F401 (quiet_env: autouse fixture)
    connected,
    local_app,
    messages,
    press_button,
    quiet_env,
    shown,
    until,
)
from tests.fixtures.screen import flat, until_shown
from tests.fixtures.tui_scenes import PROFILE
from trainer.profiler import probes
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.launch import LaunchForm
from tui.dialogs.profile import profile_summary

pytestmark = pytest.mark.anyio
#: How far the estimate may be from the first measured epoch.
TOLERANCE = 0.35


@pytest.fixture(scope="module")
def epoch_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A shapes dataset big enough that an epoch is seconds, not start-up: 320 + 64
    images of 96 px (the demo's)."""
    from trainer.datasets.shapes import write_dataset

    return write_dataset(tmp_path_factory.mktemp("epoch-shapes"), train=320, val=64,
                         imgsz=96, seed=0)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The box's gpurent cache (the probes directory lives in it)."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("GPURENT_CACHE_DIR", str(folder))
    return folder


def probe_files(cache: Path) -> list[str]:
    """The files in the probes directory now."""
    folder = cache / "probes"
    return sorted(os.listdir(folder)) if folder.is_dir() else []


def leashes(cache: Path) -> list[str]:
    """The leashes of the probes running now."""
    return [n for n in probe_files(cache) if n.endswith(".run")]


def profiles_running(cache: Path) -> list[int]:
    """Pids of this test's ``trainer profile`` probes (their loader workers too): those
    whose cache is ``cache`` (another test's probe, beside this one, is not counted)."""
    mine = b"GPURENT_CACHE_DIR=" + bytes(cache)
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        with contextlib.suppress(OSError):
            words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            if b"trainer" in words and b"profile" in words and b"--probe" in words and \
                    mine in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found.append(int(pid))
    return found


def first_epoch_seconds(run_dir: Path) -> float | None:
    """The ``time`` of the run's first metrics row (``None`` before it is written)."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return None
    lines = path.read_text().splitlines()
    return float(json.loads(lines[0])["time"]) if lines else None


# ---------------------------------------------------------------- the box side


def test_probe_files_are_private_and_unpredictable(tmp_path: Path) -> None:
    first, second = new_estimate_id(), new_estimate_id()
    assert first != second and probes.PROBE_ID.fullmatch(first)
    report, leash = probes.probe_paths(first, tmp_path)
    folder = tmp_path / "probes"
    assert report.parent == leash.parent == folder
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    folder.chmod(0o755)  # opened up by someone: closed again
    probes.probe_dir(tmp_path)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    with pytest.raises(ValueError, match="hex digits"):
        probes.probe_paths("../../etc/passwd", tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "probes").symlink_to(tmp_path / "probes")
    with pytest.raises(probes.ProbeDirError, match="not a directory"):
        probes.probe_dir(elsewhere)


def test_a_cancelled_probe_busy_in_one_long_c_call_ends_itself(tmp_path: Path) -> None:
    # The main thread sleeps in C (as in one long CPU step): the interrupt cannot reach
    # it, so the leash ends the process after its grace, with the cancelled code.
    probe = new_estimate_id()
    code = ("import sys, time\n"
            "from pathlib import Path\n"
            "from trainer.profiler import probes\n"
            f"leash = probes.Leash(probes.probe_paths({probe!r}, Path(sys.argv[1]))[1],"
            " poll=0.05, grace=0.5)\n"
            "print('held', flush=True)\n"
            "time.sleep(120)\n")
    child = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "held\n"
        assert probes.cancel(probe, tmp_path, wait=60) is True
        assert child.wait(timeout=60) == probes.CANCELLED
        assert not any((tmp_path / "probes").iterdir())  # neither leash nor tombstone
    finally:
        child.kill()
        child.wait()


def test_a_cancelled_probe_ends_at_once_even_before_it_started(epoch_data, cache) -> None:
    transport = LocalTransport()
    args = {"model": "n", "data": str(epoch_data), "imgsz": "96", "batch": "16",
            "device": "cpu", "project": str(cache / "p"), "name": "x", "steps": "2",
            "warmup": "0"}
    early = new_estimate_id()
    assert cancel_estimate(transport, early) is False  # not started yet: a tombstone
    with pytest.raises(EstimateCancelled):
        run_profile(transport, args, estimate=early)
    assert probe_files(cache) == []  # neither leash nor tombstone left
    done = new_estimate_id()
    report = run_profile(transport, args, estimate=done)
    assert report["path"] == str(cache / "probes" / f"{done}.json")
    assert report["config"]["workers"] <= (os.cpu_count() or 1)  # as train would use
    assert report["cost"]["val_seconds"] > 0
    assert leashes(cache) == []


# ---------------------------------------------------------------- the form


@pytest.mark.alone
async def test_the_estimate_holds_for_the_run_that_follows(run_factory, epoch_data, cache):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    launched = run.parent / "held"
    try:
        async with app.run_test(size=(160, 48), notifications=True) as pilot:
            box = await connected(app, pilot)
            estimate = box.launching.estimate
            await pilot.press("l")
            await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
            form = app.screen
            await pilot.press(*str(epoch_data))
            await until_shown(pilot, "✔ the dataset doctor found no errors", timeout=120)
            await until(pilot, lambda: estimate.probe_id is not None or estimate.report)
            # New settings: the probe of the old ones ends, a new one measures these.
            for key, value in (("imgsz", "96"), ("batch", "16"), ("epochs", "2"),
                               ("name", "held")):
                form.query_one(f"#f-{key}", Input).value = value
            await until(pilot, lambda: estimate.report is not None
                        and estimate.report["config"]["imgsz"] == 96
                        and estimate.report["config"]["batch"] == 16, timeout=240)
            await until(pilot, lambda: len(leashes(cache)) == 0, timeout=30)
            text = await until_shown(pilot, "estimate:", "for 2 epochs", "validation")
            assert "per epoch" in flat(text)
            guess = estimate.report["cost"]["epoch_total_seconds"]
            await pilot.press("ctrl+s")
            await until(pilot, lambda: not isinstance(app.screen, LaunchForm), timeout=60)
            await until(pilot, lambda: first_epoch_seconds(launched) is not None,
                        timeout=300)
            measured = first_epoch_seconds(launched)
            assert measured is not None
            error = guess / measured - 1
            print(f"estimate {guess:.2f} s, first epoch {measured:.2f} s: {error:+.0%}")
            assert abs(error) <= TOLERANCE, (guess, measured)
    finally:
        kill_launched(launched)


async def test_the_probe_ends_when_the_form_closes(run_factory, epoch_data, cache):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        box = await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        for key, value in (("imgsz", "640"), ("batch", "64")):  # a probe that would last
            form.query_one(f"#f-{key}", Input).value = value
        form.query_one("#f-data", Input).value = str(epoch_data)
        await until(pilot, lambda: len(leashes(cache)) == 1, timeout=120)
        assert box.launching.estimate.probe_id is not None
        assert profiles_running(cache)
        await pilot.press("escape")
        await until(pilot, lambda: not leashes(cache) and not profiles_running(cache),
                    timeout=30)
        assert not any("failed" in m for m in messages(app))


async def test_p_on_a_training_box_says_so_and_asks(run_factory, sleeper):
    run = run_factory("exp1", done=2, total=9, pid=sleeper.pid)
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        await connected(app, pilot)
        await pilot.press("p")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await until_shown(pilot, "exp1 is training on this box", "Profile anyway")
        assert app.focused is not None and app.focused.id == "cancel"
        await pilot.press("escape")
        await until(pilot, lambda: not isinstance(app.screen, ConfirmDialog))
        await pilot.press("p")
        await until(pilot, lambda: shown(app, ConfirmDialog))
        await press_button(pilot, "#confirm")
        await until(pilot, lambda: shown(app, LaunchForm))
        # The form's estimate does not probe beside a training run either.
        form = app.screen
        form.query_one("#f-data", Input).value = "/nowhere/data.yaml"
        await pilot.press("escape")


async def test_a_profile_verdict_is_a_notification_kept_in_the_events(run_factory,
                                                                      epoch_data, cache):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48), notifications=True) as pilot:
        box = await connected(app, pilot)
        await pilot.press("p")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        for key, value in (("imgsz", "64"), ("batch", "16"), ("name", "prof")):
            form.query_one(f"#f-{key}", Input).value = value
        form.query_one("#f-data", Input).value = str(epoch_data)
        await until_shown(pilot, "✔ the dataset doctor found no errors", timeout=120)
        await press_button(pilot, "#profile")
        await until(pilot, lambda: any(m.startswith("profile of prof:")
                                       for m in messages(app)), timeout=300)
        assert app.screen is app.screen_stack[0]  # no dialog waits for a key
        assert app.focused is box.log_pane.log_view
        assert not leashes(cache)
        line = next(e.message for e in app.history if e.message.startswith("profile of"))
        assert "an epoch ~" in line  # this machine has no GPU: the verdict says so


def test_the_verdict_in_a_few_sentences() -> None:
    line = profile_summary(PROFILE, "exp3")
    assert line.startswith("profile of exp3: DATALOADER, the step waits for data 46 %")
    assert "faster GPU? No: the GPU already waits" in line
    assert "lever: raise workers= (4 now; the box has 32 CPUs)" in line
    assert "an epoch ~6m32s, $0.33 of training steps." in line
