"""The fleet: every instance of every account (``fleet``, its rows in ``fleetrows``),
idle ones priced (``idle``), the weights seen on each box (``boxweights``), leases
(``leases``), the guard armed on a box (``arming``), runs taken away by the provider
(``interrupted``), the last answer kept (``lastknown``) and the off-box ``watchdog`` with
its records (``watchrecords``). It stands on ``remote.billing``."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.fleet.arming import Armed, GuardOrder, arm, disarm
    from remote.fleet.fleet import Fleet, FleetOptions, FleetRow, list_fleet
    from remote.fleet.fleetrows import (
        NOT_RUNNING,
        SORTS,
        haystack,
        notes,
        nothing_to_stop,
        provider_state,
        row_key,
        shown,
        state_words,
    )
    from remote.fleet.idle import Idle
    from remote.fleet.interrupted import taken_words
    from remote.fleet.lastknown import keep_last_known
    from remote.fleet.leases import (
        Lease,
        change_lease,
        clear_lease,
        lease_for,
        leases,
        parse_duration,
        set_lease,
        told_words,
        write_on_box,
    )
    from remote.fleet.watchdog import Decision, Rules, watch_once
    from remote.fleet.watchrecords import NO_WATCHDOG, WatchdogPass, last_pass

__all__, __getattr__ = typed_exports(__name__, __file__)
