"""The training loop. Read it top to bottom: set up the run, then for every epoch train,
validate, save and report, then end as ``completed``, ``stopped`` or ``failed``.

:func:`run` takes a checked :class:`trainer.engine.plan.Plan` (arguments, data, device, model
source) and returns the process exit code: 0 completed or stopped, 1 failed.
"""

from __future__ import annotations

import copy
import dataclasses
import gc
import logging
import math
import os
import random
import signal
import time
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer import procid
from trainer.datasets.loader import make_loader
from trainer.detector.bbox import postprocess
from trainer.detector.evaluate import DetectionEvaluator
from trainer.detector.loss import LOSS_PARTS, detection_loss
from trainer.detector.model import FAMILY, Detector, build_model, parameter_count
from trainer.engine.autobatch import (
    CPU_DEFAULT_BATCH,
    MAX_BATCH,
    BatchChoice,
    CudaMemory,
    MemoryMeter,
    format_table,
    measure_with,
    search_batch,
    synthetic_batch,
)
from trainer.engine.callbacks import CallbackContext, Callbacks
from trainer.engine.checkpoint import (
    capture_rng,
    model_meta,
    restore_rng,
    save_checkpoint,
    state_dict_cpu,
    transfer_weights,
)
from trainer.engine.collectives import Group
from trainer.engine.device import (
    DeviceCaps,
    Precision,
    choose_precision,
    configure_backends,
    host_info,
    loader_share,
    memory_format,
    peak_memory_bytes,
    to_device,
)
from trainer.engine.ema import ModelEMA
from trainer.engine.optim import build_optimizer, cosine_schedule, warmup_iterations
from trainer.engine.plan import Plan, milestone_period
from trainer.engine.report import RunReport, close_log, error_message, open_log
from trainer.engine.rundir import clear_history
from trainer.engine.stopping import GracefulStop
from trainer.runfiles import WEIGHTS_DIR, RunWriter, trim_history

BEST_METRIC = "mAP50-95"
GRAD_CLIP = 10.0
PROGRESS_LOG_SECONDS = 15.0

EXIT_OK, EXIT_FAILED = 0, 1


def train_step(model: Detector, ema: ModelEMA, optimizer: torch.optim.Optimizer,
               scaler: torch.amp.GradScaler, precision: Precision, images: torch.Tensor,
               targets: torch.Tensor, points: torch.Tensor,
               strides: torch.Tensor) -> torch.Tensor:
    """One optimisation step on a batch already on the device; returns the detached loss
    parts (no host sync, so the GPU can run ahead)."""
    with precision.autocast():
        logits, raw = model(images)
    loss, parts = detection_loss(logits, raw, targets, points, strides)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    ema.update(model)
    return parts


@torch.no_grad()
def validate(model: Detector, loader: Any, caps: DeviceCaps, precision: Precision,
             fmt: torch.memory_format, imgsz: int, nc: int,
             group: Group | None = None) -> dict[str, float]:
    """Precision, recall, mAP50 and mAP50-95 of ``model`` on ``loader``. In a
    multi-process run each rank evaluates its shard; rank 0 merges the matches and every
    rank gets the same metrics."""
    group = group or Group()
    model.eval()
    evaluator = DetectionEvaluator(nc)
    for images, targets in loader:
        images, targets = to_device(images, targets, caps, fmt)
        with precision.autocast():
            logits, raw = model(images)
        boxes, scores = model.decode(logits, raw, imgsz)
        detections = postprocess(boxes, scores)
        truth = targets.cpu().numpy()
        for i, dets in enumerate(detections):
            evaluator.add(dets.cpu().numpy(), truth[truth[:, 0] == i, 1:])
    shards = group.gather(evaluator)
    metrics = None
    if shards is not None:
        for other in shards[1:]:
            evaluator.merge(other)
        metrics = evaluator.compute()
    return group.broadcast(metrics)


def choose_batch(model: Detector, caps: DeviceCaps, precision: Precision, imgsz: int,
                 nc: int, max_boxes: int, fraction: float, limit: int,
                 log: logging.Logger, meter: MemoryMeter | None = None) -> BatchChoice | None:
    """``batch=-1``: the largest power of two whose real training steps (on copies of
    the model and optimizer) fit in ``fraction`` of this GPU's memory; ``None`` on the
    CPU, where there is no device memory to fit and the default is used. ``meter``
    replaces the GPU's memory meter (the seam the tests use on the CPU)."""
    if meter is None:
        if not caps.is_cuda:
            log.info("batch=-1: training on the CPU, where there is no GPU memory to fit; "
                     "using the default batch %d per process", CPU_DEFAULT_BATCH)
            return None
        meter = CudaMemory(caps.index)
    device, fmt = caps.torch_device, memory_format(caps)
    points, strides = model.anchors(imgsz, device)

    def trial(batch: int) -> None:
        copy_ = copy.deepcopy(model).train()
        ema = ModelEMA(copy_)
        optimizer = build_optimizer(copy_, 1e-6)
        images, targets = synthetic_batch(batch, imgsz, nc, max_boxes, device)
        train_step(copy_, ema, optimizer, precision.scaler(), precision,
                   images.contiguous(memory_format=fmt), targets, points, strides)
        if caps.is_cuda:
            torch.cuda.synchronize(device)  # the step's kernels have run: its peak is real

    choice = search_batch(measure_with(trial, meter), meter.budget(fraction), limit=limit)
    for line in format_table(choice):
        log.info("batch=-1: %s", line)
    return choice


def run(plan: Plan, group: Group | None = None) -> int:
    """Train as planned; returns the exit code. ``group`` is this process's place in a
    multi-process run (default: a run of one process)."""
    group = group or Group()
    world = group.world
    is_main = world.is_main
    args, caps = plan.args, plan.caps
    ckpt = plan.resume_checkpoint
    run_dir = group.broadcast(plan.run_dir)  # under torchrun only rank 0 chose it
    writer = RunWriter(run_dir) if is_main else None
    log = open_log(run_dir, world.rank)
    callbacks = plan.callbacks or Callbacks()
    for note in plan.notes if is_main else ():
        log.warning(note)
    start_epoch = 1 if ckpt is None else int(ckpt["epoch"]) + 1
    best_metric = None if ckpt is None else ckpt.get("best_metric")
    best_epoch = None if ckpt is None else ckpt.get("best_epoch")
    nc, names, imgsz = plan.data.nc, plan.data.names, args.imgsz
    device = caps.torch_device

    # ----------------------------------------------------------------- the report
    if ckpt is None:
        removed = clear_history(run_dir) if is_main else []
        if removed:
            log.info("exist_ok: reusing %s, removed the old %s", run_dir, ", ".join(removed))
    else:
        try:
            dropped = trim_history(run_dir, start_epoch - 1) if is_main else 0
        except ValueError as exc:  # a history it cannot read is left as it is
            log.error("cannot resume %s: %s; nothing in it was changed", run_dir, exc)
            return EXIT_FAILED
        log.info("resuming %s at epoch %d (best %s %s at epoch %s)%s", run_dir, start_epoch,
                 BEST_METRIC, best_metric, best_epoch,
                 f"; dropped {dropped} metrics rows written after that checkpoint"
                 if dropped else "")
    uploader = None  # created in the try block below, so that its failure fails the run
    pid = world.launcher_pid or os.getpid()
    report = RunReport(writer, {
        "pid": pid, **procid.identity(pid), "model_family": FAMILY,
        "model_size": plan.size, "task": "detect",
        "save_dir": str(run_dir.resolve()), "total_epochs": args.epochs,
        "start_epoch": start_epoch, "host": host_info(caps), "batch": args.batch,
        "imgsz": imgsz, "world_size": world.size, "best_metric": best_metric,
        "best_metric_name": BEST_METRIC, "best_epoch": best_epoch,
        "args": args.to_dict(),
    }, log, hub_state=lambda: uploader.state() if uploader is not None else None)
    report.status(state="running", completed_epochs=start_epoch - 1, current_epoch=None)
    weights = run_dir / WEIGHTS_DIR

    def checkpoints() -> dict[str, str | None]:
        return {name: str((weights / f"{name}.pt").resolve())
                if (weights / f"{name}.pt").exists() else None for name in ("best", "last")}

    stop = GracefulStop(log, on_force=lambda signum: report.ending(
        "failed", checkpoints=checkpoints(),
        error={"type": "Interrupted",
               "message": f"second {signal.Signals(signum).name}: exited without saving"}))
    state, exit_code, error, failure = "failed", EXIT_FAILED, None, None
    completed = start_epoch - 1
    metrics: dict[str, float] = {}
    precision = choose_precision(caps, args.amp)
    meta = model_meta(plan.size, nc, names, imgsz)
    model: nn.Module | None = None
    ema: ModelEMA | None = None
    batch, autobatch = args.batch, None
    checkpoint_seconds = step_seconds = 0.0
    images_seen = 0
    previous_threads: int | None = None

    def fire(event: str, **fields: Any) -> None:
        callbacks.run(CallbackContext(
            event, run_dir, args, world.rank, world.size, model=model,
            ema=ema.module if ema is not None else None, **fields), log)

    stop.install()
    try:
        if plan.uploader_factory is not None and is_main:
            uploader = plan.uploader_factory(run_dir, args.hub, milestone_period(args), log)
        # ------------------------------------------------------------- the model
        random.seed(args.seed)
        np.random.seed(args.seed)
        torch.manual_seed(args.seed)
        configure_backends(caps)
        workers, threads = loader_share(args.workers, caps, world.size)
        if threads is not None:
            previous_threads = torch.get_num_threads()
            torch.set_num_threads(threads)
        fmt = memory_format(caps)
        model = build_model(plan.size, nc, imgsz)
        if ckpt is not None:
            model.load_state_dict(ckpt["train_state"]["model"])
        elif plan.init_checkpoint is not None:
            copied, total = transfer_weights(model, plan.init_checkpoint["model"])
            log.info("fine-tuning from %s: %d of %d tensors copied", args.model, copied, total)
        model.to(device, memory_format=fmt)
        if args.batch == -1:
            most = max((len(labels) for labels in plan.train_set.labels), default=1)
            autobatch = choose_batch(
                model, caps, precision, imgsz, nc, max(1, most), args.batch_fraction,
                min(MAX_BATCH, max(1, len(plan.train_set) // world.size)), log)
            # Every rank probed its own GPU: the smallest fit holds on all of them.
            per_rank = group.min_int(autobatch.batch if autobatch else CPU_DEFAULT_BATCH)
            batch = per_rank * world.size
            report.status(batch=batch)
        per_rank = batch // world.size
        ema = ModelEMA(model)
        optimizer = build_optimizer(model, args.lr0)
        lr_factor = cosine_schedule(args.epochs)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)
        scaler = precision.scaler()
        if ckpt is not None:
            saved = ckpt["train_state"]
            ema.module.load_state_dict(ckpt["model"])
            ema.updates = int(saved["ema_updates"])
            optimizer.load_state_dict(saved["optimizer"])
            scheduler.load_state_dict(saved["scheduler"])
            if saved["scaler"]:  # empty when saved without fp16 (CPU, bf16)
                scaler.load_state_dict(saved["scaler"])
            restore_rng(saved["rng"], caps.index if caps.is_cuda else None)
        # DDP averages the gradients over the ranks in the backward pass.
        trained = (nn.parallel.DistributedDataParallel(
            model, device_ids=[caps.index] if caps.is_cuda else None)
            if group.active else model)

        # ------------------------------------------------------------- the data
        train_loader, train_sampler = make_loader(
            plan.train_set, batch=per_rank, workers=workers, shuffle=True,
            pin_memory=caps.is_cuda, seed=args.seed, rank=world.rank, world=world.size)
        val_loader, _ = make_loader(plan.val_set, batch=per_rank * 2, workers=workers,
                                    shuffle=False, pin_memory=caps.is_cuda,
                                    rank=world.rank, world=world.size, pad=False)
        batches = len(train_loader)
        warmup = warmup_iterations(batches, args.epochs)
        points, strides = model.anchors(imgsz, device)
        log.info("run %s: %s-%s (%.2fM parameters), %d classes, %d train / %d val images",
                 run_dir, FAMILY, plan.size, parameter_count(model) / 1e6, nc,
                 len(plan.train_set), len(plan.val_set))
        log.info("device %s (%s), %s, batch %d%s, imgsz %d, workers %d, %d CPU threads, "
                 "epochs %d-%d", device, ", ".join(caps.names) or "no GPU", precision.label,
                 batch, f" ({world.size} processes x {per_rank})" if group.active else "",
                 imgsz, workers, torch.get_num_threads(), start_epoch, args.epochs)

        def save(name: str, epoch: int, *, with_state: bool, partial_step: int = 0) -> None:
            nonlocal checkpoint_seconds
            if not is_main:
                return
            t0 = time.perf_counter()
            payload: dict[str, Any] = {
                "model_meta": meta, "model": state_dict_cpu(ema.module), "epoch": epoch,
                "best_metric": best_metric, "best_epoch": best_epoch,
                "best_metric_name": BEST_METRIC, "train_args": args.to_dict(),
            }
            if with_state:
                payload["train_state"] = {
                    "model": state_dict_cpu(model), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                    "ema_updates": ema.updates, "rng": capture_rng(caps.index),
                    "partial_step": partial_step,
                }
            save_checkpoint(weights / name, payload)
            checkpoint_seconds += time.perf_counter() - t0

        fire("on_train_start")
        # ------------------------------------------------------------- the loop
        for epoch in range(start_epoch, args.epochs + 1):
            # ---- train one epoch
            epoch_start = time.monotonic()
            trained.train()
            train_sampler.set_epoch(epoch)
            loss_sums = torch.zeros(len(LOSS_PARTS), device=device)
            steps, seen, stopping, last_progress = 0, 0, False, time.monotonic()
            for step, (images, targets) in enumerate(train_loader):
                iteration = step + batches * (epoch - 1)
                if iteration < warmup:
                    for group_ in optimizer.param_groups:
                        group_["lr"] = (group_["initial_lr"] * lr_factor(epoch - 1)
                                        * (iteration + 1) / warmup)
                images, targets = to_device(images, targets, caps, fmt)
                loss_sums += train_step(trained, ema, optimizer, scaler, precision, images,
                                        targets, points, strides)
                steps += 1
                seen += len(images)
                if time.monotonic() - last_progress > PROGRESS_LOG_SECONDS:
                    last_progress = time.monotonic()
                    log.info("epoch %d/%d: step %d/%d, loss %.4f", epoch, args.epochs,
                             steps, batches, float(loss_sums.sum()) / steps)
                # Every rank must leave the loop at the same step, or the others would
                # wait forever in the next gradient all-reduce.
                stopping = group.any(stop.requested)
                if stopping:
                    break
            if stopping and steps < batches:
                # Mid-epoch: keep the weights of the finished steps; a resume
                # repeats this epoch from its start.
                save("last.pt", completed, with_state=True, partial_step=steps)
                log.info("stopped in epoch %d after step %d/%d; saved last.pt",
                         epoch, steps, batches)
                state, exit_code = "stopped", EXIT_OK
                break
            totals = group.sum_(torch.cat((loss_sums, torch.tensor(
                [steps, seen], dtype=loss_sums.dtype, device=device))))
            step_seconds += time.monotonic() - epoch_start
            images_seen += int(totals[-1])
            losses = (totals[:-2] / max(float(totals[-2]), 1.0)).tolist()
            train_loss = sum(losses)
            if not math.isfinite(train_loss):
                raise FloatingPointError(f"training loss is {train_loss} in epoch {epoch}")
            scheduler.step()
            group.sync_buffers(model)
            group.sync_buffers(ema.module)

            # ---- validate
            validated = epoch % args.val_period == 0 or epoch == args.epochs
            is_best = False
            if validated:
                metrics = validate(ema.module, val_loader, caps, precision, fmt,
                                   imgsz, nc, group)
                if best_metric is None or metrics[BEST_METRIC] > best_metric:
                    best_metric, best_epoch, is_best = metrics[BEST_METRIC], epoch, True
                fire("on_val_end", epoch=epoch, metrics=dict(metrics))

            # ---- save
            completed = epoch
            save("last.pt", epoch, with_state=True)
            if is_best:
                save("best.pt", epoch, with_state=False)
            if args.save_period > 0 and epoch % args.save_period == 0:
                save(f"epoch_{epoch}.pt", epoch, with_state=True)

            # ---- report
            row: dict[str, Any] = {"epoch": epoch,
                                   "time": round(time.monotonic() - epoch_start, 3),
                                   "train/loss": train_loss}
            row.update({f"train/{part}_loss": value
                        for part, value in zip(LOSS_PARTS, losses)})
            for key in ("precision", "recall", "mAP50", "mAP50-95"):
                row[f"metrics/{key}"] = metrics.get(key) if validated else None
            row.update({f"lr/pg{i}": group_["lr"]
                        for i, group_ in enumerate(optimizer.param_groups)})
            row.update({"validated": validated, "is_best": is_best,
                        "current_metric": metrics[BEST_METRIC] if validated else None,
                        "current_metric_name": BEST_METRIC, "best_metric": best_metric,
                        "best_metric_name": BEST_METRIC, "best_epoch": best_epoch})
            report.epoch_end(row, epoch=epoch, metrics=metrics, train_loss=train_loss)
            log.info("epoch %d/%d: loss %.4f (%s)%s, %.1fs%s", epoch, args.epochs,
                     train_loss, ", ".join(f"{p} {v:.4f}" for p, v in
                                           zip(LOSS_PARTS, losses)),
                     "" if not validated else ", " + ", ".join(
                         f"{k} {v:.4f}" for k, v in metrics.items()),
                     row["time"], ", new best" if is_best else "")
            fire("on_train_epoch_end", epoch=epoch, metrics=dict(metrics), row=row)
            if uploader is not None:
                uploader.on_epoch_end(epoch, is_best, BEST_METRIC,
                                      metrics.get(BEST_METRIC) if validated else None)

            # ---- stop early?
            if stopping or group.any(stop.requested):
                state, exit_code = "stopped", EXIT_OK
                log.info("stopped after epoch %d", epoch)
                break
            if (args.patience and validated and best_epoch is not None
                    and epoch - best_epoch >= args.patience):
                log.info("early stop: no improvement of %s for %d epochs (best %.4f at "
                         "epoch %d)", BEST_METRIC, args.patience, best_metric, best_epoch)
                break
        if state != "stopped":
            state, exit_code = "completed", EXIT_OK
    except Exception as exc:
        failure = exc
        error = {"type": type(exc).__name__, "message": error_message(exc)}
        log.exception("training failed: %s: %s", error["type"], error["message"])
        state, exit_code = "failed", EXIT_FAILED
        fire("on_train_exception", error=exc)

    # ----------------------------------------------------------------- the ending
    report.ending(state, checkpoints=checkpoints(), error=error)
    report.summary({
        "state": state, "completed_epochs": completed, "total_epochs": args.epochs,
        "best_metric": best_metric, "best_metric_name": BEST_METRIC,
        "best_epoch": best_epoch, "final_metrics": metrics,
        "total_seconds": round(time.time() - report.started, 3),
        "mean_epoch_seconds": (sum(report.epoch_seconds) / len(report.epoch_seconds)
                               if report.epoch_seconds else None),
        "model": meta, "parameters": parameter_count(model) if model is not None else None,
        "device": str(device), "world_size": world.size, "batch": batch,
        "autobatch": None if autobatch is None else dataclasses.asdict(autobatch),
        "images_per_second": images_seen / step_seconds if step_seconds > 0 else None,
        "peak_memory_bytes": peak_memory_bytes(caps),
        "precision": precision.label, "args": args.to_dict(), "checkpoints": checkpoints(),
        "error": error,
    })
    train_seconds = sum(report.epoch_seconds)
    if train_seconds > 0:
        log.info("run files took %.3fs (%.3f%% of epoch time), checkpoints %.3fs (%.3f%%)",
                 report.write_seconds, 100 * report.write_seconds / train_seconds,
                 checkpoint_seconds, 100 * checkpoint_seconds / train_seconds)
    log.info("%s after %d/%d epochs; best %s %s at epoch %s", state, completed, args.epochs,
             BEST_METRIC, None if best_metric is None else f"{best_metric:.4f}", best_epoch)
    if uploader is not None:
        log.info("final Hub push of %s ...", args.hub)
        try:
            uploader.finish()
        except Exception as exc:  # the run's own ending is already on disk
            log.error("final Hub push failed: %s", error_message(exc))
        report.status()
    fire("on_train_end", state=state, epoch=completed, metrics=dict(metrics), error=failure)
    stop.restore()
    if previous_threads is not None:
        torch.set_num_threads(previous_threads)  # for callers in the same process
    close_log(log)
    if failure is None:
        group.close()
    elif not is_main:
        raise failure  # the launcher (ours or torchrun) reports a worker's error
    # An exception re-raised from a loader worker sits in a reference cycle with the
    # loader's iterator: break it now, so the workers are shut down when ``run`` returns.
    del failure
    gc.collect()
    return exit_code
