"""Runs on a box, from the laptop: read one (``read``), list a project's (``listing``),
one run's status in one exec (``status``), what a box is doing in one exec (``probe``:
GPUs, registered runs, guards, lease), the log's older parts and search (``log``),
launch and start them, stop them, arm the guard, run the box-side checks, put a dataset
on the box (``dataset``), and signal only the processes we recorded (``processes``)."""

from trainer._exports import lazy_exports

__all__, __getattr__ = lazy_exports(__name__, {
    "read": ["console_path", "list_runs", "read_run", "read_status", "run_extras"],
    "listing": ["RunsBook", "box_runs"],
    "status": ["quick_read"],
    "probe": ["BoxReport", "BoxRun", "GpuNow", "probe_box"],
    "log": ["LogChunk", "LogMatches", "older_log", "search_log"],
    "launch": ["ENGINES", "LaunchSpec", "RunIsLive", "apply_box_paths", "box_paths",
               "build_command", "check_arg", "launch_run", "make_spec"],
    "start": ["START_WAIT", "CannotStart", "hub_reachable", "start_run"],
    "stop": ["stop_run"],
    "guard": ["GuardError", "GuardState", "NOTIFY_FORMATS", "account_key_warning",
              "acknowledge_alarm", "arm_guard",
              "disarm_guard", "notify_lines", "parse_when", "read_guard"],
    "dataset": ["StageFailed", "check_stage_args", "shapes_dataset", "stage_dataset"],
    "checks": ["BoxToolFailed", "ProbeCancelled", "cancel_probe", "doctor", "new_probe_id",
               "preflight", "profile"],
})
