"""The Python API: the same training as ``python -m trainer train``, from a script.

::

    from trainer import Trainer

    def log_epoch(ctx):
        if ctx.is_main:
            print(ctx.epoch, ctx.metrics.get("mAP50-95"))

    if __name__ == "__main__":
        trainer = Trainer("gpdet-s")
        trainer.add_callback("on_train_epoch_end", log_epoch)
        result = trainer.train(data="data.yaml", epochs=50, batch=64, device="0,1,2,3",
                               project="runs/train", name="exp")
        print(result.state, result.run_dir)

The ``if __name__ == "__main__":`` guard is needed as soon as ``device`` lists several
GPUs (or ``nproc`` > 1): every worker process imports the calling script again, and
without the guard each would start training of its own. For the same reason callbacks
must then be module-level functions, which the workers find by name.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.engine.callbacks import Callback, Callbacks
from trainer.engine.command import execute
from trainer.engine.plan import UsageError, build_plan, parse_args
from trainer.runfiles import SUMMARY_FILE, WEIGHTS_DIR, read_status


@dataclass(frozen=True)
class TrainResult:
    """How a run ended: ``state`` is ``completed``, ``stopped`` or ``failed`` (then
    ``error`` holds the type and message); ``summary`` is ``summary.json``."""

    run_dir: Path
    state: str
    exit_code: int
    error: dict[str, str] | None = None
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Whether the run completed or was stopped gracefully."""
        return self.exit_code == 0

    @property
    def best(self) -> Path | None:
        """``weights/best.pt``, when the run saved one."""
        path = self.run_dir / WEIGHTS_DIR / "best.pt"
        return path if path.is_file() else None


def _text(value: Any) -> str:
    if isinstance(value, (str, os.PathLike)):
        return os.fspath(value)
    if isinstance(value, Sequence):
        return ",".join(str(v) for v in value)
    return str(value)


class Trainer:
    """A detector to train; :meth:`train` takes the keys of ``python -m trainer train``
    as keyword arguments (``data``, ``epochs``, ``batch``, ``device``, ``project``,
    ``name``...; ``python -m trainer train --help`` lists them all)."""

    def __init__(self, model: str | os.PathLike[str] = "gpdet-n",
                 callbacks: Mapping[str, Callback | Sequence[Callback]] | None = None) -> None:
        self.model = os.fspath(model)
        self.callbacks = Callbacks()
        if callbacks:
            self.callbacks.add_mapping(dict(callbacks))

    def add_callback(self, event: str, callback: Callback) -> None:
        """Call ``callback(ctx)`` at ``event`` (see :mod:`trainer.engine.callbacks` for the
        events and what ``ctx`` holds)."""
        self.callbacks.add(event, callback)

    def train(self, data: str | os.PathLike[str], **options: Any) -> TrainResult:
        """Train; raises ``ValueError`` (one line) for bad arguments or data before any
        run directory exists, and returns how the run ended otherwise."""
        if "model" in options:
            raise UsageError("give the model to Trainer(...), not to train()")
        tokens = [f"model={self.model}", f"data={_text(data)}"]
        tokens += [f"{key}={_text(value)}" for key, value in options.items()]
        args, given = parse_args(tokens)
        plan = build_plan(args, given, callbacks=self.callbacks)
        code = execute(plan)
        status = read_status(plan.run_dir)
        try:
            summary = json.loads((plan.run_dir / SUMMARY_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            summary = {}
        error = status.get("error")
        return TrainResult(plan.run_dir, str(status.get("state", "failed")), code,
                           error if isinstance(error, dict) else None, summary)
