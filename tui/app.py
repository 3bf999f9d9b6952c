"""``GpurentApp``: one tab per box, keys and the command palette, the events history,
alerts from any box, and quitting in the words of each box's state."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Iterable
from typing import ClassVar

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.css.query import NoMatches
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import TabbedContent, TabPane

from remote.glance import running_url
from trainer.text import clean_text
from tui.box.instance import can_act
from tui.box.parts import Key
from tui.box.state import ALERT_VERDICTS
from tui.box.view import BoxView
from tui.dialogs.profile import ProfileCard
from tui.dialogs.quit import QuitDialog
from tui.fleet.words import quit_words
from tui.hints import Scene, hints
from tui.palette import Places
from tui.screens.events import MAX_EVENTS, Event, EventsScreen
from tui.screens.help import HelpScreen, unprefixed
from tui.screens.matches import MatchesScreen
from tui.spec import BoxSpec
from tui.widgets.keybar import KeyBar
from tui.widgets.runs import RunsList
from tui.words import Standing, farewell, glance_words, quit_offers, quit_text, quit_title

#: The app's own keys, each with its place; the box parts' keys (``BoxView.KEYS``, declared
#: by each part: l w u x p a R i D) sit between them by theirs. Which of them the footer
#: shows depends on the box's state and the width (``tui.hints``).
APP_KEYS: tuple[tuple[int, Key], ...] = (
    (10, Key("question_mark,f1", "help", "help", "Show the keys")),
    (20, Key("q", "quit", "quit", "Quit (says what keeps running and costing)")),
    (70, Key("e", "events", "events", "Show the events history (what toasts said)")),
    (80, Key("F", "fleet", "fleet", "Every instance of every account: price, idle time and "
             "dollars")),
    (90, Key("P", "glance", "glance", "The glance page's link and token (gpurent glance: for "
             "a phone)")),
    (150, Key("r", "reconnect", "reconnect", "Reconnect to the box now")),
    (160, Key("m", "metric", "metric", "Charts: show the next metric")),
    (170, Key("f", "log('toggle_follow')", "follow", "Log: follow on/off")),
    (180, Key("W", "log('wrap')", "wrap", "Log: wrap long lines, short form (default under "
              "120 columns)")),
    (190, Key("slash", "log('search')", "search", "Log: search with highlights")),
    (200, Key("n", "log('next')", "next", "Log: next search match")),
    (210, Key("N", "log('previous')", "prev", "Log: previous search match")),
    (220, Key("ampersand", "log('filter')", "filter", "Log: show only matching lines")),
    (230, Key("L", "log('matches')", "matches", "Log: list the search's matches in the whole "
              "log")),
    (240, Key("escape", "escape", "clear", "Clear the log search/filter; stop retrying a "
              "connection")),
)
#: Every key, in footer order (box actions run on the active tab).
KEYS: tuple[Key, ...] = tuple(key for _, key in sorted(
    [*APP_KEYS, *((k.place, k.as_key()) for k in BoxView.KEYS)], key=lambda kept: kept[0]))
#: Keys Textual's own key lists leave out (the footer is ``tui.hints``'s).
QUIET = ("n", "N", "L", "escape", "m", "f", "W", "slash", "ampersand", "r", "F", "P",
         *(box_key.key for box_key in BoxView.KEYS if box_key.quiet))
#: Keys that act anywhere, besides those of ``KEYS``, for the help screen.
ANYWHERE_KEYS = (("ctrl+p", "The command palette: every action, and every box and run by "
                  "name (ctrl+p exp27 watches exp27)"),
                 ("Tab / shift+Tab", "Move the focus between the panes (the log, the runs "
                  "list)"),
                 ("1-9, [ ]", "Switch box tabs"))
#: The log pane's own keys (it has the focus at start), for the help screen.
LOG_KEYS = (("j / k, ↓ / ↑", "Line down / up"), ("g / G", "Top / bottom (G follows)"),
            ("ctrl+d/u, PgDn/PgUp", "Half a page / a page down / up"),
            ("← / →", "Half a screen left / right (lines not wrapped)"))
#: Keys of every dialog and form, for the help screen.
DIALOG_KEYS = (("Tab / shift+Tab", "Next / previous field or button"),
               ("Enter", "In a field: the dialog's action (launch form: the next field). "
                "On a button: that button (Quit starts on Quit; a question that stops or "
                "destroys starts on Cancel)"),
               ("ctrl+s", "Launch form: launch"),
               ("Esc", "Cancel (nothing is done)"))
#: Help screen sections: title, and the prefix of the actions of ``KEYS`` they hold.
SECTIONS = (("Anywhere", ("help", "quit", "events", "fleet", "glance")),
            ("The box and its run", ("box(", "reconnect")),
            ("Log pane", ("log(", "escape")),
            ("Charts", ("metric",)))


class GpurentApp(App[int]):
    """The app. ``specs``: the boxes to open; ``clock``: the time source (frozen in
    snapshot tests); ``autoconnect``: connect on start (off for widget-only tests);
    ``ssh_options``, ``accept_new``: the fleet's connection options (``-i``, ...)."""

    TITLE = "gpurent-tui"
    CSS_PATH = "app.tcss"
    #: The palette finds boxes and runs by name besides the actions (``tui.palette``).
    COMMANDS = App.COMMANDS | {Places}
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-medium"), (120, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (40, "-tall")]
    BINDINGS: ClassVar[list[BindingType]] = [
        *(Binding(key, action, label, show=key.split(",")[0] not in QUIET, tooltip=desc)
          for key, action, label, desc in KEYS),
        *(Binding(str(n), f"tab({n - 1})", f"tab {n}", show=False) for n in range(1, 10)),
        Binding("left_square_bracket", "tab_step(-1)", "previous tab", show=False),
        Binding("right_square_bracket", "tab_step(1)", "next tab", show=False)]

    def __init__(self, specs: list[BoxSpec], clock: Callable[[], float] = time.time,
                 autoconnect: bool = True, accept_new: bool = False,
                 ssh_options: tuple[tuple[str, object], ...] = ()) -> None:
        super().__init__()
        self.specs = specs
        #: How the fleet reaches its boxes (``-i``, ``--accept-new``); its tabs too.
        self.ssh_options, self.accept_new = ssh_options, accept_new
        self.clock = clock
        self.autoconnect = autoconnect
        self.farewell = ""
        self.history: deque[Event] = deque(maxlen=MAX_EVENTS)
        #: Lists the fleet (blocking, in a worker): ``list_fleet`` of the accounts (tests: own).
        self.fleet_lister: Callable[[], object] = self._list_fleet

    def compose(self) -> ComposeResult:
        """One tab per box, and the footer with the keys."""
        with TabbedContent(id="boxes"):
            for n, spec in enumerate(self.specs):
                with TabPane(spec.title, id=f"box-{n}"):
                    yield BoxView(spec, clock=self.clock, autoconnect=self.autoconnect,
                                  id=f"boxview-{n}")
        yield KeyBar(id="keys")

    def on_mount(self) -> None:
        """With one box the tab bar is only noise. The footer follows the state."""
        if len(self.specs) <= 1:
            self.query_one(TabbedContent).add_class("-single")
        if self.box is not None:
            self.box.log_pane.log_view.focus()
        self.set_interval(0.25, self.draw_keys)
        self.call_after_refresh(self.draw_keys)
        if not self.specs:  # no host given: the fleet is where to start
            self.action_fleet()

    def draw_keys(self) -> None:
        """The footer: the keys that act now on the shown box (``tui.hints``), drawn
        under dialogs too (the main screen's, not the one on top)."""
        main = self.screen_stack[0] if self.screen_stack else None
        if main is None or not (bars := main.query(KeyBar)):
            return  # starting or ending
        tabs = main.query_one(TabbedContent)
        labels = {key.split(",")[0]: label for key, _, label, _ in KEYS}
        scene = Scene()
        try:
            box = tabs.get_pane(tabs.active).query_one(BoxView) if tabs.active else None
            if box is not None:
                pane = box.log_pane
                scene = Scene(searching=bool(pane.search), filtering=bool(pane.filter_text),
                              wrapped=pane.log_view.wrap,
                              in_runs=isinstance(main.focused, RunsList))
        except NoMatches:
            return  # a tab just added (from the fleet): its panes are not mounted yet
        ranks = {box_key.key: box_key.rank for box_key in BoxView.KEYS}
        bars.first().show(hints(None if box is None else box.state, labels, scene, ranks))

    def on_tabbed_content_tab_activated(self, event: TabbedContent.TabActivated) -> None:
        """The keys act on the shown box (see ``tab_shown``)."""
        self.tab_shown(event.pane)

    def tab_shown(self, pane: TabPane) -> None:
        """Give the shown box's log the focus; its alerts are seen. A pane whose view is
        not mounted yet (a tab just added, or switched to on a busy app) is served after
        the next refresh."""
        try:
            box = pane.query_one(BoxView)
        except NoMatches:
            if pane.is_attached:
                self.call_after_refresh(self.tab_shown, pane)
            return
        box.watching.seen()
        self.focus_log(box)

    def focus_log(self, box: BoxView) -> None:
        """Give the box's log the focus; a tab just added (from the fleet) is not
        mounted yet: then after the next refresh."""
        try:
            log = box.log_pane.log_view
        except NoMatches:
            if box.is_attached:
                self.call_after_refresh(self.focus_log, box)
            return
        if not log.has_focus_within:
            log.focus()

    # ------------------------------------------------------------------ helpers

    @property
    def box(self) -> BoxView | None:
        """The box view of the active tab (``None`` while there is none, or while a tab
        just added or switched to has not mounted its view: a key then does nothing)."""
        tabs = self.query_one(TabbedContent)
        if not tabs.active:
            return None
        try:
            return tabs.get_pane(tabs.active).query_one(BoxView)
        except NoMatches:
            return None

    def boxes(self) -> list[BoxView]:
        """Every box view."""
        return list(self.query(BoxView))

    def record(self, message: str, title: str = "", severity: str = "note") -> None:
        """Keep ``message`` in the events history (without a notification)."""
        self.history.append(Event(self.clock(), clean_text(title),
                                  clean_text(str(message)), severity))

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = False) -> None:
        """Notifications carry text from the box: always shown without markup, with
        control characters stripped; each is kept in the events history (e)."""
        self.record(message, title, severity)
        super().notify(clean_text(str(message)), title=clean_text(title),
                       severity=severity, timeout=timeout, markup=False)

    def alert(self, message: str, title: str = "", severity: SeverityLevel = "error") -> None:
        """A notification with the terminal bell (a run ended badly, a push failed)."""
        self.bell()
        self.notify(message, title=title, severity=severity, timeout=15)

    # ------------------------------------------------------------------ actions

    def action_box(self, name: str) -> None:
        """Run box action ``name`` (a key of ``BoxView.commands``) on the active tab; a
        refusal is shown like any failure (one line with the next step)."""
        box = self.box
        if box is None:
            return
        try:
            box.commands[name]()
        except Exception as exc:  # noqa: BLE001 - every refusal reaches the screen
            box.report_failure(name, exc)

    def action_log(self, what: str) -> None:
        """Log pane commands on the active tab."""
        box = self.box
        if box is None:
            return
        pane = box.log_pane
        if what == "toggle_follow":
            pane.toggle_follow()
        elif what == "wrap":
            pane.toggle_wrap()
        elif what in ("search", "filter"):
            pane.open_input(what)
        elif what == "next":
            pane.find(forward=True)
        elif what == "previous":
            pane.find(forward=False)
        elif what == "matches":
            if not pane.search:
                self.notify("no search yet: / starts one", severity="warning", timeout=3)
            elif pane.box_search_error is not None:
                self.notify(f"cannot search the whole log: {pane.box_search_error}",
                            severity="error", timeout=8)
            elif pane.box_matches is None:
                self.notify("the box is still searching the whole log", timeout=3)
            else:
                self.push_screen(MatchesScreen(pane.box_matches))

    def action_escape(self) -> None:
        """Esc: close or clear the log search; else stop retrying a connection."""
        box = self.box
        if box is None:
            return
        if box.log_pane.escape():
            return
        if box.link.stop_retrying():
            self.notify("stopped retrying; r tries again", title=box.spec.title, timeout=5)

    def action_metric(self) -> None:
        """m: the metrics pane charts the next metric."""
        if self.box is not None:
            from tui.widgets.metrics import MetricsPane

            self.box.query_one(MetricsPane).cycle_metric()

    def action_reconnect(self) -> None:
        """Reconnect the active box now."""
        if self.box is not None:
            self.notify("reconnecting…", title=self.box.spec.title, timeout=3)
            self.box.reconnect()

    def show_box(self, index: int) -> None:
        """Show box ``index``'s tab (the palette's boxes)."""
        self.action_tab(index)

    def show_run(self, index: int, run_dir: str) -> None:
        """Show box ``index``'s tab and watch ``run_dir`` there (the palette's runs)."""
        self.action_tab(index)
        box = self.boxes()[index]
        if run_dir != box.state.run_dir:
            box.watching.watch(run_dir)
        box.log_pane.log_view.focus()

    def action_profile_card(self) -> None:
        """The last profile's whole verdict card (the palette's "Profile card")."""
        box = self.box
        if box is None or box.state.last_profile is None:
            self.notify("no profile yet: p profiles a short run", severity="warning",
                        timeout=4)
            return
        self.push_screen(ProfileCard(box.state.last_profile))

    def action_tab(self, index: int) -> None:
        """1-9: show that box's tab."""
        if 0 <= index < len(self.specs):
            self.query_one(TabbedContent).active = f"box-{index}"

    def action_tab_step(self, step: int) -> None:
        """[ and ]: the previous or next tab."""
        tabs = self.query_one(TabbedContent)
        current = int((tabs.active or "box-0").split("-")[1])
        tabs.active = f"box-{(current + step) % len(self.specs)}"

    def action_events(self) -> None:
        """e: the events history."""
        self.push_screen(EventsScreen(list(self.history)))

    def action_fleet(self) -> None:
        """F: every instance of every account (``tui.screens.fleet``)."""
        from tui.screens.fleet import FleetScreen

        if not self.is_screen_installed("fleet"):  # one screen: its rows, cursor, filter
            self.install_screen(FleetScreen(self.fleet_lister, self.open_instance), "fleet")
        if not isinstance(self.screen, FleetScreen):
            if (box := self.box) is not None and box.spec.instance and box.spec.provider:
                self.get_screen("fleet").aim(f"{box.spec.provider}:{box.spec.instance}")  # type: ignore[attr-defined]
            self.push_screen("fleet")

    def action_glance(self) -> None:
        """P: the link (with its token) of the glance page this laptop serves."""
        if (url := running_url()) is not None:
            self.copy_to_clipboard(url)
        self.notify(glance_words(url), title="glance", timeout=60, markup=False)

    def _list_fleet(self) -> object:
        from remote.billing import NoAccounts, configured_accounts
        from remote.fleet import FleetOptions, list_fleet

        if not (accounts := configured_accounts()):
            raise NoAccounts()
        options = FleetOptions(ssh_options=dict(self.ssh_options), accept_new=self.accept_new)
        return list_fleet(accounts, options)

    def open_instance(self, row: object, destroy: bool = False) -> None:
        """Open a fleet row or a ``BoxSpec`` as a box tab; ``destroy``: ask it once connected."""
        from tui.screens.fleet import FleetScreen

        target = str(getattr(row, "target", ""))
        tabs = self.query_one(TabbedContent)
        index = next((n for n, s in enumerate(self.specs) if s.target == target), None)
        view = None if index is None else tabs.get_pane(f"box-{index}").query_one(BoxView)
        if index is None:
            spec = row if isinstance(row, BoxSpec) else \
                BoxSpec.from_fleet_row(row, getattr(self.screen, "fleet", None))
            index = len(self.specs)
            self.specs.append(spec)
            view = BoxView(spec, clock=self.clock, autoconnect=self.autoconnect,
                           id=f"boxview-{index}")
            tabs.add_pane(TabPane(spec.title, view, id=f"box-{index}"))
            tabs.set_class(len(self.specs) <= 1, "-single")
        tabs.active = f"box-{index}"
        if isinstance(self.screen, FleetScreen):
            self.pop_screen()
        if destroy and view is not None:
            try:
                view.instance.destroy_once_connected()
            except Exception as exc:  # noqa: BLE001 - every refusal reaches the screen
                view.report_failure("destroy", exc)

    def action_help(self) -> None:
        """Show the keys, pane by pane."""
        names = {"question_mark": "?", "slash": "/", "ampersand": "&", "escape": "Esc"}
        sections: list[tuple[str, list[tuple[str, str]]]] = []
        for title, actions in SECTIONS:
            keys = [(", ".join(names.get(k, k) for k in key.split(",")), unprefixed(desc))
                    for key, action, _, desc in KEYS if action.startswith(actions)]
            if title == "Anywhere":
                keys += ANYWHERE_KEYS
            elif title == "Log pane":
                keys = list(LOG_KEYS) + keys
            sections.append((title, keys))
        sections.insert(3, ("Runs list (Tab to it)", list(RunsList.KEYS)))
        sections.append(("Dialogs and the launch form", list(DIALOG_KEYS)))
        from tui.screens.fleet import FLEET_KEYS

        sections.append(("Fleet (F)", list(FLEET_KEYS)))
        self.push_screen(HelpScreen(sections))

    async def action_help_quit(self) -> None:  # type: ignore[override]  # Textual awaits it
        """ctrl+c (Textual's would only say "press ctrl+q"): the same question as q."""
        await self.action_quit()

    # ------------------------------------------------------------------ quitting

    def standings(self) -> list[Standing]:
        """What each box leaves behind if the app quits now."""
        out = []
        for box in self.boxes():
            state = box.state
            safety, guard, spec = state.safety, state.guard, state.spec
            run = state.run_name or None
            out.append(Standing(
                title=spec.title, local=spec.kind == "local", demo=spec.demo,
                run=run, verdict=state.verdict_now(),
                price=state.price_per_hour(),
                weights_safe=None if safety is None else safety.safe,
                weights_where=None if safety is None else safety.where,
                guard_watching=bool(guard is not None and guard.watching),
                guard_summary=guard.summary() if guard is not None else "",
                can_stop_instance=can_act(state), reattach=spec.reattach(run),
                reached=state.reached or spec.kind == "local",
                why_not=state.connect_error or "",
                destroyed=state.instance_destroyed(), instance=str(spec.instance or ""),
                stopped=state.instance_stopped(), storage_price=state.storage_per_hour(),
                provider_said=state.provider_said()))
        return out

    async def action_quit(self) -> None:
        """Ask, in the words of each box's state, then detach."""
        standings = self.standings()
        body, title = quit_text(standings), quit_title(standings)
        fleet = self.get_screen("fleet") if self.is_screen_installed("fleet") else None
        if (said := quit_words(getattr(fleet, "fleet", None))) is not None:
            body.append_text(Text("\n\n" if body else "") + said[0])
            title = "Detach and quit" if said[1] else title
        self.push_screen(QuitDialog(title, body, quit_offers(standings)), self._quit_answered)

    async def _quit_answered(self, answer: str | None) -> None:
        standings = self.standings()
        boxes = self.boxes()
        if answer in ("arm", "stop-instance"):
            def wanted(s: Standing) -> bool:
                if answer == "arm":
                    return s.billing and s.training and not s.guard_watching
                return s.billing and not s.training and s.can_stop_instance and not s.stopped

            needs = [b for b, s in zip(boxes, standings, strict=True) if wanted(s)]
            if needs and needs[0].parent is not None and needs[0].parent.id:
                self.query_one(TabbedContent).active = needs[0].parent.id
                self.action_box("guard" if answer == "arm" else "stop_instance")
            return
        if answer == "stop-demo":
            for box, s in zip(boxes, standings, strict=True):
                state = box.state
                if s.demo and s.training and state.transport is not None and state.run_dir:
                    from remote.runs import stop_run

                    await asyncio.to_thread(stop_run, state.transport, state.run_dir, 15.0)
            standings = self.standings()
        elif answer != "quit":
            return
        self.farewell = clean_text("\n".join(farewell(s) for s in standings),
                                   keep_newlines=True)
        for box in boxes:
            box.shutdown()
        self.exit(0)

    # ------------------------------------------------------------------ events

    def on_box_view_health_changed(self, message: BoxView.HealthChanged) -> None:
        """A run of any box completed, failed, died or stalled: toast and bell."""
        from tui.words import verdict_line

        severity = ALERT_VERDICTS.get(message.verdict, "warning")
        self.alert(verdict_line(message.run, message.verdict, message.reason),
                   message.box.spec.title, severity=severity)

    def on_box_view_title_changed(self, message: BoxView.TitleChanged) -> None:
        """Show a box's state on its tab."""
        pane = message.box.parent
        if isinstance(pane, TabPane) and pane.id:
            self.query_one(TabbedContent).get_tab(pane.id).label = message.box.tab_label()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every key's action in the command palette too (our Quit replaces Textual's,
        which would leave without saying what keeps running)."""
        ours = {label.capitalize() for _, _, label, _ in KEYS}
        for command in super().get_system_commands(screen):
            if command.title not in ours:
                yield command
        for _key, action, label, desc in KEYS:
            if action == "escape":
                continue
            yield SystemCommand(label.capitalize(), desc,
                                lambda action=action: self.run_action(action))
        yield SystemCommand("Profile card", "Show the last profile's whole verdict card",
                            self.action_profile_card)
