"""The values of ``train``'s ``key=value`` arguments, checked: one parser per key
(``PARSERS``), each raising ``ValueError`` with a short reason. Standard library only and
importing nothing of ours, so that the laptop checks the launch form's fields with the
very rules the trainer applies (``check``), and a box with only ``python3`` could too.
``trainer.engine.plan`` parses the command line with them."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

_HUB_REPO = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")
#: The built-in model sizes and their family (``trainer.detector.model`` builds them;
#: a test keeps the two in step).
MODEL_FAMILY = "gpdet"
MODEL_SIZES = ("n", "s", "m")
#: A model given as a checkpoint file.
CHECKPOINT_SUFFIXES = (".pt", ".pth")


def _bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("true", "1", "yes", "on"):
        return True
    if low in ("false", "0", "no", "off", ""):
        return False
    raise ValueError("expected True or False")


def _int(lo: int | None = None) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if lo is not None and value < lo:
            raise ValueError(f"must be at least {lo}")
        return value
    return parse


def _lr(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or value <= 0 or value > 1:
        raise ValueError("must be a number in (0, 1]")
    return value


def _imgsz(text: str) -> int:
    value = int(text)
    if value < 32 or value > 4096 or value % 32:
        raise ValueError("must be a multiple of 32 between 32 and 4096")
    return value


def _batch(text: str) -> int:
    value = int(text)
    if value < 1 and value != -1:
        raise ValueError("must be at least 1, or -1 for the largest that fits")
    return value


def _fraction(text: str) -> float:
    value = float(text)
    if not math.isfinite(value) or not 0.1 <= value <= 0.95:
        raise ValueError("must be a number between 0.1 and 0.95")
    return value


def _resume(text: str) -> bool | str:
    try:
        return _bool(text)
    except ValueError:
        return text


def _hub(text: str) -> str | None:
    if text.strip().lower() in ("", "none", "false"):
        return None
    if not _HUB_REPO.match(text):
        raise ValueError("expected ORG/NAME")
    return text


def _name(text: str) -> str:
    if not text or text in (".", "..") or "/" in text or "\\" in text:
        raise ValueError("must be a plain folder name")
    return text


def _nonempty(text: str) -> str:
    if not text.strip():
        raise ValueError("must not be empty")
    return text


PARSERS: dict[str, Callable[[str], Any]] = {
    "model": _nonempty, "data": _nonempty, "epochs": _int(1), "batch": _batch,
    "batch_fraction": _fraction, "imgsz": _imgsz, "device": str, "nproc": _int(0),
    "workers": _int(0), "project": _nonempty,
    "name": _name, "save_period": _int(), "resume": _resume, "seed": _int(0), "lr0": _lr,
    "patience": _int(0), "exist_ok": _bool, "val_period": _int(1), "hub": _hub,
    "hub_period": _int(0), "amp": _bool, "callbacks": str,
}


def parse_device(value: str) -> tuple[str, tuple[int, ...]]:
    """``("cpu", ())`` or ``("cuda", (indices...))``; ``("auto", ())`` for an empty value;
    ``ValueError`` for anything else."""
    text = value.strip().lower()
    if text in ("", "auto"):
        return "auto", ()
    if text == "cpu":
        return "cpu", ()
    if text in ("cuda", "gpu"):
        return "cuda", (0,)
    text = text.removeprefix("cuda:")
    try:
        indices = tuple(int(part) for part in text.split(",") if part.strip() != "")
    except ValueError:
        raise ValueError(f"device={value!r}: use cpu, 0, 0,1 or cuda:0") from None
    if not indices or any(i < 0 for i in indices):
        raise ValueError(f"device={value!r}: use cpu, 0, 0,1 or cuda:0")
    return "cuda", indices


def model_size(name: str) -> str | None:
    """The size letter of a built-in model name (``n``, ``gpdet-n``, ``gpdetn``...),
    ``None`` when ``name`` is none."""
    text = name.strip().lower()
    for prefix in (f"{MODEL_FAMILY}-", f"{MODEL_FAMILY}_", MODEL_FAMILY):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    return text if text in MODEL_SIZES else None


def _model(text: str) -> str:
    text = _nonempty(text)
    if model_size(text) is None and not text.endswith(CHECKPOINT_SUFFIXES) \
            and "/" not in text:
        raise ValueError(f"use {', '.join(MODEL_SIZES)} ({MODEL_FAMILY}-n…) or the path "
                         "of a .pt checkpoint")
    return text


def _device(text: str) -> str:
    parse_device(text)
    return text


#: What the form checks beyond ``PARSERS`` (which leave them to the plan, where a
#: checkpoint's existence and the GPUs are known): the model's name, the device's form.
CHECKS: dict[str, Callable[[str], Any]] = {"model": _model, "device": _device}


def check(key: str, value: str) -> str:
    """Why ``key=value`` would be refused by ``train`` ("" when it would not): an
    unknown key, or the value's parser's reason. The form's checks of one field."""
    parser = CHECKS.get(key) or PARSERS.get(key)
    if parser is None:
        return f"unknown argument {key!r} (train knows {', '.join(PARSERS)})"
    try:
        parser(value)
    except ValueError as exc:
        reason = str(exc)
        if reason.startswith(("invalid literal", "could not convert")):
            reason = "not a number"
        return reason.removeprefix(f"device={value!r}: ")
    return ""
