"""Money and instances: which provider instance a box is (``providers``, ``identity``,
``address``), what it costs running, stopped or destroyed (``cost``), the gate that stops
or destroys it only when the weights are safe (``teardown``), starting it again to
resume a run (``resume``); every instance of every account (``accounts``, ``fleet``),
idle ones priced (``idle``), leases (``leases``) and the off-box ``watchdog``; what the
user wants running (``intents``) and a run moved to another box (``move``)."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.billing.accounts import NO_ACCOUNTS, Account, NoAccounts, configured_accounts
    from remote.billing.address import Locator, connector_to
    from remote.billing.arming import Armed, GuardOrder, arm, disarm
    from remote.billing.cost import CostReport, cost_report, format_report, money, rate
    from remote.billing.fleet import Fleet, FleetOptions, FleetRow, list_fleet
    from remote.billing.fleetrows import (
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
    from remote.billing.identity import WrongInstance, box_address, this_machine
    from remote.billing.idle import Idle
    from remote.billing.intents import RunIntent, set_guard, want_running
    from remote.billing.interrupted import taken_words
    from remote.billing.lastknown import keep_last_known
    from remote.billing.leases import (
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
    from remote.billing.move import Moving, move_run, new_box_rate
    from remote.billing.providers import (
        ConfigError,
        InstanceRef,
        InstanceTarget,
        ProviderError,
        can_stop,
        notify_config,
        parse_instance_target,
        provider_for,
        resolve_api_key,
        resolve_base_url,
        resolve_instance,
        sends_account_key,
        split_instance_target,
    )
    from remote.billing.resume import Resumed, Step, resume_run
    from remote.billing.teardown import (
        DestroyQuestion,
        GateRefused,
        UnknownSafety,
        check_destroy,
        destroy_question,
        resolve_safety,
        run_safety,
        run_teardown,
        warning_for,
    )
    from remote.billing.watchdog import Decision, Rules, watch_once
    from remote.billing.watchrecords import NO_WATCHDOG, WatchdogPass, last_pass

__all__, __getattr__ = typed_exports(__name__, __file__)
