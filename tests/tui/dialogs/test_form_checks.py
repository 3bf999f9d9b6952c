"""The launch form checks every field it sends (issue 30 item 4): numbers, ranges and
choices by the trainer's own rules (``trainer.trainargs``), inline, before Launch is
enabled; a default the box changes after the form is shown is marked; a cleared field's
placeholder never reads as a value."""

from __future__ import annotations

import pytest
from rich.text import Text
from textual.widgets import Button, Input

from remote.runs import check_arg
from tests.fixtures.pilot import connected, local_app, quiet_env, shown, until  # noqa: F401 (quiet_env: autouse fixture)
from tests.fixtures.screen import flat, screen_text, until_shown
from trainer import engines, trainargs
from trainer.detector.model import FAMILY, SIZES
from trainer.engine.plan import UsageError, parse_args
from tui.box.launching import ChecksDone
from tui.dialogs.launch import FIELDS, LaunchForm

pytestmark = pytest.mark.anyio

#: (field, value the trainer refuses, words of the reason shown under it).
REFUSED = [
    ("epochs", "abc4", "not a number"),
    ("epochs", "0", "must be at least 1"),
    ("batch", "0", "or -1 for the largest that fits"),
    ("imgsz", "100", "multiple of 32"),
    ("device", "gpu0", "use cpu, 0, 0,1 or cuda:0"),
    ("save_period", "x", "not a number"),
    ("model", "huge", "use n, s, m"),
    ("extra", "workers=abc", "more args: workers=abc: not a number"),
    ("extra", "wrokers=2", "unknown argument 'wrokers'"),
    ("name", "a/b", "must be a plain folder name"),
]


def test_the_form_checks_with_the_trainers_own_rules() -> None:
    assert set(trainargs.MODEL_SIZES) == set(SIZES) and trainargs.MODEL_FAMILY == FAMILY
    assert engines.OUR_FAMILY == FAMILY  # how a reader tells our runs from LibreYOLO's
    for key, value, _why in REFUSED:
        if key in ("extra", "model", "device"):
            continue
        assert check_arg("trainer", key, value)
        with pytest.raises(UsageError):  # train refuses what the form refuses
            parse_args([f"{key}={value}"])
    for key, value in (("epochs", "3"), ("batch", "-1"), ("imgsz", "96"), ("device", "0,1"),
                       ("device", ""), ("model", "gpdet-s"), ("model", "runs/x/best.pt"),
                       ("save_period", "5"), ("workers", "0")):
        assert check_arg("trainer", key, value) == "", (key, value)
    # Another engine: the numbers every engine reads alike, its own keys left to it.
    assert check_arg("libreyolo", "epochs", "0")
    assert check_arg("libreyolo", "imgsz", "abc")
    assert check_arg("libreyolo", "model", "yolox-n") == ""
    assert check_arg("libreyolo", "pretrained", "False") == ""


def test_a_cleared_fields_placeholder_never_reads_as_a_value() -> None:
    for key, _label, placeholder in FIELDS:
        assert not any(word.strip(",.()").isdigit() and len(placeholder.split()) < 3
                       for word in placeholder.split()), key
    hints = {key: placeholder for key, _label, placeholder in FIELDS}
    for key in ("epochs", "batch", "imgsz", "device"):
        assert "empty:" in hints[key], key


async def test_every_field_is_checked_inline_before_launch(run_factory, shapes_data):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        launch = form.query_one("#launch", Button)
        form.query_one("#f-data", Input).value = str(shapes_data)
        await until_shown(pilot, "✔ the dataset doctor found no errors", timeout=120)
        await until(pilot, lambda: not launch.disabled)
        for key, value, why in REFUSED:
            field = form.query_one(f"#f-{key}", Input)
            good = field.value
            field.value = value
            await until(pilot, lambda: launch.disabled)
            note = str(form.query_one(f"#note-{key}").render())
            assert why in flat(note), (key, value, note)
            # The time estimate does not probe what the trainer would refuse (its line,
            # shown above the buttons unless a refusal is shown there).
            await until(pilot, lambda: "no estimate while the form refuses"
                        in form.estimate.plain)
            await pilot.press("ctrl+s")  # refused, and the form says why
            await until_shown(pilot, "cannot launch yet:")
            field.value = good
            await until(pilot, lambda: not launch.disabled)
        await pilot.press("escape")


async def test_a_default_the_box_changes_is_marked_until_typed_in(run_factory):
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        imgsz = form.query_one("#f-imgsz", Input)
        before = imgsz.value
        # What the box view does when the checks find no GPU after the form was shown.
        form.set_values({"imgsz": "160" if before != "160" else "96"}, only_untouched=True,
                        why="set for this box: it has no GPU")
        await until_shown(pilot, "set for this box: it has no GPU (was " + before)
        imgsz.focus()
        await pilot.press("backspace")
        # This field's mark goes (the box's own checks may mark other fields meanwhile: this
        # machine has no GPU either).
        await until(pilot, lambda: "no GPU" not in str(form.query_one("#note-imgsz").content))
        await pilot.press("escape")


async def form_with_data(app, pilot, data) -> tuple:
    """The box view and its launch form, opened with ``data`` in it and the doctor's
    verdict on it shown."""
    box = await connected(app, pilot)
    await pilot.press("l")
    await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
    form = app.screen
    form.query_one("#f-data", Input).value = str(data)
    await until_shown(pilot, "✔ the dataset doctor found no errors", timeout=120)
    return box, form


async def test_the_estimate_checks_the_values_as_they_are_when_its_timer_fires(run_factory,
                                                                             shapes_data):
    """The estimate's debounce timer can fire while a value just set is not yet checked
    (its change message still queued): the probe must judge the value as it is, not the
    last check (a probe of epochs=0 ran and failed into the form)."""
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        box, form = await form_with_data(app, pilot, shapes_data)
        await until(pilot, lambda: not form.query_one("#launch", Button).disabled)
        form.query_one("#f-epochs", Input).value = "0"  # its Changed is still queued
        box.launching.estimate.start(form)  # what the timer does when it fires now
        assert "no estimate while the form refuses" in form.estimate.plain
        assert box.launching.estimate.probe_id is None
        await pilot.press("escape")


async def test_checks_of_an_older_data_path_do_not_replace_the_newer(run_factory,
                                                                    shapes_data):
    """The checks asked when the form opened (no data yet) can come back after those of
    the path typed since (a first contact's preflight is slow): they are dropped, and the
    doctor's verdict on the path in the field stays."""
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        box, form = await form_with_data(app, pilot, shapes_data)
        # What the worker of the form's first checks posts when it ends last.
        box.post_message(ChecksDone({}, Text("doctor  waits for data"), "", False, {}, ""))
        await pilot.pause()  # the app idle again: the message was handled
        await pilot.pause()
        assert "✔ the dataset doctor found no errors" in flat(screen_text(app))
        assert not form.query_one("#launch", Button).disabled
        await pilot.press("escape")


async def test_a_value_typed_before_the_box_answers_is_kept_however_late_its_change(
        run_factory):
    """Under load the change of a typed value can be handled after the focus moved on;
    the box's no-GPU defaults, arriving later, must not replace it (epochs=500 became
    10 in the user path under two busy loops)."""
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        await connected(app, pilot)
        await pilot.press("l")
        await until(pilot, lambda: shown(app, LaunchForm) and app.focused is not None)
        form = app.screen
        epochs = form.query_one("#f-epochs", Input)
        form.query_one("#f-name", Input).focus()  # the focus already moved on
        await pilot.pause()
        epochs.value = "500"  # its change handled without the focus
        await pilot.pause()
        form.set_values({"epochs": "10", "batch": "8"}, only_untouched=True,
                        why="set for this box: it has no GPU")
        await pilot.pause()
        assert epochs.value == "500"  # the user's
        assert form.query_one("#f-batch", Input).value == "8"  # the form's own: changed
        await pilot.press("escape")


async def test_an_enter_meant_for_launch_as_the_checks_refuse_it_keeps_the_form(
        run_factory, shapes_data):
    """The doctor's refusal can come back while the focus is on Launch (a slow box, a
    loaded laptop): the focus goes to the field that refuses, not to Cancel, so that the
    Enter meant for Launch does not close the form and lose what was typed."""
    run = run_factory("exp1", done=2, total=5, state="completed")
    app = local_app(run.parent)
    async with app.run_test(size=(160, 48)) as pilot:
        box, form = await form_with_data(app, pilot, shapes_data)
        launch = form.query_one("#launch", Button)
        await until(pilot, lambda: not launch.disabled)
        launch.focus()
        await until(pilot, lambda: app.focused is launch)
        # What the worker posts when the doctor, asked again, refuses the path now.
        box.post_message(ChecksDone({}, Text("doctor  ✖ gone"), "data: gone", False, {},
                                    str(shapes_data)))
        await until(pilot, lambda: launch.disabled)
        assert app.focused is form.query_one("#f-data", Input)
        await pilot.press("enter")  # meant for Launch
        await until(pilot, lambda: app.focused is form.query_one("#f-name", Input))
        assert shown(app, LaunchForm)
        assert not any("cancelled" in e.message for e in app.history)
        await pilot.press("escape")
