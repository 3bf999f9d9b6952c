"""Money and instances: which provider instance a box is (``providers``, ``identity``,
``address``), what it costs running, stopped or destroyed (``cost``), the gate that stops
or destroys it only when the weights are safe (``teardown``), starting it again to
resume a run (``resume``); every instance of every account (``accounts``, ``fleet``),
idle ones priced (``idle``), leases (``leases``) and the off-box ``watchdog``; what the
user wants running (``intents``) and a run moved to another box (``move``)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "cost": ["CostReport", "cost_report", "format_report", "money", "rate"],
    "providers": ["ConfigError", "InstanceRef", "InstanceTarget", "ProviderError", "can_stop",
                  "notify_config", "parse_instance_target", "provider_for", "resolve_api_key",
                  "resolve_base_url", "resolve_instance", "sends_account_key",
                  "split_instance_target"],
    "identity": ["WrongInstance", "box_address", "this_machine"],
    "address": ["Locator", "connector_to"],
    "arming": ["Armed", "GuardOrder", "arm", "disarm"],
    "teardown": ["DestroyQuestion", "GateRefused", "UnknownSafety", "check_destroy",
                 "destroy_question", "resolve_safety", "run_safety", "run_teardown",
                 "warning_for"],
    "resume": ["Resumed", "Step", "resume_run"],
    "accounts": ["NO_ACCOUNTS", "Account", "NoAccounts", "configured_accounts"],
    "fleet": ["Fleet", "FleetOptions", "FleetRow", "list_fleet"],
    "fleetrows": ["NOT_RUNNING", "SORTS", "haystack", "notes", "nothing_to_stop",
                  "provider_state", "row_key", "shown", "state_words"],
    "lastknown": ["keep_last_known"],
    "idle": ["Idle"],
    "leases": ["Lease", "change_lease", "clear_lease", "lease_for", "leases", "parse_duration",
               "set_lease", "told_words", "write_on_box"],
    "watchdog": ["Decision", "Rules", "watch_once"],
    "watchrecords": ["NO_WATCHDOG", "WatchdogPass", "last_pass"],
    "intents": ["RunIntent", "set_guard", "want_running"],
    "move": ["Moving", "move_run", "new_box_rate"],
    "interrupted": ["taken_words"],
})
