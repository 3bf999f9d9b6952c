"""Money and instances: which provider instance a box is (``providers``, ``identity``,
``address``), every account (``accounts``) and its canary, what it costs running, stopped
or destroyed (``cost``), the destroy check that stops or destroys it only when the weights
are safe (``teardown``), what the user wants running (``intents``) and the laptop's state
files (``statefile``). The fleet (``remote.fleet``) and resume (``remote.resume``) stand
on it."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.billing.accounts import NO_ACCOUNTS, Account, NoAccounts, configured_accounts
    from remote.billing.address import Locator, connector_to
    from remote.billing.cost import CostReport, cost_report, format_report, money, rate
    from remote.billing.identity import WrongInstance, box_address, this_machine
    from remote.billing.intents import RunIntent, set_guard, want_running
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
    from remote.billing.teardown import (
        DestroyQuestion,
        DestroyRefused,
        UnknownSafety,
        check_destroy,
        destroy_question,
        resolve_safety,
        run_safety,
        run_teardown,
        warning_for,
    )

__all__, __getattr__ = typed_exports(__name__, __file__)
