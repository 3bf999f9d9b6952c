"""The log beyond what the watch streamed, mixed into ``tui.box.view.BoxView``: a watch
starts at the log's tail, so scrolling to the top of the pane asks the box for the
bytes before (``remote.runs.log.older_log``), and a search runs over the whole file on the
box (``remote.runs.log.search_log``), its matches shown in the pane's status line."""

from __future__ import annotations

from textual import work
from textual.message import Message

from remote.runs import LogChunk, LogMatches, older_log, search_log
from trainer.text import one_line
from tui.widgets.logpane import LogPane

#: Bytes asked for at each scroll to the top.
OLDER_BYTES = 256 * 1024


class LogActions:
    """Fetching older log parts and searching the whole log (``self`` is the view)."""

    class OlderLog(Message):
        """Bytes of the log before those shown, for the run of generation ``gen``."""

        def __init__(self, gen: int, chunk: LogChunk) -> None:
            super().__init__()
            self.gen = gen
            self.chunk = chunk

    class LogMatches(Message):
        """The box's answer to a search of the whole log (run of generation ``gen``), or
        why there is none (``failed``: the term and the one-line reason)."""

        def __init__(self, gen: int, found: LogMatches | None,
                     failed: tuple[str, str] | None = None) -> None:
            super().__init__()
            self.gen = gen
            self.found = found
            self.failed = failed

    def init_logs(self) -> None:
        """State kept between requests."""
        self._older_busy = False

    def on_log_pane_wants_older(self, message: LogPane.WantsOlder) -> None:
        """The pane was scrolled to its top: fetch what came before, once at a time."""
        message.stop()
        pane = self.log_pane
        if self._older_busy or not pane.more_above or self.transport is None \
                or self.run_dir is None:
            return
        self._older_busy = True
        self.fetch_older(self.gen, self.run_dir, pane.all_lines.first)

    @work(thread=True, exit_on_error=False, group="log-older")
    def fetch_older(self, gen: int, run_dir: str, before: int) -> None:
        """Ask the box for the bytes before ``before``."""
        try:
            chunk = older_log(self.need_transport(), run_dir, before, OLDER_BYTES)
        finally:
            self._older_busy = False
        self.tell(self.OlderLog(gen, chunk))

    def on_log_actions_older_log(self, message: OlderLog) -> None:
        """Put the older lines above the others."""
        if message.gen == self.gen:
            self.log_pane.show_older(message.chunk.offset, message.chunk.data)

    def on_log_pane_searched(self, message: LogPane.Searched) -> None:
        """A search in the pane also runs over the whole log, on the box."""
        message.stop()
        if message.term and self.transport is not None and self.run_dir is not None:
            self.search_whole_log(self.gen, self.run_dir, message.term)

    @work(thread=True, exclusive=True, exit_on_error=False, group="log-search")
    def search_whole_log(self, gen: int, run_dir: str, term: str) -> None:
        """Search the whole log on the box (a failure is also reported as usual)."""
        try:
            found = search_log(self.need_transport(), run_dir, term)
        except Exception as exc:
            self.tell(self.LogMatches(gen, None, (term, one_line(str(exc)))))
            raise
        self.tell(self.LogMatches(gen, found))

    def on_log_actions_log_matches(self, message: LogMatches) -> None:
        """Show how many lines of the whole log hold the term."""
        if message.gen != self.gen:
            return
        if message.found is not None:
            self.log_pane.show_box_matches(message.found)
        elif message.failed is not None:
            self.log_pane.box_search_failed(*message.failed)
