"""Render the glance page's screenshots (``glance-phone.png``, ``glance-run.png``) from
real runs, in Debian's Chromium at a phone's size (390x844).

A run of the built-in trainer is trained for real on the CPU to its end, a second one
trains live while the page is shot; both sit on a real OpenSSH server on 127.0.0.1 (the
test harness's ``tests.fixtures.sshd``), reached as a Vast instance of the harness's
API stand-in (never the real provider). A RunPod instance is stopped, and a Lambda
instance whose address answers nothing holds a run launched from this laptop: the page
says when it was last reached. ``gpurent glance``'s own code serves it all.

    .venv/bin/python screenshots/make_glance_screenshots.py [--out screenshots]
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fixtures import glance_kit as kit  # noqa: E402
from tests.fixtures.providers_standin import ProviderStandin  # noqa: E402
from tests.fixtures.sshd import free_port, make_server  # noqa: E402
from trainer import runfiles  # noqa: E402


def say(text: str) -> None:
    """Progress on stderr."""
    print(f"[glance screenshots] {text}", file=sys.stderr, flush=True)


def epochs_done(run_dir: Path) -> int:
    """Completed epochs according to status.json."""
    return runfiles.read_status(run_dir).get("completed_epochs") or 0


def main() -> int:
    """Train, serve, shoot."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "screenshots"))
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpurent-glance-shots-") as tmp:
        work = Path(tmp)
        for var, sub in (("GPURENT_DATA_DIR", "data"), ("XDG_STATE_HOME", "state"),
                         ("GPURENT_RUN_REGISTRY", "runs.txt"),
                         ("GPURENT_CACHE_DIR", "box-cache"), ("HF_HOME", "hf")):
            os.environ[var] = str(work / sub)
        os.environ["HF_TOKEN"] = ""
        shoot(out, work)
    return 0


def shoot(out: Path, work: Path) -> None:
    """Everything between the dataset and the two PNGs."""
    from remote.billing import Account
    from remote.billing.intents import RunIntent, observe, want_running
    from remote.fleet import FleetOptions
    from remote.glance import open_glance
    from remote.transport.local import LocalTransport

    t = LocalTransport()
    say("generating the shapes dataset")
    t.run(f"{t.trainer_prefix} -m trainer shapes {work / 'shapes'} --train 32 --val 8 "
          "--imgsz 64", timeout=300)
    data = work / "shapes" / "data.yaml"
    box = make_server(work / "box")
    project = Path(box.home) / "runs" / "detector"
    project.mkdir(parents=True)
    say("training a run to its end (12 epochs)")
    kit.train(project, "baseline", data, epochs=12)
    say("training the live run")
    live = kit.train(project, "bigger-lr", data, epochs=300, wait=False)
    for run in (project / "baseline", project / "bigger-lr"):
        kit.register_run(box, run)
    vast, runpod, lam = (ProviderStandin(p) for p in ("vast", "runpod", "lambda"))
    iid = vast.add_instance(gpu_name="RTX 4090", num_gpus=2)
    vast.set_address(iid, box.host, box.port)
    vast.started(iid, 2 * 3600 + 14 * 60)
    runpod.add_instance(status="EXITED", cost=0)
    lid = lam.add_instance()
    lam.set_address(lid, "127.0.0.1", free_port(), user="ubuntu")
    want_running(f"lambda:{lid}", RunIntent("sweep-3", "runs", "me/sweep"))
    observe(f"lambda:{lid}", time.time() - 47 * 60, 1.10,
            {"sweep-3": {"epoch": 31, "health": "live"}})
    known = work / "known_hosts"
    known.write_text(f"vast:{iid} {box.host_key_line}\n")
    options = FleetOptions(timeout=6, ssh_options={
        "known_hosts": str(known), "identity_files": (box.key_path,), "allow_agent": False,
        "ssh_config": box.ssh_config})
    accounts = [Account("vast", "default", vast.key, vast.base_url),
                Account("runpod", "lab", runpod.key, runpod.base_url),
                Account("lambda", "default", lam.key, lam.base_url)]
    try:
        kit.wait_until(lambda: epochs_done(project / "bigger-lr") >= 5, 900,
                       "five epochs of the live run", poll=1.0)
        glance = open_glance(options, port=0, every=3.0, accounts=lambda: accounts).start(
            record=False)
        served = kit.Served(None, glance.url)  # type: ignore[arg-type]
        try:
            def both_read() -> list | None:
                got = kit.api(served, "/api/runs")["runs"]
                return got if sum(r["reached"] for r in got) == 2 else None

            runs = kit.wait_until(both_read, 120, "both runs read")
            live_id = next(r["id"] for r in runs if r["name"] == "bigger-lr")
            say("shooting")
            kit.screenshot(glance.url, out / "glance-phone.png")
            kit.screenshot(f"{glance.url}&run={live_id}", out / "glance-run.png")
            say(f"wrote {out / 'glance-phone.png'} and {out / 'glance-run.png'}")
        finally:
            glance.close()
    finally:
        os.killpg(live.pid, signal.SIGTERM)  # a graceful stop
        live.wait(120)
        for standin in (vast, runpod, lam):
            standin.close()
        box.sshd.stop()


if __name__ == "__main__":
    sys.exit(main())
