"""The fleet's ``m``: a run taken away with its instance goes on on another box
(``remote.billing.move_run``, the same as ``gpurent resume ORG/REPO:NAME --on TARGET``).
The user chooses which of the instance's runs (``tui.dialogs.move``), each step is said as
it happens, and once the run trains again its box opens as a tab on it."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from textual import work
from textual.message import Message
from textual.widgets import Static

from tui.dialogs.move import MoveAnswer, MoveChoice, MoveDialog
from tui.fmt import safe
from tui.spec import BoxSpec


class Moved(Message):
    """A step of a resume on another box (``done``: the last one, or its failure; ``spec``:
    the tab to open on the resumed run)."""

    def __init__(self, text: str, done: bool = False, failed: bool = False,
                 spec: BoxSpec | None = None) -> None:
        super().__init__()
        self.text = text
        self.done = done
        self.failed = failed
        self.spec = spec


class MoveKey:
    """The fleet screen's ``m`` (mixed into ``FleetScreen``: it uses its ``fleet``,
    ``selected``, ``connector_for``, ``open_box`` and ``action_refresh``)."""

    fleet: Any

    def action_move(self) -> None:
        """m: resume a run of a row taken away on another box (asks which and where)."""
        row = self.selected()  # type: ignore[attr-defined]
        taken = None if row is None else row.interrupted
        runs = [MoveChoice(r.run.repo, r.run.name, r.run.project, r.safe_words())
                for r in (taken.runs if taken else ()) if r.run.repo]
        if row is None or not runs:
            self.app.notify(  # type: ignore[attr-defined]
                "m resumes a run taken away with its instance (a row that says taken "
                "away, launched from here with hub=)", severity="warning")
            return
        self.app.push_screen(  # type: ignore[attr-defined]
            MoveDialog(row.target, runs),
            lambda answer: None if answer is None else self.move_row(row, answer))

    @work(thread=True, group="fleet-move", exit_on_error=False)
    def move_row(self, row: Any, answer: MoveAnswer) -> None:
        """Resume the answer's run on its box (``remote.billing.move_run``), reached as
        the listing reaches boxes; each step becomes a ``Moved`` message."""
        from remote.resume import Moving, move_run
        from remote.weights import require_token

        post = self.post_message  # type: ignore[attr-defined]
        name, target = answer.run.name, answer.target
        try:
            spec, instance, new_rate = self.mover_for(target)
            moving = Moving(answer.run.repo, name, answer.project, answer.data,
                            old_rate=getattr(row.instance, "price_per_hour", None),
                            new_rate=new_rate)
            resumed = move_run(spec.connector, moving, require_token(), target=target,
                               instance=instance,
                               say=lambda step: post(Moved(step.line())))
            resumed.transport.close()
        except Exception as exc:  # noqa: BLE001 - the outcome is a line on screen
            post(Moved(f"resume of {name} on {target} failed: {exc}", done=True,
                       failed=True))
            return
        post(Moved(f"{name} resumed on {target}: {resumed.run_dir}", done=True,
                   spec=replace(spec, project=answer.project, run=name, connector=None)))

    def mover_for(self, target: str) -> tuple[BoxSpec, tuple[str, str] | None, float | None]:
        """For a resume on ``target`` (a box the user names, of any listed account of its
        provider): its tab's spec (with a connector to it), its ``(provider, id)`` and
        its price."""
        from remote.billing import parse_instance_target
        from remote.resume import new_box_rate

        named = parse_instance_target(target)
        clients = getattr(self.fleet, "clients", {}) or {}
        client = None if named is None else \
            next((c for c in clients.values() if c.name == named.provider), None)
        price = new_box_rate(target, client)
        instance = None if named is None else (named.provider, named.instance)
        options = getattr(self.fleet, "options", None)
        spec = BoxSpec("ssh", target, provider=None if named is None else named.provider,
                       instance=None if named is None else named.instance, price=price,
                       provider_url=getattr(client, "base_url", None), client=client,
                       accept_new=bool(getattr(options, "accept_new", False)),
                       ssh_options=tuple((getattr(options, "ssh_options", {}) or {}).items()),
                       connector=self.connector_for(target, client))  # type: ignore[attr-defined]
        return spec, instance, price

    def on_moved(self, message: Moved) -> None:
        """Say each step (a notification, kept in the events history); at the end open
        the resumed run's tab (or, failed, list again)."""
        self.query_one("#fleet-status", Static).update(  # type: ignore[attr-defined]
            safe(message.text, 300, "bold red" if message.failed else ""))
        self.app.notify(message.text, title="resume elsewhere",  # type: ignore[attr-defined]
                        severity="error" if message.failed else "information",
                        timeout=15 if message.done else 6)
        if message.spec is not None:
            self.open_box(message.spec, False)  # type: ignore[attr-defined]
