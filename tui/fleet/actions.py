"""What the fleet's keys do to a row's instance, each through the same ``remote``
function as the CLI: ``s`` stops it (``run_teardown``; asked first; an instance already
stopped is said so, not asked), ``D`` destroys it (the destroy check: a box the listing
reached is checked anew; one it did not reach opens the dialog at once behind a
"weights unknown" check, the typed id and an explicit tick), ``L`` gives or clears its
lease (``gpurent lease``; a lease is never cleared by one Enter). A row that is an
account's failure says why each key does nothing."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual import work

from trainer.text import one_line
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.destroy import DestroyDialog
from tui.dialogs.lease import LeaseDialog
from tui.fmt import safe


class FleetActions:
    """The row actions of ``tui.screens.fleet.FleetScreen`` (a mixin: ``self`` is the
    screen, whose messages and ``connector_for`` these use)."""

    fleet: Any
    app: Any

    def under_cursor(self) -> Any:
        """The row under the cursor, an account's failure too (the screen's)."""
        raise NotImplementedError

    def row_to_act_on(self, what: str) -> Any:
        """The row under the cursor when it is an instance; an account's failure is
        said (why ``what`` cannot act on it), not ignored."""
        row = self.under_cursor()
        if row is None or self.fleet is None:
            return None
        if row.instance is None:
            self.app.notify(f"{row.account}: the account did not answer "
                            f"({one_line(row.error, 200)}): its instances are not listed, "
                            f"so there is nothing to {what}; r lists again",
                            title="fleet", severity="warning", timeout=10)
            return None
        return row

    # ------------------------------------------------------------------ stop

    def action_stop(self) -> None:
        """s: stop the selected instance, after saying what keeps billing."""
        row = self.row_to_act_on("stop")
        if row is None:
            return
        from remote.fleet import nothing_to_stop

        already = nothing_to_stop(row, " (D destroys it)")
        if already:
            self.app.notify(already, title="fleet", timeout=8)
            return
        client = self.fleet.clients.get(row.account)
        if client is None or not client.can_stop:
            self.app.notify(f"{row.target}: this provider cannot stop an instance; D "
                            "destroys it through the destroy check", severity="warning")
            return
        from remote.billing import warning_for

        body = Text()
        body.append_text(safe(row.target, 60, "bold"))
        body.append(f": {warning_for('stop', client, row.instance)}")
        self.app.push_screen(ConfirmDialog("Stop the instance?", body, "Stop it"),
                             lambda yes: self.stop_row(row, client) if yes else None)

    @work(thread=True, group="fleet-stop", exit_on_error=False)
    def stop_row(self, row: Any, client: Any) -> None:
        """Stop through the destroy check (``run_teardown``) and confirm it by polling."""
        from remote.billing import run_teardown

        try:
            outcome = run_teardown(client, row.instance.id, "stop")
            text = outcome.message
        except Exception as exc:  # noqa: BLE001 - the outcome is a line on screen
            text = f"{row.target}: the stop failed: {exc}"
        self.post_message(self.Stopped(text))  # type: ignore[attr-defined]

    def on_fleet_screen_stopped(self, message: Any) -> None:
        """Say how the stop ended and list again."""
        self.app.notify(message.text, title="fleet", timeout=10)
        self.action_refresh()  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ destroy

    def action_destroy(self) -> None:
        """D: the destroy dialog, here. A box the listing reached has its weights checked
        anew first; any other opens at once behind the "weights unknown" check."""
        row = self.row_to_act_on("destroy")
        if row is None:
            return
        if row.instance.state in ("destroyed", "destroying"):
            self.app.notify(f"{row.target} is already {row.instance.state}", title="fleet")
            return
        client = self.fleet.clients.get(row.account)
        if row.box is None or client is None:
            why = row.unreachable or (f"it is {row.instance.state}" if row.instance.state
                                      != "running" else "the listing did not reach it")
            self.ask_destroy(row, None, f"the box was not reached: {why}")
            return
        self.say_status(f"{row.target}: checking its weights on the box before the "  # type: ignore[attr-defined]
                        "destroy question…")
        self.check_weights(row, client)

    @work(thread=True, group="fleet-destroy", exit_on_error=False)
    def check_weights(self, row: Any, client: Any) -> None:
        """The destroy check's verdict for the box, asked now (``run_safety`` of every
        run its registry knows); a box that cannot be reached now is unknown."""
        from remote.billing import resolve_safety, run_safety

        try:
            transport = self.connector_for(row.target, client).open(  # type: ignore[attr-defined]
                early=False, gate=True)
        except Exception as exc:  # noqa: BLE001 - then the weights are unknown, said
            self.post_message(self.DestroyAsked(  # type: ignore[attr-defined]
                row, None, f"the box was not reached now ({one_line(exc, 200)})"))
            return
        try:
            safety = resolve_safety(run_safety(transport, None))
        finally:
            transport.close()
        self.post_message(self.DestroyAsked(row, safety, ""))  # type: ignore[attr-defined]

    def on_fleet_screen_destroy_asked(self, message: Any) -> None:
        """The weights were checked (or could not be): ask."""
        self.show_status()  # type: ignore[attr-defined]
        self.ask_destroy(message.row, message.safety, message.unknown)

    def ask_destroy(self, row: Any, safety: Any, unknown: str) -> None:
        """The destroy dialog for ``row``: with ``safety``'s verdict, or (``unknown``:
        why) behind the "weights unknown" check. Cancel stays in the fleet."""
        from remote.billing import destroy_question, warning_for

        client = self.fleet.clients.get(row.account)
        detail = Text()
        detail.append_text(safe(row.target, 60, "bold"))
        detail.append(f" ({row.account}): ")
        detail.append_text(safe(warning_for("destroy", client, row.instance) if client
                                else "its account's client is missing", 400))
        question = destroy_question(safety, unknown)
        dialog = DestroyDialog(str(row.instance.id), question.safe, detail, question.unsafe,
                               unknown=question.unknown)
        dialog.about = row.target
        self.app.push_screen(dialog, lambda answer: None if not answer else
                             self.destroy_row(row, client, question, *answer))

    @work(thread=True, group="fleet-destroy", exit_on_error=False)
    def destroy_row(self, row: Any, client: Any, question: Any,
                    override: bool, typed_id: str) -> None:
        """Destroy through the destroy check (``run_teardown``): the weights of a reached box are
        checked again at this moment; unknown ones pass only with the override and the
        typed id."""
        from remote.billing import run_safety, run_teardown

        transport = checked = None
        try:
            if not question.unknown:
                transport = self.connector_for(row.target, client).open(  # type: ignore[attr-defined]
                    early=False, gate=True)
                checked = run_safety(transport, None)
            outcome = run_teardown(client, row.instance.id, "destroy",
                                   safety=question.source(checked),
                                   override=override, typed_id=typed_id, interval=1.0)
            text = outcome.message or f"{row.target}: {outcome.state}"
        except Exception as exc:  # noqa: BLE001 - the outcome is a line on screen
            text = f"{row.target}: the destroy failed: {one_line(exc, 300)}"
        finally:
            if transport is not None:
                transport.close()
        self.post_message(self.Stopped(text))  # type: ignore[attr-defined]

    # ------------------------------------------------------------------ lease

    def action_lease(self) -> None:
        """L: give the selected instance a lease, change it, or clear it (asked)."""
        row = self.row_to_act_on("lease")
        if row is None:
            return
        client = self.fleet.clients.get(row.account)
        dialog = LeaseDialog(row.target, row.lease, can_stop=client is None or client.can_stop)
        self.app.push_screen(dialog, lambda answer: None if answer is None else
                             self.lease_row(row, *answer))

    @work(thread=True, group="fleet-lease", exit_on_error=False)
    def lease_row(self, row: Any, seconds: float | None, then: str) -> None:
        """Set or clear the lease on this laptop (the watchdog's), then on the box when
        the listing reached it (its guard's), as ``gpurent lease`` does."""
        from remote.fleet import change_lease

        # Located through the row's own account (another account of the same provider
        # does not know the instance).
        box = None if row.box is None else lambda: self.connector_for(  # type: ignore[attr-defined]
            row.target, self.fleet.clients.get(row.account)).open(early=False, gate=True)
        try:
            lease, told = change_lease(row.target, seconds, then, box)
        except (OSError, ValueError) as exc:
            self.post_message(self.Leased(  # type: ignore[attr-defined]
                f"{row.target}: the lease was not set: {exc}", failed=True))
            return
        if box is None:
            told = "the box was not reached by the listing"
        said = f"{row.target}: " + ("no lease" if lease is None else
                                     f"lease {lease.deadline_words()}")
        said += "; written on the box" if not told else \
            f"; kept here for the watchdog (the box was not told: {one_line(told, 200)})"
        self.post_message(self.Leased(said))  # type: ignore[attr-defined]

    def on_fleet_screen_leased(self, message: Any) -> None:
        """Say how it went and list again."""
        self.app.notify(message.text, title="lease",
                        severity="error" if message.failed else "information", timeout=10)
        if not message.failed:
            self.action_refresh()  # type: ignore[attr-defined]
