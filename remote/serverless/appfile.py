"""The Modal app a launch generates: a real Python file, kept under the laptop's state
(``STATE/modal/APP.py``), shown in the launch preview and run with ``modal run --detach``.

The file holds no secret: the Hub token reaches the container from a Modal Secret (its
``HF_TOKEN``), and the function hands it to the trainer on stdin as on a box. The run
lives on the runs Volume (``/runs/APP/RUN``), the Hugging Face cache on the cache Volume
(``HF_HOME=/cache/hf``); the dataset is a path already in a Volume, or a Hub dataset
repo's tar that the function stages into the cache Volume first (once). The function runs the
doctor on the dataset, then trains, and commits the runs Volume after each write of
``status.json`` (outside the container Modal shows only committed changes) and at the
end. A timeout is always given, finite and within Modal's 1 s to 24 h.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: Modal's bounds on a function's ``timeout`` (per attempt): 1 second to 24 hours.
MAX_TIMEOUT = 24 * 3600
#: The Volumes every gpurent app mounts: the runs (one folder per app) and the cache.
RUNS_VOLUME = "gpurent-runs"
CACHE_VOLUME = "gpurent-cache"
RUNS_MOUNT = "/runs"
CACHE_MOUNT = "/cache"
#: The Modal Secret whose ``HF_TOKEN`` the run pushes with (``modal secret create``).
HUB_SECRET = "gpurent-hf"
#: The tag that marks an app as launched through gpurent (and names Modal's spend per run).
RUN_TAG = "gpurent_run"
#: Modal's GPU names (``gpu=``), as its docs list them; ``cpu`` asks for none.
GPUS = ("T4", "L4", "A10G", "A10", "L40S", "A100", "A100-40GB", "A100-80GB", "H100",
        "H100!", "H200", "B200", "cpu")
#: A line the app prints once its function is spawned: the launcher reads the app id here.
SPAWNED = "gpurent-modal-spawned"
#: What a probe measures: a few real steps and a little validation (``trainer profile``).
PROBE_ARGS = ("steps=8", "warmup=2")
_APP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,62}")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)([smhd]?)")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_timeout(text: str | None) -> int:
    """A ``timeout=`` value (``4h``, ``90m``, ``3600``) in whole seconds; ``ValueError``
    with a one-line reason when missing, zero or past Modal's 24 h."""
    if text is None or not text.strip():
        raise ValueError("timeout= is required for a Modal run (e.g. timeout=4h): a "
                         "function without one could bill until Modal's 24 h limit")
    m = _DURATION.fullmatch(text.strip().lower())
    if m is None:
        raise ValueError(f"timeout={text!r} is not a duration such as 4h, 90m or 3600s")
    seconds = round(float(m.group(1)) * _UNITS[m.group(2)])
    if seconds < 1:
        raise ValueError("timeout=0 would end the run at once: give at least 1s (e.g. 4h)")
    if seconds > MAX_TIMEOUT:
        raise ValueError(f"timeout={text} is more than Modal's limit of 24h per attempt")
    return seconds


def check_app_name(name: str) -> str:
    """``name`` when Modal and a file name can both take it; ``ValueError`` otherwise."""
    if not _APP_NAME.fullmatch(name):
        raise ValueError(f"modal:{name!r}: an app name is letters, digits, - and _ "
                         "(at most 63, starting with a letter or digit)")
    return name


def check_gpu(gpu: str) -> str | None:
    """Modal's name for ``gpu=`` (``None`` for ``cpu``); ``ValueError`` for another."""
    base = gpu.split(":", 1)[0]
    if base not in GPUS and base.upper() not in GPUS:
        raise ValueError(f"gpu={gpu!r} is not one of Modal's GPUs ({', '.join(GPUS)})")
    return None if base.lower() == "cpu" else gpu.upper() if base.upper() in GPUS else gpu


@dataclass(frozen=True)
class ModalSpec:
    """What to launch: app ``app`` training run ``run`` with ``args`` (``key=value``
    words of our trainer, ``data=`` a path in a Volume, which ``stage_repo``'s tar fills
    first when given), on ``gpu`` (``None``: CPU) for at
    most ``timeout`` seconds; ``hub``: the Hub repo to push to ("" for none);
    ``hub_endpoint``: the Hub's address when not huggingface.co."""

    app: str
    run: str
    args: tuple[str, ...]
    gpu: str | None
    timeout: int
    data: str = ""
    hub: str = ""
    hub_endpoint: str = ""
    #: A Hub dataset repo's tar to stage into the cache Volume first (once): ``ORG/NAME``
    #: and the file's path in it ("" for none).
    stage_repo: str = ""
    stage_file: str = ""
    python: str = "3.11"
    torch: str = "torch==2.13.0"
    #: A probe's id: the function measures a few steps (``trainer profile``) and writes
    #: the report to ``probe_report`` instead of training ("" for a training run).
    probe: str = ""

    @property
    def project(self) -> str:
        """The project directory in the runs Volume (the run is ``project/run``)."""
        return self.app

    @property
    def run_dir(self) -> str:
        """The run's directory in the runs Volume."""
        return f"{self.app}/{self.run}"

    @property
    def probe_report(self) -> str:
        """Where a probe's report lands in the runs Volume ("" for a training run)."""
        return f"{self.app}/probe-{self.probe}.json" if self.probe else ""


def stage_words(text: str) -> tuple[str, str, str]:
    """``stage=ORG/NAME/FILE.tar``: the repo, the file and where the cache Volume keeps
    it (``/cache/datasets/ORG--NAME``); ``ValueError`` when malformed."""
    parts = text.strip("/").split("/")
    if len(parts) < 3 or not all(parts):
        raise ValueError(f"stage={text!r}: give the Hub dataset repo and the tar in it, "
                         "stage=ORG/NAME/FILE.tar")
    repo = "/".join(parts[:2])
    return repo, "/".join(parts[2:]), f"{CACHE_MOUNT}/datasets/{repo.replace('/', '--')}"


def render(spec: ModalSpec) -> str:
    """The app file's text for ``spec``."""
    return TEMPLATE.format(
        doc=f"gpurent: Modal app {spec.app!r}, run {spec.run!r} (generated by gpurent launch)",
        app=spec.app, run=spec.run, gpu=spec.gpu, timeout=spec.timeout,
        args=list(spec.args), data=spec.data, hub=spec.hub,
        endpoint=spec.hub_endpoint, runs_volume=RUNS_VOLUME, cache_volume=CACHE_VOLUME,
        runs=RUNS_MOUNT, cache=CACHE_MOUNT,
        secret=HUB_SECRET if spec.hub or spec.stage_repo else "",
        stage_repo=spec.stage_repo, stage_file=spec.stage_file,
        tag=RUN_TAG, spawned=SPAWNED, python=spec.python, torch=spec.torch,
        probe=spec.probe, probe_args=list(PROBE_ARGS),
        secret_words=f"the Hub token comes from the Modal Secret {HUB_SECRET!r}"
        if spec.hub or spec.stage_repo else "the run uses no Hub token")


TEMPLATE = '''"""{doc!s}.

No secret is in this file: {secret_words}.
"""
import os
import signal
import subprocess
import sys
import time

import modal

APP_NAME = {app!r}
RUN = {run!r}
GPU = {gpu!r}
TIMEOUT = {timeout!r}
ARGS = {args!r}
DATA = {data!r}
HUB = {hub!r}
HF_ENDPOINT = {endpoint!r}
RUNS = {runs!r}
CACHE = {cache!r}
HUB_SECRET = {secret!r}
STAGE_REPO = {stage_repo!r}
STAGE_FILE = {stage_file!r}
#: A probe: measure a few steps, write the report, train nothing ("" to train).
PROBE = {probe!r}
PROBE_ARGS = {probe_args!r}
#: Seconds the trainer gets to save last.pt after Modal's stop (within Modal's grace).
STOP_GRACE = 20

app = modal.App(APP_NAME, tags={{{tag!r}: RUN}})
image = (modal.Image.debian_slim(python_version={python!r})
         .pip_install({torch!r}, "numpy", "pillow", "pyyaml", "psutil", "huggingface_hub")
         .add_local_python_source("trainer"))
runs = modal.Volume.from_name({runs_volume!r}, create_if_missing=True)
cache = modal.Volume.from_name({cache_volume!r}, create_if_missing=True)


@app.function(image=image, gpu=GPU, timeout=TIMEOUT, volumes={{RUNS: runs, CACHE: cache}},
              secrets=[modal.Secret.from_name(HUB_SECRET)] if HUB_SECRET else [])
def train() -> int:
    """Check the dataset, train (or probe), and commit the runs Volume after each status
    write."""
    env = dict(os.environ, HF_HOME=CACHE + "/hf")
    if HF_ENDPOINT:
        env["HF_ENDPOINT"] = HF_ENDPOINT
    token = env.pop("HF_TOKEN", "")
    project = RUNS + "/" + APP_NAME
    os.makedirs(project, exist_ok=True)
    if STAGE_REPO:  # once: a second launch finds the tar staged and does nothing
        dest = CACHE + "/datasets/" + STAGE_REPO.replace("/", "--")
        words = ["--token-stdin"] if token else []
        subprocess.run([sys.executable, "-m", "trainer", "stage", STAGE_REPO, STAGE_FILE,
                        "--dest", dest, *words], env=env, check=True,
                       input=(token + "\\n").encode() if token else None)
        cache.commit()
    if DATA:
        doctor = subprocess.run([sys.executable, "-m", "trainer", "doctor", DATA], env=env)
        if doctor.returncode:
            print("gpurent: the dataset doctor refused " + DATA + " (its findings above)",
                  flush=True)
            return doctor.returncode
    words = [*ARGS, "project=" + project, "name=" + RUN]
    if DATA:
        words.append("data=" + DATA)
    if PROBE:  # the report, not a run: what the launch form proposes a timeout from
        report = project + "/probe-" + PROBE + ".json"
        done = subprocess.run([sys.executable, "-m", "trainer", "profile", *words,
                               *PROBE_ARGS, "--out", report], env=env)
        runs.commit()
        return done.returncode
    if HUB:
        words.append("hub=" + HUB)
        env["GPURENT_HUB_TOKEN_STDIN"] = "1"
    proc = subprocess.Popen([sys.executable, "-m", "trainer", "train", *words], env=env,
                            stdin=subprocess.PIPE)
    proc.stdin.write((token + "\\n").encode() if HUB else b"")
    proc.stdin.close()
    status = os.path.join(project, RUN, "status.json")
    seen = None
    try:
        while True:
            done = proc.poll() is not None
            try:
                stamp = os.stat(status).st_mtime_ns
            except OSError:
                stamp = None
            if stamp != seen or done:
                seen = stamp
                runs.commit()
            if done:
                return proc.returncode
            time.sleep(1.0)
    except KeyboardInterrupt:  # Modal's stop: the trainer stops gracefully, then a commit
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
        runs.commit()
        raise


@app.local_entrypoint()
def main() -> None:
    """Spawn the training function and say the app id; `modal run --detach` keeps it
    running once this returns."""
    call = train.spawn()
    print({spawned!r}, app.app_id, call.object_id, flush=True)
'''
