"""The weights of one box: the badge that says whether they are safe off the box (judged
again when the follower streams a change of the weight files or of ``hub.json``, the
only time it asks the box, and when this laptop's pull ledger changes: a pull made with
the TUI or ``gpurent pull``), pushing best.pt to the Hub from the box and pulling the
weights to this laptop. Once the box's instance is destroyed the badge speaks of the
copies only: the files the box last listed, judged again without it."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from remote.billing import resolve_safety, run_safety
from remote.watch import HubEvent, WeightsEvent
from remote.weights import (
    PUSHED_FILES,
    Safety,
    box_run_dir,
    default_pull_dir,
    dest_for,
    judged_again,
    laptop_token,
    ledger_stamp,
    pull_weights,
    push_from_box,
    require_token,
)
from trainer.runfiles import WEIGHTS_DIR
from tui.box.parts import BoxKey, PartMessage, handles
from tui.box.ports import Done, Panes, Ports, SafetyStale
from tui.box.state import BoxState
from tui.demo import demo_root
from tui.dialogs.pull import PullDialog
from tui.dialogs.push import PushDialog
from tui.fmt import advance_ages


@dataclass
class SafetyJudged(PartMessage, bubble=False, namespace="box"):
    """Whether the weights are safe off the box, as just judged."""

    safety: Any


@dataclass
class Transferred(PartMessage, bubble=False, namespace="box"):
    """``done`` of ``total`` bytes of action ``name``'s transfer have arrived."""

    name: str
    done: int
    total: int


def safety_source(state: BoxState, registry: bool = True) -> Callable[[], Any]:
    """``remote.weights.safety.weights_safety`` for the watched run, its project (the
    box's project when no run is watched and it exists) and (``registry``) the box's
    registry, as a callable for the gate: blocking, asked anew at each call."""
    transport, run_dir, project = state.need_transport(), state.run_dir, state.project

    def ask() -> Any:
        has_project = run_dir is None and transport.stat(project) is not None
        return run_safety(transport, run_dir, (project,) if has_project else (),
                          registry=registry)()

    return ask


#: How often a Modal run's weights are looked for in its Volume again (seconds).
MODAL_SAFETY_EVERY = 10.0


def weights_rank(state: BoxState) -> int | None:
    """The footer rank of pull and push: first while the watched run's weights are not
    safe (``None``: no run)."""
    if state.run_dir is None:
        return None
    return 3 if state.safety is not None and not state.safety.safe else 6


class Weights:
    """The weights badge, push and pull of one box."""

    KEYS = (BoxKey("w", "pull", "pull", "pull", "Pull the weights to this laptop "
                   "(sha256-verified)", 40, weights_rank, quiet=False),
            BoxKey("u", "push", "ask_push", "push", "Push the run's weights to the Hugging Face "
                   "Hub from the box", 50, weights_rank, quiet=False))

    def __init__(self, ports: Ports, panes: Panes) -> None:
        self.ports = ports
        self.panes = panes
        #: The pull ledger as last seen (``remote.weights.pull.ledger_stamp``).
        self._ledger = ledger_stamp()

    # ------------------------------------------------------------------ the badge

    @handles(SafetyStale, take=())
    def refresh(self) -> None:
        """Ask whether the weights of every run the box knows are safe off it (Hub or
        laptop) and show it on the badge; once the instance is destroyed, judge the
        files it last listed again, without it."""
        gone = self.ports.state.instance_destroyed()
        self.ports.work("refresh_safety", self._judge_gone if gone else self._judge,
                        group="safety")

    def tick(self) -> None:
        """Once a second: judge the weights again when the pull ledger changed since
        last seen (a pull made here or with ``gpurent pull``); draw the badge."""
        stamp = ledger_stamp()
        state = self.ports.state
        if stamp != self._ledger:
            self._ledger = stamp
            self.refresh()
        elif state.spec.kind == "modal" and state.transport is not None and (
                state.safety_at is None or state.clock() - state.safety_at >= MODAL_SAFETY_EVERY):
            self.refresh()  # a Volume sends no file events: what it holds is asked again
        self.draw()

    def _judge(self) -> None:
        """The badge of this machine (``--local``, ``--demo``) speaks of its project's
        runs only: the registry there lists every run this laptop ever launched."""
        state = self.ports.state
        if state.transport is None or state.down_since is not None:
            return
        if state.spec.kind == "modal":  # safe = in the app's runs Volume, or on the Hub
            from remote.serverless import volume_safety

            run_dir = state.run_dir or state.run_path(state.spec.run or "")
            self.ports.post(SafetyJudged(volume_safety(state.transport, run_dir)))
            return
        registry = state.spec.kind != "local"
        self.ports.post(SafetyJudged(resolve_safety(safety_source(state, registry))))

    def _judge_gone(self) -> None:
        """What this laptop and the Hub hold now of the files the destroyed box last
        listed (nothing to judge when it never listed them)."""
        last = self.ports.state.safety
        if isinstance(last, Safety):
            self.ports.post(SafetyJudged(judged_again(last)))

    @handles(SafetyJudged, take=("safety",), action="refresh_safety", news=True)
    def show(self, safety: Any) -> None:
        """Show a verdict on the weights."""
        state = self.ports.state
        state.safety, state.safety_at = safety, state.clock()
        self.draw()

    def draw(self) -> None:
        """The weights badge, its reason's ages moved on to now (once the instance is
        destroyed: what became of its weights)."""
        state = self.ports.state
        s = state.safety
        if state.instance_destroyed():
            self.panes.weights_badge.show_destroyed(s if isinstance(s, Safety) else None)
            return
        if s is None or state.safety_at is None:
            return
        reason = advance_ages(s.reason, state.clock() - state.safety_at)
        known = bool(getattr(s, "runs", True))  # no run to check: unknown, not unsafe
        self.panes.weights_badge.show(s.safe if known else None, getattr(s, "where", None),
                                      getattr(s, "epoch", None), reason,
                                      nothing=bool(getattr(s, "nothing", False)),
                                      unsafe=getattr(s, "unsafe_names", ""))

    def files_changed(self, ev: WeightsEvent | HubEvent) -> None:
        """The run's weight files or its Hub ledger changed on the box: judge the
        weights again."""
        kind, value = ("weights", ev.files) if isinstance(ev, WeightsEvent) else \
            ("hub", ev.ledger)
        seen = self.ports.state.weight_files
        if kind not in seen or seen[kind] != value:
            seen[kind] = value
            self.refresh()

    # ------------------------------------------------------------------ push, pull

    def ask_push(self) -> None:
        """Ask for the Hub repo (naming the run and the files pushed), then push from
        the box."""
        state = self.ports.state
        state.need_transport()
        run_dir = state.need_run()
        hub = state.status.read.get("hub") if state.status is not None else None
        repo = (hub.get("repo") if isinstance(hub, dict) else None) or state.last_hub_repo
        streamed = state.weight_files.get("weights")
        present = None if streamed is None else {f.name: f.size for f in streamed}
        dialog = PushDialog(str(repo or ""), laptop_token() is not None, state.run_name,
                            run_dir, PUSHED_FILES, present)
        self.ports.ask(dialog, self._push_answered)

    def _push_answered(self, answer: tuple[str, bool] | None) -> None:
        if answer is not None:
            repo, public = answer
            self.ports.state.last_hub_repo = repo
            self.ports.work("push", lambda: self._push(repo, public), group="push",
                            label=f"pushing best.pt to {repo}")

    def _push(self, repo: str, public: bool) -> None:
        """Push best.pt from the box to ``repo`` (the box uploads it)."""
        state = self.ports.state
        transport, run_dir = state.need_transport(), state.need_run()
        result = push_from_box(transport, run_dir, repo, require_token(), public=public)
        commit = result.get("commit") if isinstance(result, dict) else None
        self.ports.post(Done(f"pushed best.pt to {repo}"
                             + (f" (commit {str(commit)[:10]})" if commit else "")))
        self.ports.post(SafetyStale())

    def pull(self) -> None:
        """Ask where to (the folder offered: the last one, else ``default_pull_dir``'s,
        the demo's beside its runs), then download the weights to this laptop. The
        dialog names the folder the files land in once the run's absolute path on the
        box is found (it names that folder, as for ``gpurent pull``)."""
        state = self.ports.state
        transport, run_dir = state.need_transport(), state.need_run()
        files = [n for n in ("best.pt", "last.pt") if n in self.present()] or \
            ["best.pt", "last.pt"]

        def where(folder: str, abs_run: str) -> str:
            return str(dest_for(folder, transport.label, abs_run) / WEIGHTS_DIR) + os.sep

        def answered(folder: str | None) -> None:
            if folder is not None:
                state.last_pull_dir = folder
                self.ports.work("pull", lambda: self._pull(folder, run_dir), group="pull",
                                label="pulling the weights")

        offered = state.last_pull_dir or str(
            default_pull_dir(demo_root() if state.spec.demo else None))
        dialog = PullDialog(state.run_name, " and ".join(files), offered, where)
        self.ports.ask(dialog, answered)
        self.ports.work("find_run", lambda: dialog.post_message(PullDialog.Found(
            box_run_dir(transport, run_dir))), group="find-run")

    def present(self) -> dict[str, int]:
        """The watched run's weight files as last streamed (name -> bytes)."""
        streamed = self.ports.state.weight_files.get("weights") or ()
        return {f.name: f.size for f in streamed}

    def _pull(self, folder: str, run_dir: str) -> None:
        """Pull best.pt and last.pt of ``run_dir`` (verified by sha256) into
        FOLDER/<host>/<the run's absolute path on the box>/weights/, with progress in the
        status row."""
        state, post = self.ports.state, self.ports.post
        transport = state.need_transport()
        dest = os.path.expanduser(folder)

        def progress(_name: str, done: int, total: int) -> None:
            post(Transferred("pull", done, total))

        started = time.monotonic()
        pulled = pull_weights(transport, run_dir, dest, progress=progress)
        seconds = max(time.monotonic() - started, 1e-3)
        size = sum(p.size for p in pulled)
        names = ", ".join(f"{p.name} ({p.size / 1e6:.1f} MB)" for p in pulled)
        where = os.path.dirname(pulled[-1].local_path) if pulled else dest
        post(Done(f"pulled {names} into {where} in {seconds:.1f} s "
                  f"({size / 1e6 / seconds:.1f} MB/s), sha256 verified"))

    @handles(Transferred)
    def transferred(self, message: Transferred) -> None:
        """Transfer progress, for the status row."""
        state = self.ports.state
        state.activities.progress(message.name, message.done, message.total, state.clock())
