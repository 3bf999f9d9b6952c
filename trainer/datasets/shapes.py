"""``python -m trainer shapes DIR``: a synthetic YOLO-format detection dataset.

Coloured circles, squares, triangles and crosses of many sizes on noisy backgrounds, some
overlapping. Every image is drawn from its own random generator seeded by ``(seed, split,
index)``, so a dataset is identical for a seed on every machine and the first N images of
a bigger set equal a smaller one. The demo and the tests train on it.

Layout (what ``data.yaml`` points at)::

    DIR/data.yaml
    DIR/images/{train,val}/000000.png
    DIR/labels/{train,val}/000000.txt     # class cx cy w h, normalised
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASS_NAMES = ("circle", "square", "triangle", "cross")

#: Defaults chosen so that the CPU acceptance benchmark (docs/BENCHMARKS.md) holds.
DEFAULT_TRAIN = 800
DEFAULT_VAL = 200
DEFAULT_IMGSZ = 128

_SPLIT_IDS = {"train": 0, "val": 1}
_MAX_OBJECTS = 4
_MAX_OVERLAP_IOU = 0.25


def _iou(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    ix = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    iy = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = ix * iy
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return inter / union if union > 0 else 0.0


def _colour_far_from(rng: np.random.Generator, ref: np.ndarray) -> tuple[int, int, int]:
    """A random colour at least a fixed RGB distance away from ``ref`` (the background)."""
    for _ in range(50):
        colour = rng.integers(0, 256, 3)
        if np.linalg.norm(colour.astype(float) - ref) > 120:
            break
    return int(colour[0]), int(colour[1]), int(colour[2])


def _draw_shape(draw: ImageDraw.ImageDraw, cls: int, box: tuple[float, float, float, float],
                colour: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    if cls == 0:
        draw.ellipse(box, fill=colour)
    elif cls == 1:
        draw.rectangle(box, fill=colour)
    elif cls == 2:
        draw.polygon([((x0 + x1) / 2, y0), (x1, y1), (x0, y1)], fill=colour)
    else:
        tw, th = (x1 - x0) / 3, (y1 - y0) / 3
        draw.rectangle((x0 + tw, y0, x1 - tw, y1), fill=colour)
        draw.rectangle((x0, y0 + th, x1, y1 - th), fill=colour)


def render_image(seed: int, split: str, index: int,
                 imgsz: int) -> tuple[Image.Image, list[tuple[int, float, float, float, float]]]:
    """Draw image ``index`` of ``split`` and return it with its normalised YOLO labels."""
    rng = np.random.default_rng([seed, _SPLIT_IDS[split], index])
    background = rng.integers(0, 256, 3).astype(float)
    pixels = np.empty((imgsz, imgsz, 3), dtype=float)
    pixels[:] = background
    # A gentle gradient plus noise, so that flat colour alone does not give objects away.
    ramp = np.linspace(-1.0, 1.0, imgsz)
    pixels += (rng.uniform(-30, 30, 3) * ramp[:, None, None])
    pixels += rng.normal(0.0, 12.0, pixels.shape)
    image = Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)

    boxes: list[tuple[float, float, float, float]] = []
    labels: list[tuple[int, float, float, float, float]] = []
    for _ in range(int(rng.integers(1, _MAX_OBJECTS + 1))):
        for _attempt in range(20):
            side = rng.uniform(0.14, 0.45) * imgsz
            aspect = rng.uniform(0.75, 1.33)
            w, h = side * aspect ** 0.5, side / aspect ** 0.5
            x0, y0 = rng.uniform(0, imgsz - w), rng.uniform(0, imgsz - h)
            box = (x0, y0, x0 + w, y0 + h)
            if all(_iou(box, other) < _MAX_OVERLAP_IOU for other in boxes):
                break
        else:
            continue
        cls = int(rng.integers(0, len(CLASS_NAMES)))
        _draw_shape(draw, cls, box, _colour_far_from(rng, background))
        boxes.append(box)
        labels.append((cls, (box[0] + box[2]) / 2 / imgsz, (box[1] + box[3]) / 2 / imgsz,
                       w / imgsz, h / imgsz))
    return image, labels


_MARKER = "# synthetic shapes:"


def _clear_previous(root: Path) -> None:
    """Remove the files of an earlier shapes dataset in ``root``, so that a smaller set
    does not inherit images from a bigger one. Refuses a folder holding anything else."""
    if not root.exists() or not any(root.iterdir()):
        return
    data_yaml = root / "data.yaml"
    try:
        ours = data_yaml.read_text(encoding="utf-8").startswith(_MARKER)
    except (OSError, UnicodeDecodeError):
        ours = False
    if not ours:
        raise FileExistsError(f"{root} is not empty and holds no shapes dataset; "
                              "pick a new folder")
    for split in _SPLIT_IDS:
        for pattern, sub in (("[0-9]*.png", "images"), ("[0-9]*.txt", "labels")):
            for path in (root / sub / split).glob(pattern):
                path.unlink()


def write_dataset(root: str | Path, *, train: int = DEFAULT_TRAIN, val: int = DEFAULT_VAL,
                  imgsz: int = DEFAULT_IMGSZ, seed: int = 0) -> Path:
    """Write the dataset under ``root`` and return the path of its ``data.yaml``."""
    root = Path(root)
    _clear_previous(root)
    for split, count in (("train", train), ("val", val)):
        images, labels = root / "images" / split, root / "labels" / split
        images.mkdir(parents=True, exist_ok=True)
        labels.mkdir(parents=True, exist_ok=True)
        for index in range(count):
            image, rows = render_image(seed, split, index, imgsz)
            image.save(images / f"{index:06d}.png")
            text = "".join(f"{c} {x:.6f} {y:.6f} {w:.6f} {h:.6f}\n" for c, x, y, w, h in rows)
            (labels / f"{index:06d}.txt").write_text(text, encoding="utf-8")
    # No ``path`` key: readers (ours and LibreYOLO's) then resolve splits next to the yaml,
    # so the folder can be moved or uploaded as it is.
    names = "\n".join(f"  {i}: {name}" for i, name in enumerate(CLASS_NAMES))
    yaml_text = (f"{_MARKER} seed={seed} imgsz={imgsz} train={train} val={val}\n"
                 f"train: images/train\nval: images/val\nnc: {len(CLASS_NAMES)}\n"
                 f"names:\n{names}\n")
    data_yaml = root / "data.yaml"
    data_yaml.write_text(yaml_text, encoding="utf-8")
    return data_yaml


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _size(text: str) -> int:
    value = int(text)
    if not 32 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"must be between 32 and 4096, got {value}")
    return value


def main(argv: Sequence[str]) -> int:
    """Entry point of ``python -m trainer shapes``."""
    parser = argparse.ArgumentParser(
        prog="python -m trainer shapes",
        description="Write a synthetic YOLO-format dataset of coloured shapes.")
    parser.add_argument("dir", help="output folder (new, empty, or an earlier shapes dataset)")
    parser.add_argument("--train", type=_positive, default=DEFAULT_TRAIN,
                        help=f"training images (default {DEFAULT_TRAIN})")
    parser.add_argument("--val", type=_positive, default=DEFAULT_VAL,
                        help=f"validation images (default {DEFAULT_VAL})")
    parser.add_argument("--imgsz", type=_size, default=DEFAULT_IMGSZ,
                        help=f"image side in pixels (default {DEFAULT_IMGSZ})")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args(list(argv))
    try:
        data_yaml = write_dataset(args.dir, train=args.train, val=args.val,
                                  imgsz=args.imgsz, seed=args.seed)
    except FileExistsError as exc:
        print(f"shapes: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"shapes: cannot write {args.dir}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"data": str(data_yaml.resolve()), "train": args.train,
                          "val": args.val, "imgsz": args.imgsz, "seed": args.seed,
                          "names": list(CLASS_NAMES)}))
    else:
        print(f"wrote {args.train} train + {args.val} val images to {data_yaml.resolve()}")
    return 0
