"""Render the README screenshots from real run directories.

A real (tiny, CPU) training run of the built-in trainer is launched through
``remote.runs.launch`` on ``LocalTransport`` and watched live by the app; a second run is
killed with SIGKILL to show a dead run; the profiler card comes from a real
``trainer profile`` run; the destroy dialog talks to the local Vast API stand-in (the
test harness's, never the real provider). The SSH states a user meets first come from
a real OpenSSH server on 127.0.0.1 (the test harness's ``tests.fixtures.sshd``, serving
this machine's project): its unknown host key asked about, the live run once trusted
without ``--price`` (``$?/h``); and from two ports: one that accepts and never answers
(connecting) and one nothing listens on (never reached). Writes SVGs with Textual's
``save_screenshot`` and PNGs next to them when ``cairosvg`` is installed.

    .venv/bin/python screenshots/make_screenshots.py [--out screenshots]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shlex
import signal
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from remote.runs.launch import LaunchSpec, launch_run  # noqa: E402
from remote.transport.local import LocalTransport  # noqa: E402
from tests.fixtures.providers_standin import ProviderStandin  # noqa: E402
from tests.fixtures.sshd import free_port, make_server  # noqa: E402
from trainer import runfiles  # noqa: E402
from tui.app import GpurentApp  # noqa: E402
from tui.box.view import BoxView  # noqa: E402
from tui.dialogs.confirm import ConfirmDialog  # noqa: E402
from tui.dialogs.destroy import DestroyDialog  # noqa: E402
from tui.dialogs.launch import LaunchForm  # noqa: E402
from tui.dialogs.profile import ProfileCard  # noqa: E402
from tui.dialogs.quit import QuitDialog  # noqa: E402
from tui.spec import BoxSpec  # noqa: E402
from tui.widgets.metrics import MetricsPane  # noqa: E402
from tui.widgets.runs import RunsList  # noqa: E402

SMALL, LARGE = (80, 24), (160, 48)
TRAIN = {"model": "n", "imgsz": "64", "batch": "8", "workers": "0", "device": "cpu"}


def say(text: str) -> None:
    """Progress on stderr."""
    print(f"[screenshots] {text}", file=sys.stderr, flush=True)


def wait_for(check, timeout: float, what: str) -> None:
    """Poll ``check`` until it holds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.5)


def epochs_done(run_dir: Path) -> int:
    """Completed epochs according to status.json."""
    return runfiles.read_status(run_dir).get("completed_epochs") or 0


def prepare(work: Path) -> tuple[Path, Path, dict]:
    """Dataset, a dead run, a live run and a profile report; returns (project, data, report)."""
    t = LocalTransport()
    data = work / "shapes"
    say("generating the shapes dataset")
    t.run(f"{t.trainer_prefix} -m trainer shapes {shlex.quote(str(data))} --train 32 "
          "--val 8 --imgsz 64", timeout=300)
    yaml = str(data / "data.yaml")
    project = work / "runs"
    say("training a run that will be killed (dead run)")
    dead = launch_run(t, LaunchSpec("trainer", str(project), "exp1",
                                {**TRAIN, "data": yaml, "epochs": "30"}))
    wait_for(lambda: epochs_done(project / "exp1") >= 2, 600, "two epochs of exp1")
    os.killpg(dead.pid, signal.SIGKILL)  # like the OOM killer: status stays 'running'
    say("training the live run")
    launch_run(t, LaunchSpec("trainer", str(project), "exp2",
                         {**TRAIN, "data": yaml, "epochs": "400", "save_period": "5"}))
    say("profiling")
    out = work / "profile.json"
    result = t.run(f"{t.trainer_prefix} -m trainer profile model=n data={shlex.quote(yaml)} "
                   f"imgsz=64 batch=8 workers=0 device=cpu steps=6 warmup=2 price=1.25 "
                   f"project={shlex.quote(str(work / 'profiles'))} name=p1 "
                   f"--out {shlex.quote(str(out))} --json", timeout=600)
    report = json.loads(result.stdout)
    wait_for(lambda: epochs_done(project / "exp2") >= 4, 900, "four epochs of exp2")
    return project, data, report


async def settle(pilot, check, timeout: float = 120.0) -> None:
    """Let the app run until ``check()`` holds; give up after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for the app")
        await pilot.pause(0.2)


async def shoot(out: Path, project: Path, data: Path, report: dict) -> list[Path]:
    """Open the app on the project and save each screen at 160x48, the main ones at
    80x24 too (the smallest terminal the layout is made for)."""
    standin = ProviderStandin("vast")
    iid = standin.add_instance()
    os.environ["VAST_API_KEY"] = standin.key
    spec = BoxSpec("local", "local", project=str(project), run="exp2", price=1.25,
                   provider="vast", instance=iid, provider_url=standin.base_url)
    app = GpurentApp([spec])
    saved: list[Path] = []

    async def save(pilot, name: str, sizes=(LARGE, SMALL)) -> None:
        for width, height in sizes:
            await pilot.resize_terminal(width, height)
            await pilot.pause(0.6)
            path = out / f"{name}-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
            say(f"wrote {path}")
        await pilot.resize_terminal(*LARGE)

    async with app.run_test(size=LARGE) as pilot:
        box = app.query_one(BoxView)
        await settle(pilot, lambda: box.state.status is not None
                     and box.state.instance is not None
                     and len(box.query_one(MetricsPane).rows) >= 4
                     and box.log_pane.log.lines)
        await settle(pilot, lambda: box.state.safety is not None)
        await pilot.pause(2.5)  # a CPU/RAM sample (no GPU on this machine)
        await save(pilot, "main")
        await pilot.press("l")
        await settle(pilot, lambda: isinstance(app.screen, LaunchForm))
        form = app.screen
        form.query_one("#f-data").value = str(data / "data.yaml")
        await settle(pilot, lambda: "doctor" in str(form.query_one("#findings").content),
                     timeout=300)
        # The live run trains on this box: the form says why it does not probe beside it.
        await settle(pilot, lambda: "estimate" in str(form.query_one("#form-status").content)
                     and "estimating" not in str(form.query_one("#form-status").content),
                     timeout=300)
        await save(pilot, "launch-form")
        await pilot.press("escape")
        await app.push_screen(ProfileCard(report))
        await pilot.pause(0.3)
        await save(pilot, "profile-card", (LARGE,))
        await pilot.press("escape")
        await pilot.press("D")
        await settle(pilot, lambda: isinstance(app.screen, DestroyDialog))
        await pilot.pause(0.3)
        await save(pilot, "destroy-dialog", (LARGE,))
        await pilot.press("escape")
        await pilot.press("q")
        await settle(pilot, lambda: isinstance(app.screen, QuitDialog))
        await save(pilot, "quit", (SMALL,))
        await pilot.press("escape")
        runs = box.query_one(RunsList)
        runs.focus()
        runs.highlighted = [r.name for r in runs.runs].index("exp1")
        await pilot.press("enter")
        await settle(pilot, lambda: box.state.status is not None
                     and box.state.status.health.verdict == "dead")
        await pilot.pause(0.5)
        await save(pilot, "dead-run")
        box.state.run_dir = f"{project}/exp2"
        box.run_stop.stop()  # end the live run gracefully before leaving
        await pilot.pause(3)
    standin.close()
    return saved


class SilentPort:
    """A TCP port that accepts connections and never says anything: an SSH server that
    has not started answering yet (a box still booting)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.held.append(self.sock.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        """Stop listening and drop what was accepted."""
        self.sock.close()
        for conn in self.held:
            conn.close()


async def shoot_first_contact(out: Path, project: Path, work: Path) -> list[Path]:
    """The SSH states a user meets first (see the module doc), each its own app: never
    reached, connecting, the host-key question, and the live run once trusted ($?/h:
    no --price, no provider)."""
    saved: list[Path] = []

    async def save(app, pilot, name: str, sizes=(LARGE,)) -> None:
        for width, height in sizes:
            await pilot.resize_terminal(width, height)
            await pilot.pause(0.6)
            path = out / f"{name}-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
            say(f"wrote {path}")
        await pilot.resize_terminal(*LARGE)

    server = make_server(work / "sshd")
    known = work / "known_hosts"  # empty: the box's host key is unknown
    known.touch()
    options = (("known_hosts", str(known)), ("identity_files", (server.key_path,)),
               ("allow_agent", False), ("ssh_config", server.ssh_config))

    def spec(port: int, **more) -> BoxSpec:
        return BoxSpec("ssh", f"{server.user}@127.0.0.1", port=port, project=str(project),
                       ssh_options=options, **more)

    say("a box nothing answers on")
    app = GpurentApp([spec(free_port())])
    async with app.run_test(size=LARGE) as pilot:
        badge = app.query_one("ConnectionBadge")
        await settle(pilot, lambda: "try 3 in" in str(badge.content))
        await save(app, pilot, "never-reached")
    silent = SilentPort()
    say("a box whose SSH server does not answer yet")
    app = GpurentApp([spec(silent.port)])
    async with app.run_test(size=LARGE) as pilot:
        badge = app.query_one("ConnectionBadge")
        await settle(pilot, lambda: f"connecting to 127.0.0.1:{silent.port}"
                     in str(badge.content))
        await save(app, pilot, "connecting")
    silent.close()
    say("the real sshd: its host key is unknown")
    app = GpurentApp([spec(server.port, run="exp2")])
    async with app.run_test(size=LARGE) as pilot:
        box = app.query_one(BoxView)
        await settle(pilot, lambda: isinstance(app.screen, ConfirmDialog)
                     and app.focused is not None)
        await save(app, pilot, "host-key", (LARGE, SMALL))
        app.screen.query_one("#confirm").focus()
        await pilot.pause()
        await pilot.press("enter")
        await settle(pilot, lambda: box.state.status is not None
                     and box.state.transport is not None
                     and box.state.safety is not None
                     and len(box.query_one(MetricsPane).rows) >= 4
                     and box.log_pane.log.lines and not box.state.activities, timeout=300)
        await pilot.pause(2.5)  # a CPU/RAM sample
        await save(app, pilot, "no-price")
    server.sshd.stop()
    return saved


async def shoot_fleet(out: Path, project: Path, work: Path) -> list[Path]:
    """The fleet screen over three providers' accounts (the test harness's stand-ins):
    a box reached over a real sshd whose runs have ended (idle, priced, its weights
    judged), a stopped instance billing its disk, one whose address answers nothing,
    and one its provider took away while a run of this laptop trained there."""
    from remote.billing import Account
    from remote.billing.intents import RunIntent, want_running
    from remote.fleet import FleetOptions, list_fleet
    from tui.screens.fleet import FleetScreen

    server = make_server(work / "fleet-box")
    registry = Path(server.home) / ".cache" / "gpurent" / "runs.txt"
    registry.parent.mkdir(parents=True, exist_ok=True)
    registry.write_text("".join(f"{run}\n" for run in sorted(project.iterdir())
                                if (run / runfiles.STATUS_FILE).exists()
                                and run.name != "exp2"))  # exp2: still training
    vast, runpod, lam = (ProviderStandin(p) for p in ("vast", "runpod", "lambda"))
    idle = vast.add_instance(dph_base=0.45, storage_total_cost=0.06,
                             gpu_name="RTX 4090", num_gpus=2)
    vast.set_address(idle, server.host, server.port)
    vast.started(idle, 2 * 3600 + 47 * 60)
    stopped = vast.add_instance(dph_base=1.1, storage_total_cost=0.12, gpu_name="A100 SXM4")
    vast.instances[stopped].update(actual_status="exited", intended_status="stopped")
    away = runpod.add_instance()
    runpod.started(away, 5 * 3600)
    want_running(f"runpod:{away}", RunIntent("detector", "/workspace/runs", "me/detector"))
    runpod.take_away(away)
    silent = lam.add_instance()
    lam.set_address(silent, "127.0.0.1", free_port(), user="ubuntu")
    known = work / "fleet_known_hosts"
    known.write_text(f"vast:{idle} {server.host_key_line}\n")
    options = FleetOptions(timeout=6, ssh_options={
        "known_hosts": str(known), "identity_files": (server.key_path,),
        "allow_agent": False, "ssh_config": server.ssh_config})
    accounts = [Account("vast", "default", vast.key, vast.base_url),
                Account("runpod", "team", runpod.key, runpod.base_url),
                Account("lambda", "default", lam.key, lam.base_url)]
    saved: list[Path] = []
    say("the fleet: three accounts, five instances")
    app = GpurentApp([], autoconnect=False)
    app.fleet_lister = lambda: list_fleet(accounts, options)
    async with app.run_test(size=LARGE) as pilot:
        await settle(pilot, lambda: isinstance(app.screen, FleetScreen)
                     and app.screen.fleet is not None)
        for width, height in (LARGE, SMALL):
            await pilot.resize_terminal(width, height)
            await pilot.pause(0.6)
            path = out / f"fleet-{width}x{height}.svg"
            app.save_screenshot(str(path))
            saved.append(path)
            say(f"wrote {path}")
    for standin in (vast, runpod, lam):
        standin.close()
    server.sshd.stop()
    return saved


def to_png(paths: list[Path]) -> None:
    """PNG copies for viewers that do not show SVG (needs cairosvg)."""
    try:
        import cairosvg
    except ImportError:
        say("cairosvg is not installed: SVGs only")
        return
    for path in paths:
        cairosvg.svg2png(url=str(path), write_to=str(path.with_suffix(".png")),
                         output_width=1800 if "160x48" in path.name else 1200)


def main() -> int:
    """Build the run directories, shoot, convert."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpurent-shots-") as tmp:
        os.environ["GPURENT_DATA_DIR"] = str(Path(tmp) / "data")
        os.environ["XDG_STATE_HOME"] = str(Path(tmp) / "state")  # what boxes taught us
        # This machine's own runs (a demo's) are not the pictured box's.
        os.environ["GPURENT_RUN_REGISTRY"] = str(Path(tmp) / "runs.txt")
        os.environ["GPURENT_CACHE_DIR"] = str(Path(tmp) / "box-cache")
        project, data, report = prepare(Path(tmp))
        paths = asyncio.run(shoot_first_contact(out, project, Path(tmp)))
        paths += asyncio.run(shoot_fleet(out, project, Path(tmp)))
        paths += asyncio.run(shoot(out, project, data, report))
    to_png(paths)
    return 0


if __name__ == "__main__":
    sys.exit(main())
