"""doctor: the clean shared shapes dataset passes; each planted fault in a corrupted copy is found
with the right severity; the dataset is never modified."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.fixtures.shapes import TRAIN_IMAGES, VAL_IMAGES
from trainer.checks import doctor
from trainer.checks.labels import check_label_text


@pytest.fixture()
def dataset(shapes_data: Path, tmp_path: Path) -> Path:
    """A private copy of the shared shapes dataset, to corrupt."""
    copy = tmp_path / "ds"
    shutil.copytree(shapes_data.parent, copy)
    return copy


def tree_hash(root: Path) -> str:
    """One hash over every path, mode, mtime and content under ``root``."""
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files) + dirs:
            path = Path(dirpath, name)
            st = path.lstat()
            h.update(f"{path.relative_to(root)}|{st.st_mode}|{st.st_mtime_ns}".encode())
            if path.is_file():
                h.update(path.read_bytes())
    return h.hexdigest()


def examine(root: Path) -> dict:
    """Run the doctor on ``root/data.yaml``, checking that nothing under root changed."""
    before = tree_hash(root)
    report = doctor.run_doctor(root / "data.yaml", workers=2)
    assert tree_hash(root) == before, "the doctor modified the dataset"
    return report


def finding(report: dict, kind: str) -> dict:
    """The finding of ``kind``, failing the test when there is none."""
    found = [f for f in report["findings"] if f["kind"] == kind]
    assert found, f"no {kind!r} finding in {[f['kind'] for f in report['findings']]}"
    return found[0]


def edit_label(root: Path, split: str, index: int, line: int, text: str) -> None:
    """Replace line ``line`` (1-based) of a label file."""
    path = root / "labels" / split / f"{index:06d}.txt"
    lines = path.read_text().splitlines()
    lines[line - 1] = text
    path.write_text("\n".join(lines) + "\n")


def test_clean_dataset_passes(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    report = examine(dataset)
    assert report["ok"] and report["errors"] == 0 and report["warnings"] == 0
    assert report["findings"] == []
    assert report["splits"]["train"]["images"] == TRAIN_IMAGES
    assert report["splits"]["val"]["labels"] == VAL_IMAGES
    labels = (dataset / "labels" / "train").glob("*.txt")
    rows = sum(len(p.read_text().splitlines()) for p in labels)
    table = report["classes"]
    assert sum(c["instances"]["train"] for c in table) == rows == \
        report["splits"]["train"]["instances"]
    assert [c["name"] for c in table] == ["circle", "square", "triangle", "cross"]
    assert doctor.main([str(dataset / "data.yaml")]) == 0
    out = capsys.readouterr().out
    assert "class balance" in out and "result: ok" in out


def plant_bad_yaml(root: Path) -> None:
    (root / "data.yaml").write_text("train: images/train\nval: [images/val\nnames: [a]\n")


def plant_missing_dir(root: Path) -> None:
    text = (root / "data.yaml").read_text().replace("val: images/val", "val: images/valid")
    (root / "data.yaml").write_text(text)


def plant_empty_split(root: Path) -> None:
    for sub in ("images", "labels"):
        for path in (root / sub / "val").iterdir():
            path.unlink()


def plant_corrupt_image(root: Path) -> None:
    path = root / "images" / "train" / "000002.png"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def plant_unreadable_image(root: Path) -> None:
    (root / "images" / "train" / "000003.png").write_bytes(b"not an image at all")


def plant_field_count(root: Path) -> None:
    edit_label(root, "train", 0, 1, "1 0.5 0.5 0.2")


def plant_not_a_number(root: Path) -> None:
    edit_label(root, "train", 1, 1, "1 0.5 abc 0.2 0.2")


def plant_class_id(root: Path) -> None:
    edit_label(root, "val", 0, 1, "7 0.5 0.5 0.2 0.2")


def plant_out_of_range(root: Path) -> None:
    edit_label(root, "train", 2, 1, "0 1.5 0.5 0.2 0.2")


def plant_bad_size(root: Path) -> None:
    edit_label(root, "train", 3, 1, "0 0.5 0.5 0.0 0.2")


def plant_missing_label(root: Path) -> None:
    (root / "labels" / "train" / "000004.txt").unlink()


def plant_orphan_label(root: Path) -> None:
    (root / "images" / "train" / "000005.png").unlink()


def plant_duplicate_image(root: Path) -> None:
    for sub, suffix in (("images", ".png"), ("labels", ".txt")):
        shutil.copy(root / sub / "train" / f"000006{suffix}", root / sub / "train" / f"dup{suffix}")


def plant_split_leak(root: Path) -> None:
    for sub, suffix in (("images", ".png"), ("labels", ".txt")):
        shutil.copy(root / sub / "train" / f"000007{suffix}", root / sub / "val" / f"leak{suffix}")


def plant_unreadable_label(root: Path) -> None:
    (root / "labels" / "train" / "000008.txt").write_bytes(b"\xff\xfe0 0.5\x00")


def plant_empty_test(root: Path) -> None:
    (root / "images" / "test").mkdir()
    with open(root / "data.yaml", "a") as fh:
        fh.write("test: images/test\n")


def plant_unused_class(root: Path) -> None:
    for path in (root / "labels" / "train").glob("*.txt"):
        rows = [r for r in path.read_text().splitlines() if not r.startswith("3 ")]
        path.write_text("".join(r + "\n" for r in rows))


@pytest.mark.parametrize(("plant", "kind", "severity"), [
    (plant_bad_yaml, "yaml", "error"),
    (plant_missing_dir, "missing_dir", "error"),
    (plant_empty_split, "empty_split", "error"),
    (plant_corrupt_image, "corrupt_image", "error"),
    (plant_unreadable_image, "corrupt_image", "error"),
    (plant_field_count, "field_count", "error"),
    (plant_not_a_number, "not_a_number", "error"),
    (plant_class_id, "class_id", "error"),
    (plant_out_of_range, "out_of_range", "error"),
    (plant_bad_size, "bad_size", "error"),
    (plant_unreadable_label, "unreadable_label", "error"),
    (plant_missing_label, "missing_label", "warning"),
    (plant_orphan_label, "orphan_label", "warning"),
    (plant_duplicate_image, "duplicate_image", "warning"),
    (plant_split_leak, "split_leak", "warning"),
    (plant_unused_class, "unused_class", "warning"),
    (plant_empty_test, "empty_test", "warning"),
])
def test_each_planted_fault_is_found(dataset: Path, plant: Callable[[Path], None], kind: str,
                                     severity: str) -> None:
    plant(dataset)
    report = examine(dataset)
    found = finding(report, kind)
    assert found["severity"] == severity and found["count"] >= 1
    assert report["ok"] is (severity == "warning")
    # Only the planted fault (a leaked image is also a duplicate).
    others = {f["kind"] for f in report["findings"]} - {kind, "duplicate_image"}
    assert others == set()


def test_examples_quote_file_and_line(dataset: Path) -> None:
    plant_out_of_range(dataset)
    found = finding(examine(dataset), "out_of_range")
    assert found["examples"] == ["labels/train/000002.txt:1: coordinate 1.5 outside [0, 1]"]


def test_exit_codes_and_json(dataset: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plant_class_id(dataset)
    assert doctor.main([str(dataset / "data.yaml"), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "gpurent.doctor/1" and report["errors"] == 1
    assert doctor.main([str(dataset / "nope.yaml")]) == 2
    assert capsys.readouterr().err.strip() == f"doctor: {dataset / 'nope.yaml'}: no such file"


def test_label_rows() -> None:
    result = check_label_text("0 0.5 0.5 0.1 0.1\n\n3 1.0000001 0 0.2 0.3\n"
                              "1 0.5 0.5 -0.1 0.2\n1.0 0.5 0.5 0.2 0.2\n1.5 0.5 0.5 0.2 0.2\n"
                              "2 nan 0.5 0.2 0.2\n", nc=4)
    assert result.classes == [0, 3, 1]
    assert [(p.kind, p.line) for p in result.problems] == [
        ("bad_size", 4), ("class_id", 6), ("not_a_number", 7)]
