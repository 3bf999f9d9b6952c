"""The parts of a box view alone, without an app: the box's facts (``BoxState``), the
lines drawn from them, and controllers given fake ports (a list for posted messages, a
recorder for workers, an app that records notifications and dialogs)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from remote.runs.guard import GuardState
from remote.runs.read import RunInfo
from remote.transport.local import LocalTransport
from remote.watch.events import LogEvent, MetricsEvent, StatusEvent
from trainer.health import Health
from trainer.runfiles import StatusRead
from tui.box.failures import ActionRefused, Failure
from tui.box.guard import Guard
from tui.box.lines import status_line, tab_label
from tui.box.link import HostKeyAsked, Link
from tui.box.logs import LogPaging, OlderLog
from tui.box.outcomes import Outcomes
from tui.box.parts import BoxKey, PartMessage, handles, keys_of, routes
from tui.box.ports import Ports, Progress
from tui.box.state import BoxState
from tui.box.stop import RunStop
from tui.box.view import BoxView
from tui.box.watching import Watch, Watching
from tui.dialogs.confirm import ConfirmDialog
from tui.spec import BoxSpec

NOW = 1_000_000.0


def status(verdict: str) -> StatusEvent:
    return StatusEvent(StatusRead({"state": "running"}, ""), Health(verdict, "why"), True, NOW)


def info(name: str, health: str) -> RunInfo:
    return RunInfo(name, f"/p/{name}", None, health, "", None, None, None, None, None)


def box_state(**spec: Any) -> BoxState:
    return BoxState(BoxSpec("ssh", "root@203.0.113.7", project="/p", **spec), lambda: NOW)


@dataclass
class FakeApp:
    """Records what the parts ask of the app."""

    said: list[tuple[str, str, str]] = field(default_factory=list)
    screens: list[Any] = field(default_factory=list)

    def notify(self, message: str, *, title: str = "", severity: str = "information",
               timeout: float | None = None) -> None:
        self.said.append(("notify", message, severity))

    def record(self, message: str, title: str = "", severity: str = "note") -> None:
        self.said.append(("record", message, severity))

    def alert(self, message: str, title: str = "", severity: str = "error") -> None:
        self.said.append(("alert", message, severity))

    def push_screen(self, screen: Any, callback: Any = None) -> None:
        self.screens.append((screen, callback))


@dataclass
class Fakes:
    """Ports for one part, and what went through them."""

    state: BoxState
    app: FakeApp = field(default_factory=FakeApp)
    posted: list[Any] = field(default_factory=list)
    workers: list[tuple[str, Any, str, str | None]] = field(default_factory=list)

    def ports(self) -> Ports:
        def post(message: Any) -> bool:
            self.posted.append(message)
            return True

        def work(name: str, fn: Any, *, group: str, label: str | None = None,
                 exclusive: bool = True) -> None:
            self.workers.append((name, fn, group, label))

        return Ports(self.state, post=post, work=work, app=lambda: self.app)


# ---------------------------------------------------------------- the state


def test_watching_a_run_forgets_the_previous_runs_facts() -> None:
    state = box_state()
    state.status, state.last_verdict = status("live"), "live"
    state.weight_files = {"weights": ("best.pt",)}
    state.unseen = {"/p/exp2", "/p/exp1"}
    gen = state.watch("/p/exp2")
    assert gen == 1 and state.run_dir == "/p/exp2" and state.run_name == "exp2"
    assert state.status is None and state.last_verdict is None and state.weight_files == {}
    assert state.unseen == {"/p/exp1"}  # its alert is seen: it is on screen now
    assert state.watch(None) == 2 and state.run_name == ""


def test_the_run_chosen_from_a_listing() -> None:
    state = box_state()
    runs = [info("old", "completed"), info("going", "live"), info("newer", "failed")]
    assert state.choose_run(runs, None) == "/p/going"  # a going run first
    assert state.choose_run(runs[2:], None) == "/p/newer"  # else the newest
    assert state.choose_run(runs, "old") == "/p/old"  # the run asked for, by name
    assert state.choose_run(runs, "typo") == "/p/typo"  # not listed (yet): its path
    state.run_dir = "/p/old"
    assert state.choose_run(runs, None) == "/p/old"  # the watched run stays


def test_verdicts_alert_on_a_change_to_one_worth_it() -> None:
    state = box_state()
    assert not state.note_verdict("/p/a", "live")  # first seen: no alert
    assert not state.note_verdict("/p/a", "live")
    assert not state.note_verdict("/p/a", "slow")  # a change, not worth an alert
    assert state.note_verdict("/p/a", "dead")
    assert state.verdicts == {"/p/a": "dead"}


def test_the_watched_rows_health_is_the_live_one() -> None:
    state = box_state()
    runs = [info("a", "live"), info("b", "live")]
    assert state.with_live_health(runs) == runs  # nothing watched yet
    state.run_dir, state.status = "/p/a", status("dead")
    assert [r.health for r in state.with_live_health(runs)] == ["dead", "live"]


def test_refusals_say_why_and_what_to_do() -> None:
    state = box_state()
    with pytest.raises(ActionRefused, match="not connected to the box yet"):
        state.need_transport()
    state.transport, state.down_since = LocalTransport(), NOW - 34
    with pytest.raises(ActionRefused, match=r"no link to the box \(last data 34s ago\)"):
        state.need_transport()
    with pytest.raises(ActionRefused, match="no run selected"):
        state.need_run()


def test_the_price_and_the_instance() -> None:
    assert box_state(price=2.5).price_per_hour() == 2.5
    state = box_state(provider="vast", instance="42")
    assert state.has_instance() and state.price_per_hour() is None
    state.instance = SimpleNamespace(price_per_hour=0.45)
    assert state.price_per_hour() == 0.45
    assert not box_state(provider="manual", instance="42").has_instance()


# ---------------------------------------------------------------- the lines


def test_the_status_row_says_the_most_urgent_thing() -> None:
    state = box_state()
    assert status_line(state, 0).plain == ""
    state.last_line = ("pull failed: no weights", "error")
    assert status_line(state, 0).plain == "pull failed: no weights  (e: events)"
    state.down_since = NOW - 5
    assert status_line(state, 0).plain.startswith("⚠ no link to the box: last data 5s ago")
    state.activities.start("pull", "pulling the weights", NOW - 3)
    assert status_line(state, 1).plain == "⠙ pulling the weights 3s"


def test_the_tab_label_shows_health_link_and_alerts() -> None:
    state = box_state()
    assert tab_label(state).plain == "root@203.0.113.7"
    state.status, state.down_since, state.unseen = status("dead"), NOW, {"/p/a", "/p/b"}
    label = tab_label(state).plain
    assert label.startswith("root@203.0.113.7 ") and label.endswith(" ◌ ⚠2")


# ---------------------------------------------------------------- parts alone


def test_outcomes_tell_a_repeated_background_failure_once() -> None:
    fakes = Fakes(box_state())
    redraws: list[int] = []
    outcomes = Outcomes(fakes.ports(), redraw=lambda: redraws.append(1))
    outcomes.begin("refresh_safety", "checking")
    assert fakes.state.activities
    outcomes.end("refresh_safety")
    assert not fakes.state.activities and len(redraws) == 2
    failure = Failure("checking the weights failed: timed out", "error")
    assert outcomes.failed("refresh_safety", failure)
    assert not outcomes.failed("refresh_safety", failure)  # the same again: history only
    assert [kind for kind, _, _ in fakes.app.said] == ["notify", "record"]
    outcomes.succeeded("refresh_safety")
    assert outcomes.failed("refresh_safety", failure)  # news again after a success
    outcomes.done("pushed best.pt")
    assert fakes.state.last_line == ("pushed best.pt", "information")


def test_the_guard_badge_tells_an_alarm_once_and_asks_before_disarming() -> None:
    fakes = Fakes(box_state())
    badge = SimpleNamespace(text=None)
    badge.update = lambda text: setattr(badge, "text", text)
    guard = Guard(fakes.ports(), SimpleNamespace(guard_badge=badge))
    alarm = GuardState.from_dict({"state": "failed", "alarm": {"message": "gave up"}},
                                 alive=False)
    guard.show(alarm)
    guard.show(alarm)
    assert badge.text.plain.startswith(" ⚠ GUARD ALARM  gave up")
    assert fakes.app.said == [("alert", "GUARD ALARM: gave up", "error")]
    with pytest.raises(ActionRefused):  # no connection yet
        guard.ask()
    fakes.state.transport, fakes.state.run_dir = LocalTransport(), "/p/a"
    guard.show(GuardState.from_dict({"state": "armed", "when": "done", "then": "stop"},
                                    alive=True))
    guard.ask()
    dialog, answered = fakes.app.screens[-1]
    assert isinstance(dialog, ConfirmDialog) and "Disarm" in dialog.title_text
    answered(True)
    assert [(name, label) for name, _, _, label in fakes.workers] == \
        [("set_guard", "disarming the guard")]


def test_stopping_an_ended_run_is_refused_and_a_stop_is_labelled() -> None:
    fakes = Fakes(box_state())
    fakes.state.transport, fakes.state.run_dir = LocalTransport(), "/p/exp1"
    fakes.state.status = status("completed")
    stop = RunStop(fakes.ports())
    with pytest.raises(ActionRefused, match="nothing to stop: run exp1 completed"):
        stop.ask()
    stop.stop()
    assert [(name, group, label) for name, _, group, label in fakes.workers] == \
        [("stop_run", "stop", "stopping the run")]


def test_the_watchers_events_of_an_earlier_watch_are_dropped() -> None:
    fakes = Fakes(box_state())
    fed: list[Any] = []
    panes = SimpleNamespace(log=SimpleNamespace(feed=SimpleNamespace(feed=fed.append)))
    watching = Watching(fakes.ports(), panes, connect=lambda: None, gate=None,
                        title_changed=lambda: None, health_changed=lambda *a: None,
                        visible=lambda: True)
    gen = fakes.state.gen = 3
    metrics, log = MetricsEvent([], 0), LogEvent(b"line\n", 0)
    watching.deliver(gen, metrics)
    watching.deliver(gen, log)
    watching.deliver(gen - 1, metrics)  # an earlier watch's: not shown
    assert fakes.posted == [Watch(gen, metrics)] and fed == [log]


def test_a_host_key_question_waits_for_the_answer_and_is_asked_once() -> None:
    fakes = Fakes(box_state())
    link = Link(fakes.ports(), SimpleNamespace(), redraw=lambda: None)
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(
        link.ask_host_key("203.0.113.7", "ssh-ed25519", "SHA256:abc")))
    thread.start()
    for _ in range(200):
        if any(isinstance(m, HostKeyAsked) for m in fakes.posted):
            break
        thread.join(0.01)
    progress, asked = fakes.posted
    assert isinstance(progress, Progress) and "host key" in progress.line
    asked.answered(True)  # the dialog's answer, on the UI thread
    thread.join(5)
    assert answers == [True]
    assert link.ask_host_key("203.0.113.7", "ssh-ed25519", "SHA256:abc")
    assert len(fakes.posted) == 2  # trusted in this session: not asked again


def test_a_question_nobody_can_answer_is_a_no_once_the_app_ends() -> None:
    fakes = Fakes(box_state())
    link = Link(fakes.ports(), SimpleNamespace(), redraw=lambda: None)
    answers: list[bool] = []
    thread = threading.Thread(target=lambda: answers.append(
        link.ask_host_key("203.0.113.7", "ssh-ed25519", "SHA256:abc")))
    thread.start()
    link.shutdown()
    thread.join(5)
    assert answers == [False]


def test_older_log_lines_of_an_earlier_watch_are_not_shown() -> None:
    fakes = Fakes(box_state())
    shown: list[Any] = []
    pane = SimpleNamespace(more_above=True, all_lines=SimpleNamespace(first=4096),
                           show_older=lambda offset, data: shown.append((offset, data)))
    logs = LogPaging(fakes.ports(), SimpleNamespace(log=pane))
    fakes.state.transport, fakes.state.run_dir, fakes.state.gen = LocalTransport(), "/p/a", 2
    logs.wants_older()
    logs.wants_older()  # one fetch at a time
    assert [name for name, *_ in fakes.workers] == ["fetch_older"]
    chunk = SimpleNamespace(offset=0, data=b"older\n")
    logs.older(OlderLog(1, chunk))  # the previous watch's answer
    assert shown == []
    logs.wants_older()  # the answer freed the next fetch
    logs.older(OlderLog(2, chunk))
    assert shown == [(0, b"older\n")] and len(fakes.workers) == 2


# ---------------------------------------------------------------- what the parts declare


def test_every_result_a_part_posts_reaches_one_handler() -> None:
    """The view's one handler finds a part's method for every ``PartMessage`` of the
    app, and every key a part declares is a command of the view."""

    def subclasses(cls: type) -> set[type]:
        return {cls} | {sub for direct in cls.__subclasses__() for sub in subclasses(direct)}

    view = BoxView(BoxSpec("ssh", "root@203.0.113.7", project="/p"), autoconnect=False)
    posted = {cls for cls in subclasses(PartMessage) - {PartMessage}
              if cls.__module__.startswith("tui.")}
    assert len(posted) >= 29 and posted <= set(view.routes)
    assert set(view.commands) == {key.name for key in BoxView.KEYS}
    assert all(callable(command) for command in view.commands.values())


@dataclass
class Asked(PartMessage, bubble=False, namespace="box"):
    line: str


class Toy:
    """A part with one key and one result."""

    KEYS = (BoxKey("z", "toy", "go", "toy", "A toy action", 25, lambda _state: 1),)

    def __init__(self) -> None:
        self.got: list[str] = []

    @handles(Asked, take=("line",), action="toy")
    def said(self, line: str) -> None:
        self.got.append(line)

    def go(self) -> None:
        self.got.append("go")


def test_a_part_declares_the_results_it_handles_and_its_keys() -> None:
    toy = Toy()
    route = routes([toy])[Asked]
    route(Asked("found"))
    assert toy.got == ["found"] and route.action == "toy" and not route.news
    with pytest.raises(TypeError, match="Asked has two handlers"):
        routes([toy, Toy()])
    assert keys_of(Toy)[0].as_key() == ("z", "box('toy')", "toy", "A toy action")
