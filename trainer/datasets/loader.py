"""YOLO-format datasets: ``data.yaml``, labels, letterbox, augmentation and loaders.

``data.yaml`` holds ``train`` and ``val`` (a folder of images, a ``.txt`` list of image
paths, or a list of either), ``names`` (a list or an ``{id: name}`` mapping), optionally
``nc`` and ``path`` (the root the splits are relative to; relative to the yaml's own
folder, which is also the default). Labels live beside the images with ``images``
replaced by ``labels`` and the suffix by ``.txt``, one row ``class cx cy w h`` per box,
normalised. Every problem is reported as a :class:`DataError` with one line naming it.
"""

from __future__ import annotations

import os
import random
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from PIL import Image, UnidentifiedImageError
from torch.utils.data import DataLoader, Dataset, Sampler

from trainer.datasets.layout import IMAGE_SUFFIXES, label_path

PAD_VALUE = 114


class DataError(ValueError):
    """A dataset problem, with a one-line message that names the file and the fault."""


@dataclass(frozen=True)
class DataConfig:
    """A parsed ``data.yaml``: image files per split and the class names."""

    yaml_path: Path
    names: tuple[str, ...]
    train: tuple[Path, ...]
    val: tuple[Path, ...]

    @property
    def nc(self) -> int:
        """Number of classes."""
        return len(self.names)


def _parse_names(raw: dict[str, Any], where: str) -> tuple[str, ...]:
    names = raw.get("names")
    nc = raw.get("nc")
    if names is None:
        raise DataError(f"{where}: no 'names' (a list of class names or an {{id: name}} map)")
    if isinstance(names, dict):
        try:
            ids = sorted(int(k) for k in names)
        except (TypeError, ValueError):
            raise DataError(f"{where}: 'names' keys must be class ids 0..n-1") from None
        if ids != list(range(len(ids))):
            raise DataError(f"{where}: 'names' ids must be 0..{len(ids) - 1} without gaps")
        names = [names[k] if k in names else names[str(k)] for k in ids]
    if not isinstance(names, list) or not names:
        raise DataError(f"{where}: 'names' must be a non-empty list or {{id: name}} map")
    if nc is not None and (not isinstance(nc, int) or nc != len(names)):
        raise DataError(f"{where}: nc={nc!r} but 'names' lists {len(names)} classes")
    return tuple(str(n) for n in names)


def _split_files(root: Path, value: Any, split: str, where: str) -> tuple[Path, ...]:
    if value is None or value == "" or value == []:
        raise DataError(f"{where}: no '{split}' split")
    entries = value if isinstance(value, list) else [value]
    files: list[Path] = []
    for entry in entries:
        if not isinstance(entry, str):
            raise DataError(f"{where}: '{split}' must be a path or a list of paths")
        path = Path(entry) if Path(entry).is_absolute() else root / entry
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
        elif path.is_file() and path.suffix == ".txt":
            for line in path.read_text(encoding="utf-8").splitlines():
                line = line.strip()
                if line:
                    item = Path(line)
                    files.append(item if item.is_absolute() else path.parent / item)
        else:
            raise DataError(f"{where}: '{split}' split {str(path)!r} does not exist")
    if not files:
        raise DataError(f"{where}: '{split}' split has no images")
    return tuple(files)


def load_data_config(path: str | os.PathLike[str]) -> DataConfig:
    """Parse and check ``data.yaml``; raises :class:`DataError` with a one-line reason."""
    yaml_path = Path(path)
    where = str(yaml_path)
    try:
        raw = yaml.safe_load(yaml_path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"data file {where!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read data file {where!r}: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" (line {mark.line + 1})" if mark is not None else ""
        raise DataError(f"{where}: not valid YAML{at}") from None
    if not isinstance(raw, dict):
        raise DataError(f"{where}: expected a mapping with train, val and names")
    names = _parse_names(raw, where)
    root = yaml_path.parent
    if raw.get("path"):
        base = Path(str(raw["path"]))
        root = base if base.is_absolute() else yaml_path.parent / base
    train = _split_files(root, raw.get("train"), "train", where)
    val = _split_files(root, raw.get("val"), "val", where)
    return DataConfig(yaml_path.resolve(), names, train, val)


def read_labels(path: Path, nc: int) -> np.ndarray:
    """Rows ``class cx cy w h`` of a label file as ``(N, 5)`` float32; a missing file means
    no objects. Malformed rows raise :class:`DataError` naming the file and line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return np.zeros((0, 5), dtype=np.float32)
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read label file {path}: {exc}") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields:
            continue
        if len(fields) != 5:
            raise DataError(f"{path}:{number}: expected 'class cx cy w h', got "
                            f"{len(fields)} fields")
        try:
            values = [float(f) for f in fields]
        except ValueError:
            raise DataError(f"{path}:{number}: not a number in {line.strip()[:60]!r}") from None
        cls = values[0]
        if cls != int(cls) or not 0 <= cls < nc:
            raise DataError(f"{path}:{number}: class {fields[0]} outside 0..{nc - 1}")
        if not all(np.isfinite(values)) or values[3] <= 0 or values[4] <= 0:
            raise DataError(f"{path}:{number}: box needs finite values and positive size")
        rows.append(values)
    return np.asarray(rows, dtype=np.float32).reshape(-1, 5)


def letterbox(image: Image.Image, size: int) -> tuple[np.ndarray, float, tuple[int, int]]:
    """Resize keeping the aspect ratio so the long side is ``size``, pad to a square.
    Returns the ``(size, size, 3)`` uint8 array, the scale and the ``(left, top)`` pad."""
    w, h = image.size
    scale = size / max(w, h)
    new_w, new_h = max(1, round(w * scale)), max(1, round(h * scale))
    if (new_w, new_h) != (w, h):
        image = image.resize((new_w, new_h), Image.BILINEAR)
    canvas = np.full((size, size, 3), PAD_VALUE, dtype=np.uint8)
    left, top = (size - new_w) // 2, (size - new_h) // 2
    canvas[top:top + new_h, left:left + new_w] = np.asarray(image)
    return canvas, scale, (left, top)


def hsv_jitter(pixels: np.ndarray, rng: np.random.Generator, *, hue: float = 0.015,
               saturation: float = 0.5, value: float = 0.3) -> np.ndarray:
    """Random hue shift and saturation/value gains, as Ultralytics' ``hsv_h/s/v``, done
    with one lookup table per channel (cheap enough for the loader workers)."""
    gains = rng.uniform(-1, 1, 3) * (hue, saturation, value) + (0, 1, 1)
    levels = np.arange(256, dtype=np.float32)
    tables = (((levels + gains[0] * 255) % 256).astype(np.uint8),
              np.clip(levels * gains[1], 0, 255).astype(np.uint8),
              np.clip(levels * gains[2], 0, 255).astype(np.uint8))
    channels = Image.fromarray(pixels).convert("HSV").split()
    jittered = [c.point(t.tolist()) for c, t in zip(channels, tables)]
    return np.asarray(Image.merge("HSV", jittered).convert("RGB"))


class YoloDataset(Dataset):
    """Letterboxed images and their boxes. Items are indexed by ``(epoch, index)`` pairs
    (see :class:`EpochSampler`), so augmentation is a pure function of seed, epoch and
    index, the same with any number of loader workers and after a resume."""

    def __init__(self, images: Sequence[Path], nc: int, imgsz: int, *, augment: bool,
                 seed: int = 0) -> None:
        self.images = list(images)
        self.imgsz = imgsz
        self.augment = augment
        self.seed = seed
        # Labels are read (and checked) up front, so that a broken file stops the run
        # before any training rather than in the middle of an epoch.
        self.labels = [read_labels(label_path(p), nc) for p in self.images]

    def __len__(self) -> int:
        return len(self.images)

    def load_image(self, index: int) -> Image.Image:
        """Open image ``index`` as RGB; an unreadable image raises :class:`DataError`."""
        path = self.images[index]
        try:
            with Image.open(path) as img:
                return img.convert("RGB")
        except (OSError, UnidentifiedImageError) as exc:
            raise DataError(f"cannot read image {path}: {exc}") from None

    def __getitem__(self, key: tuple[int, int] | int) -> tuple[torch.Tensor, torch.Tensor]:
        epoch, index = key if isinstance(key, tuple) else (0, key)
        image = self.load_image(index)
        pixels, scale, (left, top) = letterbox(image, self.imgsz)
        w, h = image.size
        labels = self.labels[index].copy()
        boxes = np.empty((len(labels), 4), dtype=np.float32)  # xyxy pixels, letterboxed
        boxes[:, 0] = (labels[:, 1] - labels[:, 3] / 2) * w * scale + left
        boxes[:, 1] = (labels[:, 2] - labels[:, 4] / 2) * h * scale + top
        boxes[:, 2] = (labels[:, 1] + labels[:, 3] / 2) * w * scale + left
        boxes[:, 3] = (labels[:, 2] + labels[:, 4] / 2) * h * scale + top
        np.clip(boxes, 0, self.imgsz, out=boxes)
        visible = ((boxes[:, 2] - boxes[:, 0]) >= 1) & ((boxes[:, 3] - boxes[:, 1]) >= 1)
        labels, boxes = labels[visible], boxes[visible]
        if self.augment:
            rng = np.random.default_rng([self.seed, epoch, index])
            pixels = hsv_jitter(pixels, rng)
            if rng.random() < 0.5:
                pixels = pixels[:, ::-1]
                boxes[:, [0, 2]] = self.imgsz - boxes[:, [2, 0]]
        target = np.concatenate((labels[:, :1], boxes), axis=1)
        image_t = torch.from_numpy(np.ascontiguousarray(pixels.transpose(2, 0, 1)))
        return image_t, torch.from_numpy(target)


def collate(batch: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack images ``(B, 3, S, S)`` uint8; concatenate boxes as ``(N, 6)`` rows of
    ``image_index class x0 y0 x1 y1`` so that images may hold any number of boxes."""
    images = torch.stack([item[0] for item in batch])
    rows = [torch.cat((torch.full((len(t), 1), float(i)), t), dim=1)
            for i, (_, t) in enumerate(batch)]
    return images, torch.cat(rows) if rows else torch.zeros((0, 6))


class EpochSampler(Sampler):
    """Yields ``(epoch, index)`` keys, shuffled by ``(seed, epoch)`` when ``shuffle``.

    With ``world`` > 1 it is the distributed sampler: every rank draws the same order and
    takes every ``world``-th key from ``rank`` on. ``pad`` (training) repeats the first keys
    so that every rank gets as many, as ``DistributedSampler`` does: ranks that ran out of
    batches early would leave the others waiting in a gradient all-reduce. Validation
    shards are not padded, since a repeated image would be counted twice in the metrics.
    The keys carry the epoch, which ``DistributedSampler``'s plain indices cannot."""

    def __init__(self, size: int, *, shuffle: bool, seed: int = 0, rank: int = 0,
                 world: int = 1, pad: bool = True) -> None:
        self.size = size
        self.shuffle = shuffle
        self.seed = seed
        self.rank, self.world, self.pad = rank, world, pad
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch whose order (and augmentation) the next pass uses."""
        self.epoch = epoch

    def __len__(self) -> int:
        if self.pad:
            return -(-self.size // self.world)
        return len(range(self.rank, self.size, self.world))

    def __iter__(self) -> Iterator[tuple[int, int]]:
        if self.shuffle:
            generator = torch.Generator().manual_seed(self.seed * 100003 + self.epoch)
            order = torch.randperm(self.size, generator=generator).tolist()
        else:
            order = list(range(self.size))
        if self.pad and order and self.size % self.world:
            total = len(self) * self.world
            order = (order * -(-total // self.size))[:total]
        return iter([(self.epoch, i) for i in order[self.rank::self.world]])


def _worker_init(worker_id: int) -> None:
    # A graceful stop signals the trainer's whole process group (remote.runs.stop), and a
    # Ctrl-C reaches the terminal's foreground group. A worker killed by either would make
    # the main process raise instead of finishing its step, so workers leave the group:
    # the main process shuts them down itself, and they exit when it dies (torch's
    # watchdog). Their SIGTERM stays deadly, which torch's own shutdown relies on.
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)


def make_loader(dataset: YoloDataset, *, batch: int, workers: int, shuffle: bool,
                pin_memory: bool, seed: int = 0, rank: int = 0, world: int = 1,
                pad: bool = True) -> tuple[DataLoader, EpochSampler]:
    """A loader over ``dataset`` (this rank's share of it) and the sampler whose epoch the
    caller advances. ``batch`` is the batch of this process."""
    sampler = EpochSampler(len(dataset), shuffle=shuffle, seed=seed, rank=rank, world=world,
                           pad=pad)
    loader = DataLoader(
        dataset, batch_size=batch, sampler=sampler, num_workers=workers,
        collate_fn=collate, pin_memory=pin_memory, drop_last=False,
        persistent_workers=workers > 0, worker_init_fn=_worker_init if workers else None,
        prefetch_factor=4 if workers else None,
    )
    return loader, sampler
