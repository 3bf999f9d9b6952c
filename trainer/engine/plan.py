"""The plan of a training run: ``key=value`` arguments in the style of ``libreyolo train``,
parsed and checked into a :class:`Plan`. Torch-free at import time.

Everything a user can get wrong (an unknown key, a bad value, a broken ``data.yaml``, a
missing split, an unknown model, an unusable device or checkpoint) is found here, before
a run directory is created; :mod:`trainer.engine.command` reports it as one line on
stderr with exit code 2 and then runs the plan.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.trainargs import PARSERS

#: Keys that a resumed run takes from the command line instead of from the checkpoint
#: (``data``: a run resumed on another box finds its dataset where that box staged it;
#: a dataset with other classes is refused).
RESUME_OVERRIDES = ("data", "epochs", "device", "nproc", "workers", "patience", "save_period",
                    "val_period", "hub", "hub_period", "callbacks")


class UsageError(ValueError):
    """A bad argument, with a one-line message."""


@dataclass
class TrainArgs:
    """The arguments of ``train``, with ``libreyolo train``'s defaults where it has one."""

    model: str = "gpdet-n"
    data: str = ""
    epochs: int = 100
    batch: int = 16
    batch_fraction: float = 0.8
    imgsz: int = 640
    device: str = ""
    nproc: int = 0
    workers: int = 8
    project: str = "runs/train"
    name: str = "exp"
    save_period: int = -1
    resume: bool | str = False
    seed: int = 0
    lr0: float = 0.002
    patience: int = 100
    exist_ok: bool = False
    val_period: int = 1
    hub: str | None = None
    hub_period: int = 0
    amp: bool = True
    callbacks: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The arguments as a JSON-friendly dict (saved in checkpoints and summary)."""
        return dataclasses.asdict(self)


HELP = {
    "model": "gpdet-n | gpdet-s | gpdet-m (or n/s/m), or a .pt checkpoint to fine-tune",
    "data": "path to a YOLO data.yaml (required)",
    "epochs": "number of epochs",
    "batch": "images per step over all devices; -1: the largest power of two that fits",
    "batch_fraction": "batch=-1 fills at most this fraction of GPU memory",
    "imgsz": "square input size in pixels, a multiple of 32",
    "device": "cpu, 0, 0,1,2,3 (one worker per GPU), cuda:0 (empty: first GPU, else cpu)",
    "nproc": "worker processes (0: one per listed GPU; with device=cpu, gloo workers)",
    "workers": "data loader processes (0: load in the training process)",
    "project": "parent folder of run directories",
    "name": "run directory name (name2, name3... when taken, unless exist_ok)",
    "save_period": "also keep weights/epoch_N.pt every N epochs (<= 0: off)",
    "resume": "True to continue project/name from weights/last.pt, or a checkpoint path",
    "seed": "random seed",
    "lr0": "initial learning rate (AdamW)",
    "patience": "stop early once the best epoch is this many epochs old (0: off)",
    "exist_ok": "reuse project/name when it holds a finished run",
    "val_period": "validate every N epochs (and always after the last)",
    "hub": "ORG/NAME: push best.pt to this Hugging Face repo at milestones (HF_TOKEN)",
    "hub_period": "push last.pt and the history every N epochs, and best.pt on each new "
                  "best (0: auto, every epochs/10 epochs, at most 10)",
    "amp": "mixed precision on CUDA (bf16 where supported, else fp16)",
    "callbacks": "module:attr[,module:attr]: functions to call at run events (see docs)",
}


def usage() -> str:
    """Help text for ``train``."""
    defaults = TrainArgs()
    lines = ["usage: python -m trainer train key=value ...", "",
             "Trains a detector and writes the run directory (status.json, metrics.jsonl,",
             "results.csv, summary.json, train.log, weights/).", "", "keys:"]
    for f in dataclasses.fields(TrainArgs):
        lines.append(f"  {f.name + '=' + str(getattr(defaults, f.name)):<24} {HELP[f.name]}")
    lines += ["", "exit codes: 0 completed or stopped, 1 failed, 2 bad arguments or data"]
    return "\n".join(lines)


def parse_args(argv: Sequence[str]) -> tuple[TrainArgs, set[str]]:
    """Parse ``key=value`` tokens; returns the arguments and the keys given explicitly."""
    args = TrainArgs()
    given: set[str] = set()
    for token in argv:
        key, sep, value = token.partition("=")
        key = key.strip().lstrip("-")
        if not sep:
            raise UsageError(f"expected key=value, got {token!r}")
        if key not in PARSERS:
            raise UsageError(f"unknown argument {key!r}; known: {', '.join(PARSERS)}")
        if key in given:
            raise UsageError(f"{key}= given twice")
        try:
            setattr(args, key, PARSERS[key](value))
        except ValueError as exc:
            reason = str(exc) if not str(exc).startswith("invalid literal") else "not a number"
            raise UsageError(f"{key}={value!r}: {reason}") from None
        given.add(key)
    return args, given


@dataclass
class Plan:
    """Everything the engine needs, checked: arguments, data, model source, device."""

    args: TrainArgs
    run_dir: Path
    data: Any  # trainer.datasets.loader.DataConfig
    train_set: Any  # trainer.datasets.loader.YoloDataset
    val_set: Any
    caps: Any  # trainer.engine.device.DeviceCaps
    size: str
    init_checkpoint: dict[str, Any] | None = None  # weights to fine-tune from
    resume_checkpoint: dict[str, Any] | None = None
    uploader_factory: Callable[..., Any] | None = None
    notes: list[str] = field(default_factory=list)
    callbacks: Any = None  # trainer.engine.callbacks.Callbacks
    world_size: int = 1
    world: Any = None  # trainer.engine.world.World under torchrun

    @property
    def launch(self) -> str:
        """``single``, ``spawn`` (our launcher starts one worker per device) or
        ``torchrun`` (torchrun started this process)."""
        if self.world is not None:
            return "torchrun"
        return "spawn" if self.world_size > 1 else "single"


def _looks_like_path(model: str) -> bool:
    return model.endswith((".pt", ".pth")) or "/" in model or Path(model).is_file()


def milestone_period(args: TrainArgs) -> int:
    """``args``' epochs between resumable pushes (``trainer.runfiles.milestone_period``)."""
    from trainer.runfiles import milestone_period as period

    return period(args.epochs, args.hub_period)


def _resume_source(args: TrainArgs) -> Path:
    if args.resume is True:
        path = Path(args.project) / args.name / "weights" / "last.pt"
        if not path.is_file():
            raise UsageError(f"resume=True: no {path} to resume from")
        return path
    return Path(str(args.resume))


def _plan_world(args: TrainArgs, caps: Any, world: Any) -> tuple[str, int, Any, Any]:
    """How many processes train, who starts them, and this process's device:
    ``(launch, size, torchrun world or None, caps)``; ``world`` is what torchrun's
    environment says, or ``None``."""
    from trainer.engine.device import parse_device, probe

    if world is not None and world.size > 1:
        if args.nproc > 1:
            raise UsageError("nproc= is set by torchrun (--nproc-per-node); leave it out")
        if caps.is_cuda:
            listed = parse_device(args.device)[1]
            if len(listed) > 1 and world.local_rank >= len(listed):
                raise UsageError(f"device={args.device} lists {len(listed)} GPUs but this is "
                                 f"LOCAL_RANK {world.local_rank}")
            caps = probe(str(listed[world.local_rank] if len(listed) > 1
                             else world.local_rank))
        return "torchrun", world.size, world, caps
    if caps.is_cuda:
        size = len(caps.requested)
        if args.nproc not in (0, size):
            raise UsageError(f"nproc={args.nproc} with device={args.device}: GPUs get one "
                             f"worker each; list {args.nproc} GPUs in device= instead")
    else:
        size = max(1, args.nproc)
    return ("spawn" if size > 1 else "single"), size, None, caps


def _check_batch(batch: int, size: int) -> None:
    if batch != -1 and batch % size:
        near = size * max(1, round(batch / size))
        raise UsageError(f"batch={batch} is the batch over all {size} processes and must "
                         f"split evenly between them; try batch={near}")


def _callbacks(args: TrainArgs, extra: Any, launch: str) -> Any:
    from trainer.engine.callbacks import CallbackError, Callbacks, load_spec

    callbacks = load_spec(args.callbacks) if args.callbacks else Callbacks()
    if extra is not None:
        for event, registered in extra.registered.items():
            for callback in registered:
                callbacks.add(event, callback)
    if launch == "spawn" and callbacks:
        try:
            pickle.dumps(callbacks)
        except (pickle.PicklingError, AttributeError, TypeError) as exc:
            raise CallbackError("callbacks must be module-level functions (importable by "
                                f"name) to run in several worker processes: {exc}") from None
    return callbacks


def build_plan(args: TrainArgs, given: set[str], env: Mapping[str, str] | None = None,
             callbacks: Any = None, hub_token: str | None = None) -> Plan:
    """Check everything and load the data; raises ``UsageError`` or a one-line
    ``ValueError`` subclass from the data, model, checkpoint, device or callback modules.

    ``env`` (default ``os.environ``) tells whether torchrun started this process;
    ``callbacks`` (a :class:`trainer.engine.callbacks.Callbacks`) adds to ``callbacks=``;
    ``hub_token``: the token ``hub=`` pushes with, held by the uploader (else it reads
    ``HF_TOKEN``)."""
    from trainer.datasets.loader import YoloDataset, load_data_config
    from trainer.detector.model import parse_model_name
    from trainer.engine.checkpoint import load_checkpoint
    from trainer.engine.device import probe
    from trainer.engine.rundir import check_not_live, choose_run_dir
    from trainer.engine.world import torchrun_world

    env = os.environ if env is None else env
    torchrun = torchrun_world(env)
    is_main = torchrun is None or torchrun.is_main

    notes: list[str] = []
    init_ckpt = resume_ckpt = None
    if args.resume is not False:
        path = _resume_source(args)
        resume_ckpt = load_checkpoint(path)
        if not isinstance(resume_ckpt.get("train_state"), dict):
            raise UsageError(f"{path} holds no training state (best.pt?); resume from "
                             "weights/last.pt")
        saved = TrainArgs(**{k: v for k, v in resume_ckpt.get("train_args", {}).items()
                             if k in PARSERS})
        for key in sorted(given - set(RESUME_OVERRIDES) - {"resume", "project", "name"}):
            if getattr(args, key) != getattr(saved, key):
                notes.append(f"resume: {key}={getattr(args, key)} ignored, the run keeps "
                             f"{key}={getattr(saved, key)}")
        for key in RESUME_OVERRIDES:
            if key in given:
                setattr(saved, key, getattr(args, key))
        saved.resume = args.resume
        args = saved
        run_dir = path.parent.parent if path.parent.name == "weights" else path.parent
        if resume_ckpt["epoch"] >= args.epochs:
            raise UsageError(f"{path} already completed {resume_ckpt['epoch']} of "
                             f"{args.epochs} epochs; give a larger epochs= to continue")
        if is_main:
            check_not_live(run_dir)
    if not args.data:
        raise UsageError("data= is required (path to a YOLO data.yaml)")
    if resume_ckpt is not None:
        model_size = resume_ckpt["model_meta"]["size"]
    elif _looks_like_path(args.model):
        init_ckpt = load_checkpoint(args.model)
        model_size = init_ckpt["model_meta"]["size"]
    else:
        model_size = parse_model_name(args.model)
    data = load_data_config(args.data)
    if resume_ckpt is not None and resume_ckpt["model_meta"]["nc"] != data.nc:
        raise UsageError(f"resume: the checkpoint has {resume_ckpt['model_meta']['nc']} "
                         f"classes but {args.data} has {data.nc}")
    launch, size, world, caps = _plan_world(args, probe(args.device), torchrun)
    _check_batch(args.batch, size)
    hooks = _callbacks(args, callbacks, launch)
    factory = None
    if args.hub:
        try:
            from trainer.hub.uploader import MilestoneUploader
        except ImportError as exc:
            raise UsageError(f"hub={args.hub}: Hub uploads are unavailable here ({exc})") \
                from None
        factory = MilestoneUploader if hub_token is None else functools.partial(
            MilestoneUploader, token=hub_token)
    train_set = YoloDataset(data.train, data.nc, args.imgsz, augment=True, seed=args.seed)
    val_set = YoloDataset(data.val, data.nc, args.imgsz, augment=False, seed=args.seed)
    if resume_ckpt is None:
        # Under torchrun the other ranks learn rank 0's choice from rank 0 itself.
        run_dir = (choose_run_dir(args.project, args.name, args.exist_ok) if is_main
                   else Path(args.project) / args.name)
    return Plan(args, run_dir, data, train_set, val_set, caps, model_size, init_ckpt,
                resume_ckpt, factory, notes, hooks, size, world)
