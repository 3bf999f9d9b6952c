"""One start of the TUI for ``bench/connect_bench.py``: what ``gpurent-tui ARGS`` does
(``tui.main``: the arguments, the early SSH connection, then the app), headless, printing
``EVENT MONOTONIC_TIME`` as the run's status, the whole runs list (``--want-runs N``) and
the log's last line (``--want-log TEXT``) reach the screen, then ``done``. Nothing else
is imported before the app, so the start is the real one.

    python bench/tui_start.py HOST --project P [--run R] [--want-runs N] [--want-log TEXT]
"""

import sys
import time


def _take(argv: list[str], flag: str) -> str:
    if flag not in argv:
        return ""
    at = argv.index(flag)
    value = argv[at + 1]
    del argv[at:at + 2]
    return value


def main() -> None:
    """Start the app and report (see the module doc)."""
    argv = sys.argv[1:]
    want_runs, want_log = int(_take(argv, "--want-runs") or 0), _take(argv, "--want-log")
    from tui.main import build_parser, connect_early, specs_from_args

    parser = build_parser()
    specs = connect_early(specs_from_args(parser.parse_args(argv), parser))
    import asyncio

    from tui.app import GpurentApp
    from tui.box.view import BoxView
    from tui.widgets.runs import RunsList

    said: set[str] = set()
    wanted = {"status"} | ({"runs"} if want_runs else set()) | ({"log"} if want_log else set())

    def say(event: str) -> None:
        if event not in said:
            said.add(event)
            print(f"{event} {time.monotonic():.6f}", flush=True)

    async def run() -> None:
        app = GpurentApp(specs)
        async with app.run_test(size=(160, 46), headless=True) as pilot:
            box = app.query_one(BoxView)
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and not wanted <= said:
                if box.state.status is not None:
                    say("status")
                if want_runs and len(box.query_one(RunsList).runs) >= want_runs:
                    say("runs")
                lines = box.log_pane.log.lines
                if want_log and lines and want_log in lines[-1]:
                    say("log")
                await pilot.pause(0.005)
        print("done", flush=True)

    asyncio.run(run())


if __name__ == "__main__":
    main()
