"""Datasets: the shapes generator, data.yaml checks (one-line errors before training),
labels, letterbox, augmentation and the loader."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from tests.fixtures.paths import ROOT
from trainer.datasets import shapes
from trainer.datasets.layout import label_path
from trainer.datasets.loader import (
    DataError,
    YoloDataset,
    collate,
    load_data_config,
    make_loader,
    read_labels,
)
from trainer.engine.command import main as train_main

# ------------------------------------------------------------------ the shapes dataset


def test_shapes_are_deterministic_per_seed(tmp_path: Path) -> None:
    a = shapes.write_dataset(tmp_path / "a", train=6, val=2, imgsz=64, seed=3)
    b = shapes.write_dataset(tmp_path / "b", train=4, val=2, imgsz=64, seed=3)
    c = shapes.write_dataset(tmp_path / "c", train=4, val=2, imgsz=64, seed=4)
    for i in range(4):
        name = f"{i:06d}"
        assert (a.parent / f"images/train/{name}.png").read_bytes() == \
            (b.parent / f"images/train/{name}.png").read_bytes()
        assert (a.parent / f"labels/train/{name}.txt").read_text() == \
            (b.parent / f"labels/train/{name}.txt").read_text()
    assert (a.parent / "images/train/000000.png").read_bytes() != \
        (c.parent / "images/train/000000.png").read_bytes()
    config = load_data_config(a)
    assert config.names == shapes.CLASS_NAMES and len(config.train) == 6
    labels = np.concatenate([read_labels(label_path(p), 4) for p in config.train])
    assert len(labels) >= 6 and labels[:, 1:].min() > 0 and labels[:, 1:].max() < 1
    assert Image.open(config.train[0]).size == (64, 64)


def test_shapes_command_rewrites_its_own_folder_only(tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    out = tmp_path / "set"
    assert shapes.main([str(out), "--train", "5", "--val", "2", "--imgsz", "64"]) == 0
    assert shapes.main([str(out), "--train", "3", "--val", "1", "--imgsz", "64"]) == 0
    assert len(list((out / "images/train").glob("*.png"))) == 3
    assert len(list((out / "labels/val").glob("*.txt"))) == 1
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert shapes.main([str(other), "--train", "2"]) == 2
    err = capsys.readouterr().err
    assert "is not empty" in err and err.count("\n") == 1
    assert (other / "notes.txt").read_text() == "mine"


# ------------------------------------------------------------------ errors before training


def write_yaml(folder: Path, text: str) -> Path:
    """A data.yaml with ``text`` next to a copy of nothing."""
    path = folder / "data.yaml"
    path.write_text(text)
    return path


def train_error(argv: list[str], capsys: pytest.CaptureFixture, tmp_path: Path) -> str:
    """Run ``train`` in-process, expect exit 2 and one line on stderr, nothing written."""
    capsys.readouterr()
    assert train_main([*argv, f"project={tmp_path / 'runs'}"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("train: ") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err + captured.out
    assert not (tmp_path / "runs").exists()
    return captured.err


@pytest.mark.parametrize(("text", "message"), [
    ("train: [unclosed", "not valid YAML"),
    ("- just\n- a list\n", "expected a mapping"),
    ("train: images/train\nval: images/val\n", "no 'names'"),
    ("train: images/train\nval: images/val\nnc: 3\nnames: [a, b]\n", "nc=3 but 'names' lists 2"),
    ("train: images/train\nval: images/val\nnames: {0: a, 2: b}\n", "without gaps"),
    ("train: images/train\nnames: [a, b, c, d]\n", "no 'val' split"),
    ("train: images/train\nval: images/missing\nnames: [a, b, c, d]\n",
     "'val' split '"),
])
def test_bad_data_yaml_is_a_one_line_error(text: str, message: str, shapes_data: Path,
                                           tmp_path: Path,
                                           capsys: pytest.CaptureFixture) -> None:
    folder = tmp_path / "data"
    shutil.copytree(shapes_data.parent, folder)
    err = train_error([f"data={write_yaml(folder, text)}", "imgsz=64"], capsys, tmp_path)
    assert message in err


def test_missing_data_and_empty_split_and_bad_labels(shapes_data: Path, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture) -> None:
    assert "does not exist" in train_error([f"data={tmp_path / 'nope.yaml'}"], capsys,
                                           tmp_path)
    folder = tmp_path / "data"
    shutil.copytree(shapes_data.parent, folder)
    (folder / "images/empty").mkdir()
    empty = folder / "empty.yaml"
    empty.write_text("train: images/train\nval: images/empty\nnames: [a, b, c, d]\n")
    assert "'val' split has no images" in train_error([f"data={empty}"], capsys, tmp_path)
    label = folder / "labels/train/000003.txt"
    label.write_text("7 0.5 0.5 0.2 0.2\n")
    err = train_error([f"data={folder / 'data.yaml'}"], capsys, tmp_path)
    assert f"{label}:1: class 7 outside 0..3" in err
    label.write_text("0 0.5 0.5 0.2\n")
    assert "expected 'class cx cy w h'" in train_error([f"data={folder / 'data.yaml'}"],
                                                       capsys, tmp_path)


def test_unknown_models_and_checkpoints_fail_before_training(
        shapes_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    data = f"data={shapes_data}"
    assert "unknown model 'yolov99'" in train_error([data, "model=yolov99"], capsys, tmp_path)
    assert "does not exist" in train_error([data, f"model={tmp_path / 'x.pt'}"], capsys,
                                           tmp_path)
    foreign = tmp_path / "foreign.pt"
    torch.save({"model_meta": {"family": "yolox", "size": "s", "nc": 80}, "model": {}},
               foreign)
    assert "unknown model family 'yolox'" in train_error([data, f"model={foreign}"], capsys,
                                                          tmp_path)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"not a checkpoint")
    assert "cannot read checkpoint" in train_error([data, f"model={garbage}"], capsys,
                                                   tmp_path)
    assert "no " in train_error([data, "resume=True", "name=none"], capsys, tmp_path)
    assert "data= is required" in train_error(["model=n"], capsys, tmp_path)


def test_command_line_errors_exit_2_without_a_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "trainer", "train", f"data={tmp_path / 'missing.yaml'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "does not exist" in result.stderr
    assert not (tmp_path / "runs").exists()


# ------------------------------------------------------------------ loading


def test_names_map_and_txt_lists(shapes_data: Path, tmp_path: Path) -> None:
    folder = tmp_path / "data"
    shutil.copytree(shapes_data.parent, folder)
    listing = folder / "train.txt"
    listing.write_text("images/train/000001.png\nimages/train/000002.png\n")
    config = load_data_config(write_yaml(
        folder, "path: .\ntrain: train.txt\nval: [images/val]\nnames: {0: a, 1: b, 2: c, 3: d}\n"))
    assert config.names == ("a", "b", "c", "d") and config.nc == 4
    assert [p.name for p in config.train] == ["000001.png", "000002.png"]
    assert label_path(Path("/d/images/x/images/a.jpg")) == Path("/d/images/x/labels/a.txt")


def test_letterbox_moves_boxes_with_the_pixels(tmp_path: Path) -> None:
    images, labels = tmp_path / "images", tmp_path / "labels"
    images.mkdir()
    labels.mkdir()
    pixels = np.zeros((50, 100, 3), dtype=np.uint8)
    pixels[10:30, 60:90] = (255, 0, 0)  # a red box, x 60..90, y 10..30
    Image.fromarray(pixels).save(images / "wide.png")
    (labels / "wide.txt").write_text("1 0.75 0.4 0.3 0.4\n")
    plain = YoloDataset([images / "wide.png"], 2, 64, augment=False)
    image, target = plain[0]
    assert image.shape == (3, 64, 64) and image.dtype == torch.uint8
    # scale 0.64, padded 16 px top and bottom
    assert target[0].tolist() == pytest.approx([1, 38.4, 22.4, 57.6, 35.2], abs=1e-4)
    assert image[0, 28, 48] == 255 and image[0, 5, 48] == 114
    augmented = YoloDataset([images / "wide.png"], 2, 64, augment=True)
    flips = 0
    for epoch in range(6):
        image, target = augmented[(epoch, 0)]
        x0, y0, x1, y1 = target[0, 1:].tolist()
        inside = image[:, int((y0 + y1) / 2), int((x0 + x1) / 2)].int()
        assert inside[0] > inside[1] + 60  # still red(ish) after HSV jitter
        flips += x0 < 32
        assert torch.equal(augmented[(epoch, 0)][0], image)  # a function of (epoch, index)
    assert 0 < flips < 6


def test_loader_batches_variable_box_counts_the_same_with_workers(shapes_data: Path) -> None:
    config = load_data_config(shapes_data)
    dataset = YoloDataset(config.train, 4, 64, augment=True, seed=1)
    images, targets = collate([dataset[(0, 0)], dataset[(0, 1)], dataset[(0, 2)]])
    counts = [len(dataset.labels[i]) for i in range(3)]
    assert images.shape == (3, 3, 64, 64) and targets.shape == (sum(counts), 6)
    assert targets[:, 0].tolist() == [i for i, n in enumerate(counts) for _ in range(n)]

    def batches(workers: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        loader, sampler = make_loader(dataset, batch=5, workers=workers, shuffle=True,
                                      pin_memory=False, seed=1)
        sampler.set_epoch(2)
        return list(loader)

    inline, parallel = batches(0), batches(2)
    assert len(inline) == 4
    for (a_img, a_tgt), (b_img, b_tgt) in zip(inline, parallel, strict=True):
        assert torch.equal(a_img, b_img) and torch.equal(a_tgt, b_tgt)


def test_unreadable_image_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / "images").mkdir()
    (tmp_path / "images/a.png").write_bytes(b"garbage")
    with pytest.raises(DataError, match="cannot read image .*a.png"):
        YoloDataset([tmp_path / "images/a.png"], 1, 64, augment=False)[0]
