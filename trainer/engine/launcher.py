"""Training in several processes: one per GPU on NCCL, or several on the CPU on gloo (the
same code path, which is how it is tested here), spawned by us or started by torchrun.

Who does what:

- ``device=0,1,2,3`` (or ``device=cpu nproc=2``): the process the user started is the
  *launcher*. It spawns one worker per device (``torch.multiprocessing``, start method
  ``spawn``, so the calling script must guard its entry with ``if __name__ ==
  "__main__":``), forwards SIGTERM/SIGINT to them, and waits. Workers leave the
  launcher's process group, so that a signal to the group (a graceful stop from the
  laptop, Ctrl-C in a terminal) reaches the launcher alone and each worker gets it once,
  forwarded. When the launcher dies, torch's parent-death signal (SIGINT) stops them.
- Under torchrun (``RANK``, ``WORLD_SIZE`` and ``LOCAL_RANK`` set), every process joins
  the existing process group instead; torchrun itself is the launcher.
- Rank 0 writes the run directory and the checkpoints; all ranks train, validate their
  shard of the validation set and agree, at every step, on whether to stop.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import shutil
import signal
import tempfile
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import Any

from trainer.engine.collectives import Group
from trainer.engine.stopping import STOP_SIGNALS, EarlySignals, early_signal
from trainer.engine.world import World

#: How long the launcher lets the other workers end by themselves once one has failed.
GRACE_SECONDS = 15.0


def spawn(plan: Any, nprocs: int, log: logging.Logger) -> int:
    """Run ``plan`` in ``nprocs`` spawned workers and return the exit code (0 when all
    ended well). When a worker fails, the others get :data:`GRACE_SECONDS` to end, then
    SIGTERM, then SIGKILL (torch's ``ProcessContext.join``), and the launcher writes the
    first failure into ``status.json`` unless rank 0 already recorded a better one.

    Every signal reaches every worker once, through the launcher. The workers are born
    with SIGTERM and SIGINT blocked (the mask survives fork and exec), so the seconds they
    spend importing torch are safe from a signal to the launcher's process group; once
    out of that group and with their handlers in place, they drop what the group sent,
    unblock, and set their ``ready`` event. The launcher holds every signal until all are
    ready."""
    import torch.multiprocessing as mp

    store = Path(tempfile.mkdtemp(prefix="gpurent-dist-"))
    init_method = (store / "store").as_uri()
    ready = [mp.get_context("spawn").Event() for _ in range(nprocs)]
    pending: list[int] = []
    context: Any = None

    def deliver() -> None:
        if context is None or not all(event.is_set() for event in ready):
            return
        while pending:  # pop, not iterate: the handler may run deliver() in between
            signum = pending.pop(0)
            for pid in context.pids():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signum)

    def forward(signum: int, _frame: FrameType | None) -> None:
        pending.append(signum)
        deliver()

    previous = {sig: signal.signal(sig, forward) for sig in STOP_SIGNALS}
    early = early_signal(previous[signal.SIGTERM])
    if early is not None:
        pending.append(early)
    try:
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            context = mp.start_processes(
                _worker, args=(plan, nprocs, init_method, os.getpid(), ready), nprocs=nprocs,
                join=False, start_method="spawn")
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        log.info("launcher pid %d: %d workers (pids %s)", os.getpid(), nprocs,
                 ", ".join(map(str, context.pids())))
        while not context.join(timeout=0.25, grace_period=GRACE_SECONDS):
            deliver()
        return 0
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as exc:
        _record_failure(plan.run_dir, exc, _first_error(context.error_files), log)
        return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(store, ignore_errors=True)


def _worker(local_rank: int, plan: Any, size: int, init_method: str, launcher_pid: int,
            ready: list[Any]) -> None:
    os.setpgrp()
    EarlySignals().install()
    for sig in STOP_SIGNALS:  # sent to the launcher's group: the launcher forwards them
        while signal.sigtimedwait([sig], 0) is not None:
            pass
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if os.getppid() != launcher_pid:  # its death signal came while blocked, and was dropped
        raise SystemExit(1)
    ready[local_rank].set()
    from trainer.engine.loop import run

    world = World(local_rank, local_rank, size, launcher_pid)
    caps = plan.caps
    if caps.is_cuda:
        caps = replace(caps, index=caps.requested[local_rank])
    code = run(replace(plan, caps=caps), Group.join(world, caps.torch_device, init_method))
    if code:
        raise SystemExit(code)


def _first_error(error_files: list[str]) -> tuple[int, str] | None:
    """The rank and traceback of the worker that raised first: the cause, where the
    others failed only because it left their collectives. Torch leaves the files."""
    raised = [(os.stat(path).st_mtime_ns, index, path)
              for index, path in enumerate(error_files) if os.path.exists(path)]
    if not raised:
        return None
    _, index, first = min(raised)
    with open(first, "rb") as fh:
        trace = str(pickle.load(fh))  # written by torch's worker wrapper, in our own tmp
    for _, _, path in raised:
        os.unlink(path)
    return index, trace


def _record_failure(run_dir: Path, exc: Exception, first: tuple[int, str] | None,
                    log: logging.Logger) -> None:
    from trainer.engine.report import error_message
    from trainer.runfiles import RunWriter, read_status

    read = read_status(run_dir)
    fields = dict(read.fields or {})
    if first is None:
        log.error("a worker failed: %s", error_message(exc))
        if fields.get("state") in ("completed", "stopped", "failed"):
            return  # rank 0 recorded the ending itself (its own failure, a forced exit)
        error = {"type": "WorkerFailed", "message": error_message(exc)}
    else:
        # Rank 0 may have recorded a failure already, but only the lost connection to
        # this worker: the worker's own error is the one to show.
        index, trace = first
        log.error("worker %d failed:\n%s", index, trace.rstrip())
        kind, _, text = trace.strip().splitlines()[-1].partition(": ")
        error = {"type": kind.rsplit(".", 1)[-1], "message": f"rank {index}: {text or kind}"}
    fields.update(state="failed", error=error, pid=os.getpid())
    with contextlib.suppress(OSError):
        RunWriter(run_dir).write_status(fields)
