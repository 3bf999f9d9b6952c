"""Checkpoints: what they hold, writing them atomically, and reading them back safely.

A checkpoint is a dict. ``model_meta`` (family, size, nc, names, imgsz) rebuilds the
architecture, ``model`` holds the weights that were validated (the EMA), and ``epoch``
the number of completed epochs. ``last.pt`` and ``epoch_N.pt`` also hold ``train_state``
(raw weights, optimizer, scheduler, AMP scaler, RNG states) for ``resume``; ``best.pt``
does not, which keeps the file that goes to the Hub small.

Loading uses ``torch.load(weights_only=True)``: a checkpoint from elsewhere (the Hub) is
data, never code.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from trainer.detector.model import FAMILY, SIZES, Detector, ModelError, build_model
from trainer.runfiles import atomic_save, utc_now_iso

FORMAT = "gpurent-trainer/1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used, with a one-line reason."""


def save_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` atomically (a reader never sees half a file)."""
    body = {"format": FORMAT, "date": utc_now_iso(), **payload}
    atomic_save(path, lambda tmp: torch.save(body, tmp))


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read and check a checkpoint; raises :class:`CheckpointError` (one line)."""
    where = str(path)
    if not Path(path).is_file():
        raise CheckpointError(f"checkpoint {where!r} does not exist")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"cannot read checkpoint {where!r}: {first[:200]}") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model_meta"), dict):
        raise CheckpointError(f"{where!r} is not a checkpoint of this trainer "
                              "(no model_meta)")
    meta = ckpt["model_meta"]
    if meta.get("family") != FAMILY:
        raise CheckpointError(f"{where!r}: unknown model family {meta.get('family')!r} "
                              f"(this trainer builds {FAMILY!r})")
    if meta.get("size") not in SIZES:
        raise CheckpointError(f"{where!r}: unknown {FAMILY} size {meta.get('size')!r}")
    if not isinstance(meta.get("nc"), int) or meta["nc"] < 1:
        raise CheckpointError(f"{where!r}: model_meta has no valid class count")
    if not isinstance(ckpt.get("model"), dict):
        raise CheckpointError(f"{where!r} holds no model weights")
    return ckpt


def model_meta(size: str, nc: int, names: tuple[str, ...], imgsz: int) -> dict[str, Any]:
    """The part of a checkpoint that rebuilds the architecture."""
    return {"family": FAMILY, "size": size, "nc": nc, "names": list(names), "imgsz": imgsz}


def model_from_checkpoint(ckpt: dict[str, Any]) -> Detector:
    """Rebuild the model a checkpoint describes, with its weights."""
    meta = ckpt["model_meta"]
    try:
        model = build_model(meta["size"], meta["nc"], meta.get("imgsz") or 640)
        model.load_state_dict(ckpt["model"])
    except (ModelError, RuntimeError) as exc:
        first = str(exc).strip().splitlines()[0]
        raise CheckpointError(f"checkpoint weights do not fit {FAMILY}-{meta['size']}: "
                              f"{first[:200]}") from None
    return model


def transfer_weights(model: nn.Module, state: dict[str, torch.Tensor]) -> tuple[int, int]:
    """Copy every tensor of ``state`` whose name and shape match ``model`` (fine-tuning
    onto a dataset with other classes keeps all but the class outputs). Returns
    ``(copied, total)`` tensor counts of the model."""
    own = model.state_dict()
    matching = {k: v for k, v in state.items() if k in own and own[k].shape == v.shape}
    model.load_state_dict(matching, strict=False)
    return len(matching), len(own)


def state_dict_cpu(model: nn.Module) -> dict[str, torch.Tensor]:
    """A float32, contiguous, CPU copy of the model's weights (portable checkpoints)."""
    out = {}
    for key, value in model.state_dict().items():
        value = value.detach().to("cpu")
        if value.is_floating_point():
            value = value.float()
        out[key] = value.contiguous()
    return out


def capture_rng(cuda_index: int | None = None) -> dict[str, Any]:
    """Python, NumPy, torch (and CUDA) random states, in types ``weights_only`` loads."""
    kind, keys, pos, has_gauss, gauss = np.random.get_state()
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": [kind, keys.tolist(), int(pos), int(has_gauss), float(gauss)],
        "torch": torch.get_rng_state(),
    }
    if cuda_index is not None:
        state["cuda"] = torch.cuda.get_rng_state(cuda_index)
    return state


def restore_rng(state: dict[str, Any], cuda_index: int | None = None) -> None:
    """Restore what :func:`capture_rng` saved (a CUDA state only onto a CUDA device)."""
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state:
        kind, keys, pos, has_gauss, gauss = state["numpy"]
        np.random.set_state((kind, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if "torch" in state:
        torch.set_rng_state(state["torch"].cpu())
    if cuda_index is not None and "cuda" in state:
        torch.cuda.set_rng_state(state["cuda"].cpu(), cuda_index)
