"""The log beyond what the watch streamed: a watch starts at the log's tail, so scrolling
to the top of the pane asks the box for the bytes before (``remote.runs.older_log``), and
a search runs over the whole file on the box (``remote.runs.search_log``), its matches
shown in the pane's status line."""

from __future__ import annotations

from dataclasses import dataclass

from remote.runs import LogChunk, LogMatches, older_log, search_log
from trainer.text import one_line
from tui.box.parts import PartMessage, handles
from tui.box.ports import Panes, Ports
from tui.widgets.logpane import LogPane

#: Bytes asked for at each scroll to the top.
OLDER_BYTES = 256 * 1024


@dataclass
class OlderLog(PartMessage, bubble=False, namespace="box"):
    """Bytes of the log before those shown, for the watch of generation ``gen``
    (``None``: the request failed, and its failure is reported as usual)."""

    gen: int
    chunk: LogChunk | None


@dataclass
class LogSearched(PartMessage, bubble=False, namespace="box"):
    """The lines of the whole log that hold a term, for the watch of generation ``gen``;
    or ``failed``: ``(term, why)``."""

    gen: int
    found: LogMatches | None
    failed: tuple[str, str] | None = None


class LogPaging:
    """Older log parts and whole-log searches of one box's log pane, one fetch at a
    time."""

    def __init__(self, ports: Ports, panes: Panes) -> None:
        self.ports = ports
        self.panes = panes
        self._older_busy = False

    @handles(LogPane.WantsOlder, take=())
    def wants_older(self) -> None:
        """The pane was scrolled to its top: fetch what came before."""
        state, pane = self.ports.state, self.panes.log
        if self._older_busy or not pane.more_above or state.transport is None \
                or state.run_dir is None:
            return
        self._older_busy = True
        gen, run_dir, before = state.gen, state.run_dir, pane.all_lines.first
        self.ports.work("fetch_older", lambda: self._fetch(gen, run_dir, before),
                        group="log-older", exclusive=False)

    def _fetch(self, gen: int, run_dir: str, before: int) -> None:
        """Ask the box for the bytes before ``before``."""
        chunk = None
        try:
            chunk = older_log(self.ports.state.need_transport(), run_dir, before,
                              OLDER_BYTES)
        finally:
            self.ports.post(OlderLog(gen, chunk))

    @handles(OlderLog, action="fetch_older")
    def older(self, message: OlderLog) -> None:
        """Put the older lines above the others."""
        self._older_busy = False
        if message.gen == self.ports.state.gen and message.chunk is not None:
            self.panes.log.show_older(message.chunk.offset, message.chunk.data)

    @handles(LogPane.Searched, take=("term",))
    def search(self, term: str) -> None:
        """A search in the pane also runs over the whole log, on the box."""
        state = self.ports.state
        if term and state.transport is not None and state.run_dir is not None:
            gen, run_dir = state.gen, state.run_dir
            self.ports.work("search_whole_log", lambda: self._search(gen, run_dir, term),
                            group="log-search")

    def _search(self, gen: int, run_dir: str, term: str) -> None:
        """Search the whole log on the box (a failure is also reported as usual)."""
        try:
            found = search_log(self.ports.state.need_transport(), run_dir, term)
        except Exception as exc:
            self.ports.post(LogSearched(gen, None, (term, one_line(str(exc)))))
            raise
        self.ports.post(LogSearched(gen, found))

    @handles(LogSearched, action="search_whole_log")
    def searched(self, message: LogSearched) -> None:
        """Show how many lines of the whole log hold the term."""
        if message.gen != self.ports.state.gen:
            return
        pane = self.panes.log
        if message.found is not None:
            pane.show_box_matches(message.found)
        elif message.failed is not None:
            pane.box_search_failed(*message.failed)
