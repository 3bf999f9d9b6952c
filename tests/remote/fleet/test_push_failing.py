"""The fleet says which runs' Hub pushes fail (issue 38 item 9): a box's run whose last
push failed (status.json's ``hub`` error, as our trainer writes it) is named in the row's
words, in the table and ``gpurent instances`` alike. Real sshd box, Vast stand-in."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from remote.billing.accounts import Account
from remote.fleet.fleet import list_fleet
from tests.fixtures.fleetbox import known_as
from tests.fixtures.glance_kit import register_run
from tests.fixtures.sshd import SSHServer

REFUSED = "401 Client Error: Unauthorized (Invalid credentials in Authorization header)"


def test_a_run_whose_push_fails_is_named_in_the_fleets_words(provider_standin, box: SSHServer,
                                                             tmp_path: Path) -> None:
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    run = Path(box.home) / "runs" / "exp"
    run.mkdir(parents=True)
    (run / "status.json").write_text(json.dumps({
        "schema_version": 1, "state": "completed", "completed_epochs": 5,
        "total_epochs": 5, "hub": {"error": REFUSED, "epoch": 5, "time": "x"}}))
    register_run(box, run)
    options = dataclasses.replace(known_as(tmp_path, box, f"vast:{iid}"), weights=False)
    account = Account("vast", "default", vast.key, vast.base_url)
    [row] = list_fleet([account], options).rows
    assert row.box is not None, row.unreachable
    said = row.words(0.0)
    assert f"Hub push failing: exp at epoch 5: {REFUSED}" in said, said
    # a push that worked since: nothing said
    (run / "status.json").write_text(json.dumps({
        "schema_version": 1, "state": "completed", "completed_epochs": 5,
        "total_epochs": 5, "hub": {"commit": "abc", "epoch": 5, "repo": "org/exp"}}))
    [row] = list_fleet([account], options).rows
    assert not any("Hub push" in w for w in row.words(0.0))
