"""Runs on a box, from the laptop: read one (``read``), list a project's (``listing``),
one run's status in one exec (``status``), what a box is doing in one exec (``probe``:
GPUs, registered runs, guards, lease), the log's older parts and search (``log``),
launch and start them, stop them, arm the guard, run the box-side checks, put a dataset
on the box (``dataset``), and signal only the processes we recorded (``processes``)."""

from typing import TYPE_CHECKING

from trainer._exports import typed_exports

if TYPE_CHECKING:  # the face, read by type checkers and by typed_exports
    from remote.runs.checks import (
        BoxToolFailed,
        EstimateCancelled,
        cancel_estimate,
        doctor,
        new_estimate_id,
        preflight,
        profile,
    )
    from remote.runs.dataset import StageFailed, check_stage_args, shapes_dataset, stage_dataset
    from remote.runs.guard import (
        NOTIFY_FORMATS,
        GuardError,
        GuardState,
        account_key_warning,
        acknowledge_alarm,
        arm_guard,
        disarm_guard,
        notify_lines,
        parse_when,
        read_guard,
    )
    from remote.runs.launch import (
        ENGINES,
        LaunchSpec,
        RunIsLive,
        apply_box_paths,
        box_paths,
        build_command,
        check_arg,
        launch_run,
        make_spec,
    )
    from remote.runs.listing import RunsBook, box_runs
    from remote.runs.log import LogChunk, LogMatches, older_log, search_log
    from remote.runs.probe import BoxReport, BoxRun, GpuNow, probe_box
    from remote.runs.read import (
        RunInfo,
        console_path,
        list_runs,
        read_run,
        read_status,
        run_extras,
    )
    from remote.runs.start import START_WAIT, CannotStart, hub_reachable, start_run
    from remote.runs.status import quick_read
    from remote.runs.stop import stop_run

__all__, __getattr__ = typed_exports(__name__, __file__)
