"""The fleet: every instance of every configured account in one table, with its state,
price, what it spent and the idle and waste words (``remote.billing.list_fleet``, the
same listing as ``gpurent instances``), with each reached box's weights verdict (the
weights gate's); the details under the table add its GPUs now and over the last hour
(the box's GPU ring). Enter opens the instance as a box tab; ``s`` stops it (asked
first; the disk keeps billing, as the dialog says); ``D`` opens its box tab and, once
the box is connected, the destroy dialog there: the weights gate's verdict and the
typed id; ``L`` gives it a lease (``gpurent lease``: kept here for the watchdog, written
on the box for its guard when the box answers); ``m`` on a row taken away by its
provider resumes its run on another box (``move_run``, the same as ``gpurent resume
ORG/REPO:NAME --on TARGET``), each step said as it happens."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from trainer.text import format_duration, money, one_line, rate
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.lease import LeaseDialog
from tui.dialogs.move import MoveAnswer, MoveDialog
from tui.fmt import safe

#: The table's columns.
#: The table's columns, the most telling first (an 80-column terminal shows the first
#: few; the details under the table say everything about the highlighted row).
COLUMNS = ("instance", "state", "$/h now", "spent", "weights", "notes", "GPU", "account")
#: How each weights verdict is drawn (``remote.billing.boxweights``), and in short.
WEIGHTS_STYLE = {"safe": "green", "unsafe": "bold red", "unknown": "yellow"}
WEIGHTS_SHORT = {"safe": "safe", "unsafe": "NOT safe", "unknown": "?"}
#: Cells are cut at this many characters (the details hold the whole text).
CELL = 28
#: The screen's keys, for its own key line and the help screen.
FLEET_KEYS = (("enter", "open it as a box tab"), ("s", "stop the instance (asks first)"),
              ("D", "destroy: its tab, then the weights gate's dialog"),
              ("L", "lease: a deadline for its billing"),
              ("m", "resume a taken-away run on another box"),
              ("r", "list again"), ("escape", "back to the boxes"))
#: Where else to start, said when there is no fleet to list.
OTHER_STARTS = ("Watch one box: gpurent-tui HOST (an address, an ~/.ssh/config alias or "
                "vast:ID); a local demo run: gpurent-tui --demo; runs here: "
                "gpurent-tui --local DIR.")


class FleetScreen(Screen[None]):
    """The table; ``lister()`` returns a ``remote.billing.Fleet`` (it blocks: it runs in
    a worker thread); ``open_box(row)`` opens a row's instance as a box tab."""

    DEFAULT_CSS = """
    FleetScreen #fleet { height: auto; max-height: 1fr; }
    FleetScreen #fleet-detail { height: auto; padding: 0 1; margin-top: 1;
                                border-top: solid $primary; }
    FleetScreen #fleet-keys { padding: 0 1; }
    """

    BINDINGS = [Binding("enter", "open", "open", show=False),
                Binding("s", "stop", "stop", show=False),
                Binding("D", "destroy", "destroy", show=False),
                Binding("L", "lease", "lease", show=False),
                Binding("m", "move", "resume elsewhere", show=False),
                Binding("r", "refresh", "list again", show=False),
                Binding("escape,F", "close", "back", show=False)]

    class Listed(Message):
        """The listing finished (``fleet``) or failed (``error``)."""

        def __init__(self, fleet: Any = None, error: str = "", setup: bool = False) -> None:
            super().__init__()
            self.fleet = fleet
            self.error = error
            #: The error is a missing setting, not a failure (no account configured).
            self.setup = setup

    class Stopped(Message):
        """A stop from the list ended: its one-line outcome."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class Moved(Message):
        """A step of a resume on another box (``done``: the last one, or its failure)."""

        def __init__(self, text: str, done: bool = False, failed: bool = False) -> None:
            super().__init__()
            self.text = text
            self.done = done
            self.failed = failed

    class Leased(Message):
        """A lease set or cleared from the list: its one-line outcome."""

        def __init__(self, text: str, failed: bool = False) -> None:
            super().__init__()
            self.text = text
            self.failed = failed

    def __init__(self, lister: Callable[[], Any], open_box: Callable[[Any, bool], None]) -> None:
        super().__init__()
        self.lister = lister
        self.open_box = open_box
        self.fleet: Any = None

    def compose(self) -> ComposeResult:
        """The status line, the table, the keys."""
        yield Static("asking the providers…", id="fleet-status")
        table: DataTable[Text] = DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        table.add_columns(*COLUMNS)
        yield table
        yield Static(id="fleet-detail")
        yield Static(id="fleet-modal")
        yield Static(Text("  ".join(f"{k} {what}" for k, what in FLEET_KEYS), style="dim"),
                     id="fleet-keys")

    def on_mount(self) -> None:
        """List at once."""
        self.query_one(DataTable).focus()
        self.list_fleet()
        self.list_modal()

    @work(thread=True, exclusive=True, group="fleet-modal", exit_on_error=False)
    def list_modal(self) -> None:
        """The running Modal apps launched from here, with their timeout left and
        dollars (in a thread; nothing when none was launched)."""
        from remote.serverless import fleet_rows, modal_records

        if not modal_records():
            return
        try:
            rows = fleet_rows()
        except Exception as exc:  # noqa: BLE001 - any failure is one line on screen
            text = safe(f"Modal: cannot list the apps: {exc}", 300, "yellow")
        else:
            text = Text("Modal apps launched from here:" if rows else
                        "Modal: no app launched from here runs now", style="bold")
            for row in rows:
                text.append("\n  ")
                text.append_text(safe(f"{row['target']}  {row['words']}; {row['money']}",
                                      300))
        self.app.call_from_thread(self.query_one("#fleet-modal", Static).update, text)

    @work(thread=True, exclusive=True, group="fleet", exit_on_error=False)
    def list_fleet(self) -> None:
        """Ask (in a thread) and post the answer."""
        try:
            fleet = self.lister()
        except Exception as exc:  # noqa: BLE001 - any failure is one line on screen
            from remote.billing import NoAccounts

            self.post_message(self.Listed(error=str(exc), setup=isinstance(exc, NoAccounts)))
            return
        self.post_message(self.Listed(fleet))

    def on_fleet_screen_listed(self, message: Listed) -> None:
        """Fill the table."""
        status = self.query_one("#fleet-status", Static)
        if message.setup:
            status.update(Text.assemble(safe(f"Nothing to list: {message.error}.", 400,
                                             "yellow"), "\n", OTHER_STARTS))
            return
        if message.error:
            status.update(safe(f"cannot list: {message.error}", 300, "bold red"))
            return
        self.fleet = fleet = message.fleet
        table = self.query_one(DataTable)
        table.clear()
        for n, row in enumerate(fleet.rows):
            table.add_row(*self.cells(row, fleet.now), key=str(n))
        self.show_detail()
        status.update(Text(f"{fleet.billing_words()}; listed in {fleet.seconds:.1f} s"))

    @staticmethod
    def state_words(row: Any) -> str:
        """The state in our words, the provider's own beside them when they differ."""
        inst = row.instance
        state = inst.state if inst.raw_state in ("", inst.state) else \
            f"{inst.state} ({inst.raw_state})"
        return f"taken away: {state}" if row.interrupted is not None else state

    @staticmethod
    def notes(row: Any, now: float) -> list[str]:
        """The row's words about money and waste, less the weights verdict (its own
        column)."""
        verdict = row.weights
        return [w for w in row.words(now) if verdict is None or w != verdict.words()]

    @classmethod
    def cells(cls, row: Any, now: float) -> list[Text]:
        """One row's cells, short, every provider- or box-given text inert
        (``tui.fmt.safe``)."""
        inst = row.instance
        if inst is None:
            return [Text("-"), safe("account failed", CELL, "red"), Text(""), Text(""),
                    Text(""), safe(row.error, CELL, "red"), Text(""), safe(row.account, CELL)]
        spent = row.spent(now)
        verdict = row.weights
        style = "bold yellow" if row.idle is not None or row.unreachable else ""
        state_style = "bold red" if row.interrupted is not None else ""
        return [safe(row.target, CELL), safe(cls.state_words(row), CELL, state_style),
                Text(rate(inst.billing_per_hour)),
                Text("" if spent is None else money(spent)),
                Text("") if verdict is None else
                Text(WEIGHTS_SHORT.get(verdict.state, "?"),
                     style=WEIGHTS_STYLE.get(verdict.state, "")),
                safe("; ".join(cls.notes(row, now)), 2 * CELL, style),
                safe(inst.gpu or "?", CELL), safe(row.account, CELL)]

    @classmethod
    def detail(cls, row: Any, now: float) -> Text:
        """Everything about one row, a line each (inert text)."""
        if row.instance is None:
            return safe(f"{row.account}: account failed: {row.error}", 600, "red")
        inst = row.instance
        head = [f"{row.target} ({row.account})", cls.state_words(row), inst.gpu or "GPU ?",
                f"{rate(inst.price_per_hour)} running, {rate(inst.storage_per_hour)} "
                "stopped"]
        up, spent = row.uptime(now), row.spent(now)
        if up is not None:
            head.append(f"up {format_duration(up)}"
                        + (f", spent {money(spent)}" if spent is not None else ""))
        if inst.ssh_host:
            head.append(f"ssh {inst.ssh_host}:{inst.ssh_port}")
        out = Text()
        out.append_text(safe(" · ".join(head), 400, "bold"))
        gpu = [] if row.box is None else row.box.gpu_words()
        for words in (["; ".join(gpu)] if gpu else []) + \
                ([] if row.weights is None else [row.weights.words()]) + \
                cls.notes(row, now):
            out.append("\n")
            out.append_text(safe(words, 600))
        return out

    def show_detail(self) -> None:
        """The details of the highlighted row under the table."""
        rows = self.fleet.rows if self.fleet is not None else []
        index = self.query_one(DataTable).cursor_row
        row = rows[index] if 0 <= index < len(rows) else None
        self.query_one("#fleet-detail", Static).update(
            Text("") if row is None else self.detail(row, self.fleet.now))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        """The cursor moved: the details follow it."""
        self.show_detail()

    def selected(self) -> Any:
        """The row under the cursor (``None`` for none, or an account's failure)."""
        if self.fleet is None or not self.fleet.rows:
            return None
        index = self.query_one(DataTable).cursor_row
        row = self.fleet.rows[index] if 0 <= index < len(self.fleet.rows) else None
        return row if row is not None and row.instance is not None else None

    def action_open(self) -> None:
        """Enter: the instance as a box tab."""
        row = self.selected()
        if row is not None:
            self.open_box(row, False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on the table (which takes the key itself): open the row."""
        event.stop()
        self.action_open()

    def action_destroy(self) -> None:
        """D: open the tab and the destroy dialog on it (the weights gate needs the box
        connected: the dialog opens once it is)."""
        row = self.selected()
        if row is not None:
            self.open_box(row, True)

    def action_refresh(self) -> None:
        """r: list again."""
        self.query_one("#fleet-status", Static).update("asking the providers…")
        self.list_fleet()

    def action_close(self) -> None:
        """Escape: back to the boxes (with none open, the app asks about quitting)."""
        if len(self.app.screen_stack) > 2 or getattr(self.app, "specs", None):
            self.dismiss(None)
        else:
            self.app.run_action("quit")

    def action_stop(self) -> None:
        """s: stop the selected instance, after saying what keeps billing."""
        row = self.selected()
        if row is None or self.fleet is None:
            return
        client = self.fleet.clients.get(row.account)
        if client is None or not client.can_stop:
            self.app.notify(f"{row.target}: this provider cannot stop an instance; D "
                            "destroys it through the weights gate", severity="warning")
            return
        from remote.billing import warning_for

        body = Text()
        body.append_text(safe(row.target, 60, "bold"))
        body.append(f": {warning_for('stop', client, row.instance)}")
        self.app.push_screen(ConfirmDialog("Stop the instance?", body, "Stop it"),
                             lambda yes: self.stop_row(row, client) if yes else None)

    @work(thread=True, group="fleet-stop", exit_on_error=False)
    def stop_row(self, row: Any, client: Any) -> None:
        """Stop through the gate (``run_teardown``) and confirm it by polling."""
        from remote.billing import run_teardown

        try:
            outcome = run_teardown(client, row.instance.id, "stop")
            text = outcome.message
        except Exception as exc:  # noqa: BLE001 - the outcome is a line on screen
            text = f"{row.target}: the stop failed: {exc}"
        self.post_message(self.Stopped(text))

    def action_lease(self) -> None:
        """L: give the selected instance a lease (or clear the one it has)."""
        row = self.selected()
        if row is None or self.fleet is None:
            return
        client = self.fleet.clients.get(row.account)
        now = "no lease" if row.lease is None else \
            next((w for w in row.words(self.fleet.now) if w.startswith("lease")), "a lease")
        dialog = LeaseDialog(row.target, now, can_stop=client is None or client.can_stop)
        self.app.push_screen(dialog, lambda answer: None if answer is None else
                             self.lease_row(row, *answer))

    @work(thread=True, group="fleet-lease", exit_on_error=False)
    def lease_row(self, row: Any, seconds: float | None, then: str) -> None:
        """Set or clear the lease on this laptop (the watchdog's), then on the box when
        the listing reached it (its guard's), as ``gpurent lease`` does."""
        from remote.billing import clear_lease, set_lease, write_on_box

        try:
            lease = None
            if seconds is None:
                clear_lease(row.target)
            else:
                lease = set_lease(row.target, seconds, then)
        except (OSError, ValueError) as exc:
            self.post_message(self.Leased(f"{row.target}: the lease was not set: {exc}",
                                          failed=True))
            return
        said = f"{row.target}: " + ("no lease" if lease is None else
                                     f"lease until {lease.until_at}, then {then}")
        told = "the box was not reached by the listing"
        if row.box is not None:
            try:
                # Located through the row's own account (another account of the same
                # provider does not know the instance).
                connector = self.connector_for(row.target,
                                               self.fleet.clients.get(row.account))
                transport = connector.open(early=False, gate=True)
                try:
                    write_on_box(transport, lease)
                finally:
                    transport.close()
                told = ""
            except Exception as exc:  # noqa: BLE001 - the laptop's lease holds; said
                told = one_line(str(exc), 200)
        said += "; written on the box" if not told else \
            f"; kept here for the watchdog (the box was not told: {told})"
        self.post_message(self.Leased(said))

    def on_fleet_screen_leased(self, message: Leased) -> None:
        """Say how it went and list again."""
        self.app.notify(message.text, title="lease",
                        severity="error" if message.failed else "information", timeout=10)
        if not message.failed:
            self.action_refresh()

    def action_move(self) -> None:
        """m: resume the run of a row taken away on another box (asks where)."""
        row = self.selected()
        taken = None if row is None else row.interrupted
        risk = next((r for r in taken.runs if r.run.repo), None) if taken else None
        if row is None or risk is None:
            self.app.notify("m resumes a run taken away with its instance (a row that says "
                            "taken away, launched from here with hub=)", severity="warning")
            return
        dialog = MoveDialog(risk.run.repo, risk.run.name, row.target, risk.safe_words())
        self.app.push_screen(dialog, lambda answer: None if answer is None else
                             self.move_row(row, risk.run.repo, risk.run.name, answer))

    @work(thread=True, group="fleet-move", exit_on_error=False)
    def move_row(self, row: Any, repo: str, name: str, answer: MoveAnswer) -> None:
        """Resume ``repo:name`` on the answer's box (``remote.billing.move_run``), reached
        as the listing reaches boxes; each step becomes a ``Moved`` message."""
        from remote.billing import Moving, move_run
        from remote.weights import require_token

        target, project, data = answer
        try:
            connector, instance, new_rate = self.mover_for(target)
            moving = Moving(repo, name, project, data,
                            old_rate=getattr(row.instance, "price_per_hour", None),
                            new_rate=new_rate)
            resumed = move_run(connector, moving, require_token(), target=target,
                               instance=instance,
                               say=lambda step: self.post_message(self.Moved(step.line())))
            resumed.transport.close()
        except Exception as exc:  # noqa: BLE001 - the outcome is a line on screen
            self.post_message(self.Moved(f"resume of {name} on {target} failed: {exc}",
                                         done=True, failed=True))
            return
        self.post_message(self.Moved(f"{name} resumed on {target}: {resumed.run_dir}",
                                     done=True))

    def connector_for(self, target: str, client: Any = None) -> Any:
        """A connector to ``target`` with the listing's SSH options; an instance target is
        located through ``client`` (its account's provider client)."""
        from remote.billing import Locator, parse_instance_target
        from remote.link import Connector

        options = getattr(self.fleet, "options", None)
        named = parse_instance_target(target)
        return Connector(target, accept_new=bool(getattr(options, "accept_new", False)),
                         ssh_options=dict(getattr(options, "ssh_options", {}) or {}),
                         locate=Locator(named, provider=client) if named else None)

    def mover_for(self, target: str) -> tuple[Any, tuple[str, str] | None, float | None]:
        """For a resume on ``target`` (a box the user names, of any listed account of its
        provider): a connector, its ``(provider, id)`` and its price."""
        from remote.billing import parse_instance_target

        named = parse_instance_target(target)
        clients = getattr(self.fleet, "clients", {}) or {}
        client = None if named is None else \
            next((c for c in clients.values() if c.name == named.provider), None)
        price = None
        if named is not None and client is not None:
            try:
                price = client.get_instance(named.instance).price_per_hour
            except Exception:  # noqa: BLE001 - the price is a nicety; the move does not need it
                price = None
        instance = None if named is None else (named.provider, named.instance)
        return self.connector_for(target, client), instance, price

    def on_fleet_screen_moved(self, message: Moved) -> None:
        """Say each step (a notification, kept in the events history); at the end list
        again."""
        self.query_one("#fleet-status", Static).update(safe(message.text, 300,
                                                            "bold red" if message.failed
                                                            else ""))
        self.app.notify(message.text, title="resume elsewhere",
                        severity="error" if message.failed else "information",
                        timeout=15 if message.done else 6)
        if message.done and not message.failed:
            self.action_refresh()

    def on_fleet_screen_stopped(self, message: Stopped) -> None:
        """Say how the stop ended and list again."""
        self.app.notify(message.text, title="fleet", timeout=10)
        self.action_refresh()
