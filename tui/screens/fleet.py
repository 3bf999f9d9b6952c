"""The fleet: every instance of every configured account in one table, with its state,
price, what it spent and the idle and waste words (``remote.billing.list_fleet``, the
same listing as ``gpurent instances``), with each reached box's weights verdict (the
destroy check's); the details under the table add its GPUs now and over the last hour
(the box's GPU ring).

It lists itself again every ``REFRESH`` seconds while it is open (counted from the end
of the last listing, longer while an account fails: the providers' clients keep their
rate limits), says when the rows were listed ("as of HH:MM:SS"), and moves ``spent``
and the idle minutes on between listings. An account that does not answer keeps its
last-known rows, marked, and the total says it is incomplete
(``remote.billing.keep_last_known``). The cursor stays on its instance through
listings, sorting, filtering and actions.

Keys: j/k/g/G move, ``/`` filters, ``o`` sorts, Enter opens the instance as a box tab,
``s``/``D``/``L`` stop, destroy and lease it (``tui.fleet.actions``); ``m`` on a row
taken away by its provider resumes a run on another box (``tui.screens.fleetmove``)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static

from remote.fleet import SORTS, row_key, shown
from trainer.text import clock_time
from tui.fleet.actions import FleetActions
from tui.fleet.table import COLUMNS, cells, detail
from tui.fleet.words import watchdog_words
from tui.fmt import safe
from tui.screens.fleetmove import MoveKey

#: The screen's keys, for its own key line and the help screen.
FLEET_KEYS = (("enter", "open it as a box tab"), ("s", "stop the instance (asks first)"),
              ("D", "destroy (the destroy check; unknown weights: typed id and a tick)"),
              ("L", "lease: a deadline for its billing"),
              ("m", "resume a taken-away run on another box"),
              ("j/k g/G", "move"), ("/", "filter"), ("o", "sort"),
              ("r", "list again"), ("escape", "back to the boxes"))
#: Where else to start, said when there is no fleet to list.
OTHER_STARTS = ("Watch one box: gpurent-tui HOST (an address, an ~/.ssh/config alias or "
                "vast:ID); a local demo run: gpurent-tui --demo; runs here: "
                "gpurent-tui --local DIR.")
#: The longest wait between listings while accounts keep failing.
MAX_REFRESH = 600.0


class FleetScreen(FleetActions, MoveKey, Screen[None]):
    """The table; ``lister()`` returns a ``remote.billing.Fleet`` (it blocks: it runs in
    a worker thread); ``open_box(row)`` opens a row's instance as a box tab."""

    #: Seconds between listings while the screen is open (each lists every account and
    #: reaches every running box once; doubled after each listing with a failure).
    REFRESH = 60.0

    DEFAULT_CSS = """
    FleetScreen #fleet { height: auto; max-height: 1fr; }
    FleetScreen #fleet-filter { display: none; height: 3; }
    FleetScreen #fleet-filter.-open { display: block; }
    FleetScreen #fleet-detail { height: auto; padding: 0 1; margin-top: 1;
                                border-top: solid $primary; }
    FleetScreen #fleet-keys { padding: 0 1; }
    FleetScreen #fleet-watchdog { padding: 0 1; }
    """

    BINDINGS = [Binding("enter", "open", "open", show=False),
                Binding("s", "stop", "stop", show=False),
                Binding("D", "destroy", "destroy", show=False),
                Binding("L", "lease", "lease", show=False),
                Binding("m", "move", "resume elsewhere", show=False),
                Binding("r", "refresh", "list again", show=False),
                Binding("j", "cursor(1)", "down", show=False),
                Binding("k", "cursor(-1)", "up", show=False),
                Binding("g", "cursor_to(0)", "top", show=False),
                Binding("G", "cursor_to(-1)", "bottom", show=False),
                Binding("slash", "filter", "filter", show=False),
                Binding("o", "sort", "sort", show=False),
                Binding("escape,F", "close", "back", show=False)]

    class Listed(Message):
        """The listing finished (``fleet``) or failed (``error``)."""

        def __init__(self, fleet: Any = None, error: str = "", setup: bool = False,
                     watchdog: Any = None) -> None:
            super().__init__()
            self.fleet = fleet
            self.error = error
            #: The error is a missing setting, not a failure (no account configured).
            self.setup = setup
            #: The last watchdog pass recorded on this laptop (``None``: none).
            self.watchdog = watchdog

    class Stopped(Message):
        """A stop or a destroy from the list ended: its one-line outcome."""

        def __init__(self, text: str) -> None:
            super().__init__()
            self.text = text

    class DestroyAsked(Message):
        """The weights of a row to destroy were checked (``safety``), or could not be
        (``unknown``: why)."""

        def __init__(self, row: Any, safety: Any, unknown: str) -> None:
            super().__init__()
            self.row, self.safety, self.unknown = row, safety, unknown

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
        #: The rows as the table shows them (filtered, sorted).
        self.rows: list[Any] = []
        self.sort = 0
        self.query_text = ""
        self.listing = False
        #: Listings in a row that had a failure (each doubles the wait before the next).
        self.failing = 0
        self.next_at = 0.0
        self.watchdog: Any = None
        self.problem: Text | None = None
        #: The instance the cursor goes to once it is listed (``aim``).
        self.wanted: str | None = None

    def compose(self) -> ComposeResult:
        """The status line, the filter, the table, the details, the keys."""
        yield Static("asking the providers…", id="fleet-status")
        yield Static(id="fleet-watchdog")
        yield Input(placeholder="filter: part of an instance, account, GPU or note "
                    "(Enter keeps it, Esc clears it)", id="fleet-filter")
        table: DataTable[Text] = DataTable(id="fleet", cursor_type="row", zebra_stripes=True)
        for name in COLUMNS:
            table.add_column(name, key=name)
        yield table
        yield Static(id="fleet-detail")
        yield Static(id="fleet-modal")
        yield Static(Text("  ".join(f"{k} {what}" for k, what in FLEET_KEYS), style="dim"),
                     id="fleet-keys")

    def on_mount(self) -> None:
        """List at once; then keep the figures moving and list again when due."""
        self.query_one(DataTable).focus()
        self.action_refresh()
        self.set_interval(1.0, self.tick)

    def on_screen_resume(self) -> None:
        """Shown again (back from a box tab or a dialog): list now if it is due."""
        self.tick()

    def tick(self) -> None:
        """Every second: the moving figures, and a new listing when one is due and the
        screen is in the app's stack (not while it is left for a box tab)."""
        if self.fleet is not None:
            self.redraw_moving()
        if not self.listing and time.monotonic() >= self.next_at and \
                self in self.app.screen_stack:
            self.action_refresh()

    def action_refresh(self) -> None:
        """r: list again (one listing at a time)."""
        if self.listing:
            return
        self.listing = True
        self.show_status()
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
                text.append_text(safe(f"{row['target']}  {row['words']}; {row['money']}; "
                                      f"{row['bill']}", 400))
        self.app.call_from_thread(self.query_one("#fleet-modal", Static).update, text)

    @work(thread=True, group="fleet", exit_on_error=False)
    def list_fleet(self) -> None:
        """Ask (in a thread) and post the answer, with the last watchdog pass."""
        from remote.billing import NoAccounts
        from remote.fleet import last_pass

        try:
            watchdog = last_pass()
        except OSError:
            watchdog = None
        try:
            fleet = self.lister()
        except Exception as exc:  # noqa: BLE001 - any failure is one line on screen
            self.post_message(self.Listed(error=str(exc), setup=isinstance(exc, NoAccounts),
                                          watchdog=watchdog))
            return
        self.post_message(self.Listed(fleet, watchdog=watchdog))

    def on_fleet_screen_listed(self, message: Listed) -> None:
        """Fill the table (keeping an account's last-known rows while it fails) and plan
        the next listing."""
        from remote.fleet import keep_last_known

        self.listing = False
        self.watchdog = message.watchdog
        failed = bool(message.error) or any(r.instance is None for r in
                                             getattr(message.fleet, "rows", []))
        self.failing = self.failing + 1 if failed else 0
        wait = min(MAX_REFRESH, self.REFRESH * 2 ** min(self.failing, 10))
        self.next_at = time.monotonic() + (wait if not message.setup else MAX_REFRESH)
        self.problem = None
        if message.setup:
            self.problem = Text.assemble(safe(f"Nothing to list: {message.error}.", 400,
                                              "yellow"), "\n", OTHER_STARTS)
        elif message.error:
            self.problem = safe(f"cannot list: {message.error}" +
                                ("" if self.fleet is None else "; the rows below are the "
                                 "last listing's"), 400, "bold red")
        else:
            self.fleet = keep_last_known(self.fleet, message.fleet)
            self.fill()
        self.show_status()

    def show_status(self) -> None:
        """The status line: the total, when listed, when next; and the watchdog's line."""
        status = self.query_one("#fleet-status", Static)
        text = Text()
        if self.problem is not None:
            text.append_text(self.problem)
        if self.fleet is not None:
            if text:
                text.append("\n")
            fleet = self.fleet
            text.append(f"{fleet.billing_words()}; as of {clock_time(fleet.now, True)} "
                        f"(listed in {fleet.seconds:.1f} s)")
            if self.query_text:
                text.append(f"; filter {self.query_text!r}: {len(self.rows)} of "
                            f"{len(fleet.rows)} rows", style="bold")
            if self.sort:
                text.append(f"; sorted by {SORTS[self.sort][0]}")
        if self.listing:
            text.append("; listing again…" if text else "asking the providers…")
        status.update(text)
        self.query_one("#fleet-watchdog", Static).update(
            watchdog_words(self.watchdog, self.fleet, time.time()))

    def say_status(self, line: str) -> None:
        """One line of progress in the status line (until the next status)."""
        self.query_one("#fleet-status", Static).update(safe(line, 300))

    def fill(self) -> None:
        """The table anew from the fleet, the cursor kept on its row's instance."""
        table = self.query_one(DataTable)
        keep = self.wanted or (row_key(self.rows[table.cursor_row])
                               if 0 <= table.cursor_row < len(self.rows) else None)
        now = time.time()
        self.rows = shown(self.fleet.rows, now, self.sort, self.query_text)
        table.clear()
        for row in self.rows:
            table.add_row(*cells(row, now), key=row_key(row))
        keys = [row_key(row) for row in self.rows]
        if keep in keys:
            table.move_cursor(row=keys.index(keep), animate=False)
            self.wanted = None
        self.show_detail()

    def aim(self, target: str) -> None:
        """Put the cursor on instance ``target`` (``vast:4242``), now or once listed."""
        self.wanted = target
        if self.fleet is not None:
            self.fill()

    def redraw_moving(self) -> None:
        """``spent`` and the notes (idle minutes, lease left) as they stand now."""
        table = self.query_one(DataTable)
        now = time.time()
        for row in self.rows:
            new = cells(row, now)
            key = row_key(row)
            for column in ("spent", "notes"):
                index = COLUMNS.index(column)
                try:
                    if table.get_cell(key, column) != new[index]:
                        table.update_cell(key, column, new[index])
                except KeyError:  # a fill between the listing and this tick
                    break
        self.show_detail()
        self.query_one("#fleet-watchdog", Static).update(
            watchdog_words(self.watchdog, self.fleet, now))

    def show_detail(self) -> None:
        """The details of the highlighted row under the table."""
        row = self.under_cursor()
        self.query_one("#fleet-detail", Static).update(
            Text("") if row is None else detail(row, time.time()))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        """The cursor moved: the details follow it."""
        self.show_detail()

    def under_cursor(self) -> Any:
        """The row under the cursor, an account's failure too (``None``: no rows)."""
        index = self.query_one(DataTable).cursor_row
        return self.rows[index] if 0 <= index < len(self.rows) else None

    def selected(self) -> Any:
        """The row under the cursor when it is an instance (``None`` otherwise)."""
        row = self.under_cursor()
        return row if row is not None and row.instance is not None else None

    def action_cursor(self, step: int) -> None:
        """j/k: the next or previous row."""
        table = self.query_one(DataTable)
        if self.rows:
            table.move_cursor(row=max(0, min(len(self.rows) - 1, table.cursor_row + step)))

    def action_cursor_to(self, index: int) -> None:
        """g/G: the first or the last row."""
        if self.rows:
            self.query_one(DataTable).move_cursor(row=index % len(self.rows))

    def action_sort(self) -> None:
        """o: the next sort order (the cursor stays on its instance)."""
        self.sort = (self.sort + 1) % len(SORTS)
        if self.fleet is not None:
            self.fill()
        self.show_status()

    def action_filter(self) -> None:
        """/: type a part of a row's words; the table shows the rows that hold it."""
        field = self.query_one("#fleet-filter", Input)
        field.add_class("-open")
        field.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        """The filter as typed."""
        event.stop()
        self.query_text = event.value
        if self.fleet is not None:
            self.fill()
        self.show_status()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        """Enter keeps the filter and goes back to the table."""
        event.stop()
        self.query_one(DataTable).focus()

    def show_target(self, target: str) -> None:
        """Show the fleet with the cursor on ``target`` (the command palette's)."""
        if self.query_text:
            self.clear_filter()
        keys = [row_key(row) for row in self.rows]
        if target in keys:
            self.query_one(DataTable).move_cursor(row=keys.index(target), animate=False)
        if self is not self.app.screen:
            self.app.push_screen(self)

    def clear_filter(self) -> None:
        """No filter: every row."""
        field = self.query_one("#fleet-filter", Input)
        field.remove_class("-open")
        self.query_text = ""
        field.value = ""
        if self.fleet is not None:
            self.fill()
        self.show_status()

    def action_open(self) -> None:
        """Enter: the instance as a box tab (an account's failure says why not)."""
        row = self.row_to_act_on("open")
        if row is not None:
            self.open_box(row, False)

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        """Enter on the table (which takes the key itself): open the row."""
        event.stop()
        self.action_open()

    def action_close(self) -> None:
        """Escape: clear the filter; else back to the boxes (with none open, the app
        asks about quitting)."""
        if self.query_text or self.query_one("#fleet-filter", Input).has_class("-open"):
            self.clear_filter()
            self.query_one(DataTable).focus()
        elif len(self.app.screen_stack) > 2 or getattr(self.app, "specs", None):
            self.dismiss(None)
        else:
            self.app.run_action("quit")

    def connector_for(self, target: str, client: Any = None) -> Any:
        """A connector to ``target`` with the listing's SSH options; an instance target is
        located through ``client`` (its account's provider client)."""
        from remote.billing import connector_to
        from tui.hostkey_question import host_key_asker

        options = getattr(self.fleet, "options", None)
        return connector_to(target, provider=client,
                            accept_new=bool(getattr(options, "accept_new", False)),
                            ssh_options=getattr(options, "ssh_options", None),
                            ask_unknown=host_key_asker(self.app))  # a new box's key is asked
