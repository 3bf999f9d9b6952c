"""``trainer.guard.lease``: the guard ends the billing when the laptop's lease runs out,
by the laptop's deadline moved onto the box's clock; never before, never hours late."""

from __future__ import annotations

import json
import os
import time

from trainer.guard.lease import lease_passed, read_lease


def write(path, **fields) -> float:
    path.write_text(json.dumps({"target": "vast:7", "then": "stop", **fields}))
    return os.stat(path).st_mtime


def test_the_deadline_is_the_seconds_left_from_when_the_box_wrote_it(tmp_path):
    """The laptop's clock is 2 h behind the box's: its ``until`` is in the box's past,
    but the lease has an hour left."""
    path = tmp_path / "lease.json"
    written = write(path, until=time.time() - 3600, left=3600.0)
    assert read_lease(path)["deadline"] == written + 3600.0
    assert lease_passed("vast", "7", now=written + 3599, path=path) is None  # not early
    assert "ran out" in lease_passed("vast", "7", now=written + 3601, path=path)


def test_a_lease_without_seconds_left_keeps_its_deadline(tmp_path):
    path = tmp_path / "lease.json"
    until = time.time() + 600
    write(path, until=until)
    assert lease_passed("vast", "7", now=until - 1, path=path) is None
    assert lease_passed("vast", "7", now=until + 1, path=path) is not None
    assert lease_passed("vast", "8", now=until + 1, path=path) is None  # not this box's


def test_on_the_boxs_own_clock_a_lease_with_minutes_left_has_not_passed(tmp_path):
    """As the guard asks, with no ``now``: the box's clock."""
    path = tmp_path / "lease.json"
    write(path, until=time.time() + 300, left=300.0)
    assert lease_passed("vast", "7", path=path) is None
    write(path, until=time.time() - 1, left=-1.0)
    assert lease_passed("vast", "7", path=path) is not None


def test_a_lease_the_laptop_would_not_write_is_no_lease(tmp_path):
    """The guard and the laptop read a lease with one parser (``parse_lease``): a
    deadline that is no number (NaN) or an ending that is neither stop nor destroy is
    no lease, and the guard never acts on it."""
    path = tmp_path / "lease.json"
    path.write_text('{"target": "vast:7", "then": "stop", "until": NaN}')
    assert read_lease(path) is None
    assert lease_passed("vast", "7", path=path) is None
    write(path, until=time.time() - 60, then="reboot")
    assert read_lease(path) is None
    assert lease_passed("vast", "7", path=path) is None
