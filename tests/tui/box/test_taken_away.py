"""A box tab whose instance the provider took away while the link was down tells the truth
(issue 38 item 2): it says so once, stops watching the dead address, shows what the
provider bills now (not the running price with "spent" rising), the quit dialog no longer
says the run keeps training, and r points at R (start it again and resume) and at the
fleet's m. The instance is the Vast stand-in's; the tab watches a real run directory."""

from __future__ import annotations

import pytest
from textual.widgets import TabbedContent

from remote.watch.events import ConnectionEvent
from tests.fixtures.screen import history
from tests.fixtures.screen import until_true as until
from tui.app import GpurentApp
from tui.box.view import BoxView
from tui.spec import BoxSpec
from tui.words import quit_text

pytestmark = pytest.mark.anyio



async def test_a_taken_away_instance_is_said_and_no_longer_polled(
        run_factory, vast_standin, monkeypatch) -> None:
    iid = vast_standin.add_instance()  # running, $0.4520/h
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    run = run_factory("ux3", done=3, total=30)
    app = GpurentApp([BoxSpec("local", "local", project=str(run.parent), provider="vast",
                              instance=iid, provider_url=vast_standin.base_url)])
    async with app.run_test(size=(160, 40), notifications=True) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None
                    and box.state.transport is not None and box.state.instance is not None)
        assert "$0.45/h" in box.money_text().plain
        assert "keeps training" in quit_text(app.standings()).plain
        vast_standin.take_away(iid)  # the trainer dies with the instance
        # the watcher loses the box (its address answers no more)
        box.watching.deliver(box.state.gen, ConnectionEvent("reconnecting", "timed out",
                                                            attempt=3))
        await until(pilot, lambda: box.state.taken_away is not None)
        assert "taken away by the provider (Vast says exited" in box.state.taken_away
        await until(pilot, lambda: box.watching.watcher is None)  # no more tries
        await until(pilot, lambda: "taken away" in box.panes.status_row.text.plain)
        tab = app.query_one(TabbedContent).get_tab(box.parent.id)
        await until(pilot, lambda: "■" in tab.label.plain)  # not "● live" any more
        assert "instance not running" in box.state.stale_words()
        assert "R starts it again" in box.panes.status_row.text.plain
        money = box.money_text().plain
        assert "spent" not in money and "vast says it is exited" in money, money
        words = quit_text(app.standings()).plain
        assert "keeps training" not in words and "was taken away" in words, words
        said = [line for line in history(app) if "taken away" in line]
        assert len(said) == 1, said  # said once
        await pilot.press("r")  # nothing to reconnect to: it says what to do instead
        await until(pilot, lambda: any("R starts it again" in line
                                       for line in history(app)[-1:]))
        assert box.watching.watcher is None
