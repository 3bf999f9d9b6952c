"""Where a YOLO-format dataset keeps its files; shared by the data loader (torch) and the
dataset doctor (standard library only), so that both agree on what an image is and
where its labels live."""

from __future__ import annotations

from pathlib import Path

#: Image file suffixes (lower case) that count as dataset images.
IMAGE_SUFFIXES = frozenset({".bmp", ".jpg", ".jpeg", ".png", ".tif", ".tiff", ".webp", ".mpo"})


def label_path(image: Path) -> Path:
    """The label file of ``image``: the last ``images`` folder becomes ``labels`` and the
    suffix ``.txt`` (``d/images/train/a.jpg`` -> ``d/labels/train/a.txt``)."""
    parts = list(image.parts)
    for i in range(len(parts) - 2, -1, -1):
        if parts[i] == "images":
            parts[i] = "labels"
            break
    return Path(*parts).with_suffix(".txt")
