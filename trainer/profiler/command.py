"""``python3 -m trainer profile <train args> steps=N warmup=W [price=USD_PER_HOUR]``.

Runs real training steps of the configuration ``train`` would run (same model, data
loader, augmentation, precision, loss, optimizer, gradient clipping and EMA), measures
step time, data wait and images/s without extra synchronisation, and on CUDA the
GPU-busy fraction and allocator figures in a separate window (``trainer.profiler.measure``).
Then it says what bounds the step (``trainer.profiler.verdict``), what to change, whether
a faster GPU would help, and with a price what an epoch and 100 epochs cost. Writes
``profile.json`` to ``<project>/<name>/`` (a folder holding only that is still free for
``train``) or to ``--out``. Exit codes: 0 measured, 1 the steps failed (e.g. out of memory), 2 bad
arguments or data, 3 cancelled (``--probe``/``--cancel``, ``trainer.profiler.probes``).
``--json`` prints ``gpurent.profile/1`` (docs/SCHEMAS.md).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainer.profiler import probes
from trainer.profiler.measure import (
    Batches,
    StepTiming,
    cuda_memory,
    measure_gpu_busy,
    measure_steps,
    measure_validation,
)
from trainer.profiler.verdict import Measures, costs, judge
from trainer.runfiles import atomic_write_json, utc_now_iso

SCHEMA = "gpurent.profile/1"
DEFAULT_STEPS = 30
DEFAULT_WARMUP = 5
#: Steps of the separate GPU-busy window (CUDA only).
GPU_WINDOW_STEPS = 10
#: Validation batches timed (the first one's wait, the loader's start, is paid once).
VAL_BATCHES = 3


class ProfileArgs:
    """The profile's own ``key=value`` arguments; everything else is ``train``'s."""

    def __init__(self) -> None:
        self.steps = DEFAULT_STEPS
        self.warmup = DEFAULT_WARMUP
        self.price: float | None = None


def split_args(tokens: list[str]) -> tuple[ProfileArgs, list[str]]:
    """Take ``steps=``, ``warmup=`` and ``price=`` out of ``tokens``; ``ValueError`` with a
    one-line message for a bad value."""
    own = ProfileArgs()
    rest = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if sep and key in ("steps", "warmup"):
            try:
                number = int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r}: not a whole number") from None
            if number < (1 if key == "steps" else 0):
                raise ValueError(f"{key}={value!r}: must be at least {1 if key == 'steps' else 0}")
            setattr(own, key, number)
        elif sep and key == "price":
            try:
                price = float(value)
            except ValueError:
                raise ValueError(f"price={value!r}: not a number (USD per hour)") from None
            if not price >= 0 or price == float("inf"):
                raise ValueError(f"price={value!r}: must be a non-negative number")
            own.price = price
        else:
            rest.append(token)
    return own, rest


class Setup:
    """A ready-to-run training configuration: loader, step function and what it is;
    ``validate(batches)`` runs the engine's validation over those batches of
    ``val_loader`` (``None`` for either: no validation to measure)."""

    def __init__(self, loader: Any, step: Callable[[Any], None], caps: Any, config: dict[str, Any],
                 train_images: int, val_loader: Any = None,
                 validate: Callable[[Iterable[Any]], None] | None = None,
                 val_period: int = 1) -> None:
        self.loader = loader
        self.step = step
        self.caps = caps
        self.config = config
        self.train_images = train_images
        self.val_loader = val_loader
        self.validate = validate
        self.val_period = val_period


def build_setup(train_tokens: list[str]) -> Setup:
    """Build what ``train`` would train from its arguments: model, optimizer, precision,
    loader and one training step. Raises ``ValueError`` (one line) for bad arguments."""
    import torch

    from trainer.datasets.loader import YoloDataset, load_data_config, make_loader
    from trainer.detector.loss import LOSS_PARTS
    from trainer.detector.model import build_model, parse_model_name
    from trainer.engine.autobatch import CPU_DEFAULT_BATCH, MAX_BATCH
    from trainer.engine.checkpoint import load_checkpoint
    from trainer.engine.device import (
        choose_precision,
        configure_backends,
        loader_share,
        memory_format,
        probe,
        to_device,
    )
    from trainer.engine.ema import ModelEMA
    from trainer.engine.loop import choose_batch, train_step, validate
    from trainer.engine.optim import build_optimizer
    from trainer.engine.plan import UsageError, parse_args

    args, _given = parse_args(train_tokens)
    if not args.data:
        raise UsageError("data= is required (path to a YOLO data.yaml)")
    if args.model.endswith((".pt", ".pth")) or Path(args.model).is_file():
        size = load_checkpoint(args.model)["model_meta"]["size"]
    else:
        size = parse_model_name(args.model)
    data = load_data_config(args.data)
    caps = probe(args.device)
    configure_backends(caps)
    # The loader workers and CPU threads train would use (a profile at workers=8 on a
    # 2-core box measured the oversubscribed host, several times slower than the run).
    args.workers, threads = loader_share(args.workers, caps)
    if threads is not None:
        torch.set_num_threads(threads)
    precision = choose_precision(caps, args.amp)
    fmt = memory_format(caps)
    device = caps.torch_device
    torch.manual_seed(args.seed)
    model = build_model(size, data.nc, args.imgsz).to(device, memory_format=fmt).train()
    ema = ModelEMA(model)
    optimizer = build_optimizer(model, args.lr0)
    scaler = precision.scaler()
    points, strides = model.anchors(args.imgsz, device)
    dataset = YoloDataset(data.train, data.nc, args.imgsz, augment=True, seed=args.seed)
    if args.batch == -1:  # what train would choose, probed the same way
        most = max((len(labels) for labels in dataset.labels), default=1)
        choice = choose_batch(model, caps, precision, args.imgsz, data.nc, max(1, most),
                              args.batch_fraction, min(MAX_BATCH, len(dataset)),
                              logging.getLogger("trainer.profiler.command"))
        args.batch = choice.batch if choice is not None else CPU_DEFAULT_BATCH
    loader, _sampler = make_loader(dataset, batch=args.batch, workers=args.workers,
                                   shuffle=True, pin_memory=caps.is_cuda, seed=args.seed)
    val_loader = None
    if data.val:
        val_set = YoloDataset(data.val, data.nc, args.imgsz, augment=False, seed=args.seed)
        val_loader, _ = make_loader(val_set, batch=args.batch * 2, workers=args.workers,
                                    shuffle=False, pin_memory=caps.is_cuda, pad=False)
    loss_sums = torch.zeros(len(LOSS_PARTS), device=device)

    def step(batch: Any) -> None:
        # The engine's own training step, minus the lr warm-up schedule.
        nonlocal loss_sums
        images, targets = to_device(batch[0], batch[1], caps, fmt)
        loss_sums += train_step(model, ema, optimizer, scaler, precision, images, targets,
                                points, strides)

    def validate_batches(batches: Iterable[Any]) -> None:
        # The engine's validation (the EMA weights, as train validates), then train mode.
        validate(ema.module, batches, caps, precision, fmt, args.imgsz, data.nc)
        model.train()

    config = {"model": f"gpdet-{size}", "data": str(data.yaml_path), "batch": args.batch,
              "imgsz": args.imgsz, "workers": args.workers, "precision": precision.label,
              "device": "cpu" if not caps.is_cuda else f"cuda:{caps.index}",
              "gpu": caps.names[0] if caps.names else None,
              "run_dir": str(Path(args.project) / args.name)}
    return Setup(loader, step, caps, config, len(data.train), val_loader,
                 validate_batches if val_loader is not None else None, args.val_period)


def profile_setup(setup: Setup, steps: int, warmup: int,
                  price: float | None) -> dict[str, Any]:
    """Measure ``setup`` and return the report (without ``path``)."""
    import torch

    batches = Batches(setup.loader)
    caps = setup.caps
    sync: Callable[[], None] | None = None
    if caps.is_cuda:
        sync = functools.partial(torch.cuda.synchronize, caps.torch_device)
        torch.cuda.reset_peak_memory_stats(caps.torch_device)
    timing: StepTiming = measure_steps(batches, setup.step, steps=steps, warmup=warmup,
                                       sync=sync)
    gpu = memory = None
    if sync is not None:
        memory = cuda_memory(torch, caps.torch_device)
        gpu = measure_gpu_busy(batches, setup.step, steps=min(GPU_WINDOW_STEPS, steps),
                               sync=sync)
    measures = Measures(
        step_seconds=timing.step_seconds, data_wait_seconds=timing.data_wait_seconds,
        gpu_busy=min(gpu.busy_seconds / timing.step_seconds, 1.0) if gpu else None,
        alloc_retries=memory["alloc_retries"] if memory else None,
        ooms=memory["ooms"] if memory else None,
        mallocs_per_step=gpu.cuda_mallocs if gpu else None,
        peak_memory_fraction=memory["peak_fraction"] if memory else None,
    )
    report: dict[str, Any] = {"schema": SCHEMA, "created_at": utc_now_iso(),
                              "config": setup.config, "timing": timing.to_dict(),
                              "gpu": gpu.to_dict() if gpu else None, "memory": memory}
    report.update(judge(measures))
    report["cost"] = costs(timing.images_per_second, setup.train_images, price,
                           setup.config["batch"])
    val_seconds = None
    if setup.val_loader is not None and setup.validate is not None:
        val_seconds = measure_validation(setup.val_loader, setup.validate, VAL_BATCHES,
                                         sync=sync)
    report["cost"].update(epoch_estimate(report["cost"]["epoch_seconds"], val_seconds,
                                         setup.val_period))
    return report


def epoch_estimate(train_seconds: float | None, val_seconds: float | None,
                   val_period: int) -> dict[str, Any]:
    """The cost keys of a whole epoch: ``val_seconds`` (one validation) and
    ``epoch_total_seconds`` (training steps plus validation, when every epoch validates;
    the training steps alone when validation is every N > 1 epochs)."""
    total = None
    if train_seconds is not None:
        total = train_seconds + (val_seconds or 0.0 if val_period <= 1 else 0.0)
    return {"val_seconds": val_seconds, "val_period": val_period,
            "epoch_total_seconds": total}


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def render(report: dict[str, Any]) -> str:
    """The readable form of a profile report."""
    c, t = report["config"], report["timing"]
    lines = [f"profile: {c['model']} on {c['gpu'] or c['device']}, batch {c['batch']}, "
             f"imgsz {c['imgsz']}, workers {c['workers']}, {c['precision']} "
             f"({t['steps']} steps after {t['warmup']} warm-up)",
             f"  step        {_ms(t['step_seconds'])}  (data wait {_ms(t['data_wait_seconds'])}"
             f" = {t['data_wait_fraction'] * 100:.0f} % of the step, worst "
             f"{_ms(t['data_wait_max_seconds'])})",
             f"  throughput  {t['images_per_second']:.1f} images/s"]
    busy = report["gpu_busy_fraction"]
    lines.append(f"  GPU busy    {busy * 100:.0f} % of the step" if busy is not None
                 else "  GPU busy    not measured (no CUDA GPU)")
    lines.append(f"verdict: {report['verdict'].upper()}: {report['why']}")
    for v in report["verdicts"]:
        prefix = "" if v["name"] == report["verdict"] else f"also {v['name']}: {v['why']}. "
        lines.append(f"  {prefix}faster GPU? {v['faster_gpu']}")
        lines.append(f"  levers: {'; '.join(v['levers'])}")
    if report["cannot_tell"]:
        told = ", ".join(f"{x['name']} ({x['reason']})" for x in report["cannot_tell"])
        lines.append(f"  cannot tell on this box: {told}")
    cost = report["cost"]
    if cost["epoch_seconds"] is not None:
        text = (f"epoch: {cost['epoch_images']} images = {cost['steps_per_epoch']} steps, "
                f"{cost['epoch_seconds']:.0f} s of training steps")
        if cost["cost_per_epoch"] is not None:
            text += (f"; at ${cost['price_per_hour']:.2f}/h ${cost['cost_per_epoch']:.3f} per "
                     f"epoch, ${cost['cost_per_100_epochs']:.2f} per 100 epochs "
                     "(validation not included)")
        lines.append(text)
    if report.get("path"):
        lines.append(f"wrote {report['path']}")
    return "\n".join(lines)


def usage() -> str:
    """Help text for ``profile``."""
    return ("usage: python3 -m trainer profile <train key=value args> [steps=N] [warmup=W] "
            "[price=USD_PER_HOUR] [--out PATH | --probe ID] [--json]\n"
            "       python3 -m trainer profile --cancel ID [--json]\n\n"
            "Runs N real training steps (after W untimed ones) of the configuration "
            "`train` would run\nand says what bounds it: dataloader, compute, host / launch "
            f"or memory-pressure.\nDefaults: steps={DEFAULT_STEPS} warmup={DEFAULT_WARMUP}. "
            "Writes profile.json to <project>/<name>/ or --out.\n"
            "--probe ID writes ID.json into a private per-user directory and runs until done "
            "or until\n--cancel ID ends it (ID: 16 to 64 hex digits, drawn by the caller).\n"
            "--json prints the report (schema gpurent.profile/1, docs/SCHEMAS.md).\n"
            "exit codes: 0 measured, 1 the steps failed, 2 bad arguments or data, "
            f"{probes.CANCELLED} cancelled")


def main(argv: list[str]) -> int:
    """Entry point: 0 measured, 1 the steps failed, 2 bad arguments or data, 3 cancelled
    (``--cancel``)."""
    if not argv or any(a in ("-h", "--help", "help") for a in argv):
        print(usage())
        return 0 if argv else 2
    p = argparse.ArgumentParser(prog="python3 -m trainer profile", add_help=False)
    p.add_argument("--json", action="store_true")
    p.add_argument("--out")
    p.add_argument("--probe")
    p.add_argument("--cancel")
    flags, tokens = p.parse_known_args(argv)
    if flags.cancel is not None:
        return _cancel(flags.cancel, flags.json)
    leash = None
    try:
        out = Path(flags.out) if flags.out else None
        if flags.probe is not None:
            out, leash_path = probes.probe_paths(flags.probe)
            leash = probes.Leash(leash_path)
    except (ValueError, OSError) as exc:
        print(f"profile: {exc}", file=sys.stderr)
        return 2
    try:
        if leash is not None:
            leash.check()
        return _profile(flags.json, out, tokens)
    except KeyboardInterrupt:
        if leash is None or not leash.cut:
            raise
        print("profile: cancelled", file=sys.stderr)
        return probes.CANCELLED
    finally:
        if leash is not None:
            leash.release()


def _cancel(probe_id: str, as_json: bool) -> int:
    try:
        running = probes.cancel(probe_id)
    except (ValueError, OSError) as exc:
        print(f"profile: {exc}", file=sys.stderr)
        return 2
    print(json.dumps({"probe": probe_id, "was_running": running}) if as_json else
          f"probe {probe_id}: {'cancelled' if running else 'not running'}")
    return 0


def _profile(as_json: bool, out: Path | None, tokens: list[str]) -> int:
    try:
        own, train_tokens = split_args(tokens)
        setup = build_setup(train_tokens)
    except ValueError as exc:  # UsageError, DataError, ModelError, DeviceError...
        print(f"profile: {exc}", file=sys.stderr)
        return 2
    try:
        report = profile_setup(setup, own.steps, own.warmup, own.price)
    except (RuntimeError, ValueError) as exc:  # torch.OutOfMemoryError is a RuntimeError
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        print(f"profile: the training steps failed: {first}", file=sys.stderr)
        return 1
    out = out if out is not None else Path(setup.config["run_dir"]) / "profile.json"
    report["path"] = str(out)
    try:
        atomic_write_json(out, report)
    except OSError as exc:
        print(f"profile: cannot write {out}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    print(json.dumps(report, indent=2) if as_json else render(report))
    return 0
