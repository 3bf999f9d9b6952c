"""``python3 -m trainer doctor DATA_YAML``: find what is wrong with a YOLO dataset.

Finds parse errors in data.yaml, missing split directories, empty splits, images without
labels and labels without images, malformed label rows (field count, non-numbers, class
ids outside 0..nc-1, coordinates outside [0, 1], zero or negative sizes), duplicate
images (by content hash), unreadable or corrupt images, and prints a class balance table.
Errors and warnings are told apart. Exit codes: 0 no errors (warnings allowed), 1 errors
found, 2 bad arguments or pyyaml/Pillow missing. ``--json`` prints ``gpurent.doctor/1``
(docs/SCHEMAS.md).

The dataset is only read, never written: no cache files, no fixes.
data.yaml follows the Ultralytics/LibreYOLO convention: ``path`` (root; relative to the
yaml's folder; absent means that folder), ``train``/``val``/``test`` (a folder of
images, a .txt list of image paths, or a list of either), ``names`` (list or {id: name}),
``nc`` (optional when ``names`` is given). Labels live where the images do, with the last
``images`` path component replaced by ``labels`` and the suffix by ``.txt``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer.checks.labels import check_label_text
from trainer.datasets.layout import IMAGE_SUFFIXES, label_path

SCHEMA = "gpurent.doctor/1"
SPLITS = ("train", "val", "test")
#: Splits that must not be empty; an empty ``test`` is only a warning.
REQUIRED_SPLITS = ("train", "val")
MAX_EXAMPLES = 5

#: kind -> (severity, message template with {n}). Every kind a finding can have.
KINDS: dict[str, tuple[str, str]] = {
    "yaml": ("error", "data.yaml cannot be used"),
    "missing_dir": ("error", "{n} split path(s) do not exist"),
    "empty_split": ("error", "{n} split(s) have no images"),
    "corrupt_image": ("error", "{n} image(s) are unreadable or corrupt"),
    "field_count": ("error", "{n} label row(s) have the wrong number of fields"),
    "not_a_number": ("error", "{n} label row(s) hold something that is not a number"),
    "class_id": ("error", "{n} label row(s) have a class id outside 0..nc-1"),
    "out_of_range": ("error", "{n} label row(s) have coordinates outside [0, 1]"),
    "bad_size": ("error", "{n} label row(s) have a zero or negative width or height"),
    "unreadable_label": ("error", "{n} label file(s) cannot be read as text"),
    "missing_label": ("warning", "{n} image(s) have no label file (trained as background)"),
    "orphan_label": ("warning", "{n} label file(s) have no image (ignored by training)"),
    "duplicate_image": ("warning", "{n} image(s) are byte-identical copies of another"),
    "split_leak": ("warning", "{n} image content(s) appear in more than one split (leakage)"),
    "empty_test": ("warning", "the test split has no images"),
    "unused_class": ("warning", "{n} class(es) have no instances in train"),
}


class SpecError(ValueError):
    """data.yaml is unreadable or unusable; the message is one line."""


class MissingDependency(RuntimeError):
    """pyyaml or Pillow is not installed here (a box problem, not a dataset problem)."""


def require_libraries() -> None:
    """Raise ``MissingDependency`` (one line) unless pyyaml and Pillow import."""
    for module, package in (("yaml", "pyyaml"), ("PIL.Image", "pillow")):
        try:
            __import__(module)
        except ImportError:
            raise MissingDependency(f"{package} is not installed: pip install {package}") \
                from None


@dataclass
class DataSpec:
    """What data.yaml says: the dataset root, split entries, class count and names."""

    yaml_path: Path
    root: Path
    splits: dict[str, list[str]]
    nc: int
    names: list[str]


def _load_yaml(path: Path) -> Any:
    require_libraries()
    import yaml

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path.name} is not valid YAML{where}: {problem}") from exc


def dataset_root(yaml_path: Path) -> Path:
    """The dataset root that data.yaml points at (its ``path``, else its folder)."""
    return _root_of(_load_yaml(yaml_path), yaml_path)


def _root_of(doc: Any, yaml_path: Path) -> Path:
    base = yaml_path.resolve().parent
    if isinstance(doc, dict) and isinstance(doc.get("path"), str) and doc["path"]:
        return (base / os.path.expanduser(doc["path"])).resolve()
    return base


def _names(doc: dict[str, Any]) -> list[str]:
    names = doc.get("names")
    if names is None:
        nc = doc.get("nc")
        if not isinstance(nc, int) or nc < 1:
            raise SpecError("data.yaml has neither 'names' nor a positive integer 'nc'")
        return [str(i) for i in range(nc)]
    if isinstance(names, list):
        return [str(n) for n in names]
    if isinstance(names, dict):
        if not all(isinstance(k, int) for k in names) or sorted(names) != list(range(len(names))):
            raise SpecError("'names' as a mapping must have the keys 0..n-1")
        return [str(names[i]) for i in range(len(names))]
    raise SpecError("'names' must be a list or a mapping of id -> name")


def load_spec(yaml_path: Path) -> DataSpec:
    """Parse data.yaml into a ``DataSpec``; ``SpecError`` (one line) when it is unusable."""
    doc = _load_yaml(yaml_path)
    if not isinstance(doc, dict):
        raise SpecError("data.yaml must be a mapping (train: ..., val: ..., names: ...)")
    names = _names(doc)
    nc = doc.get("nc", len(names))
    if not isinstance(nc, int) or nc < 1:
        raise SpecError(f"'nc' must be a positive integer, got {nc!r}")
    if nc != len(names):
        raise SpecError(f"'nc' is {nc} but 'names' lists {len(names)} classes")
    splits: dict[str, list[str]] = {}
    for split in SPLITS:
        value = doc.get(split)
        if value is None or value == "":
            continue
        entries = value if isinstance(value, list) else [value]
        if not all(isinstance(e, str) for e in entries):
            raise SpecError(f"'{split}' must be a path or a list of paths")
        splits[split] = entries
    for split in REQUIRED_SPLITS:
        if split not in splits:
            raise SpecError(f"data.yaml has no '{split}' entry")
    return DataSpec(yaml_path, _root_of(doc, yaml_path), splits, nc, names)


def _images_in(folder: Path) -> list[Path]:
    found = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        found += [Path(root, f) for f in sorted(files) if Path(f).suffix.lower() in IMAGE_SUFFIXES]
    return found


def _images_of_entry(entry: str, root: Path) -> tuple[list[Path], list[Path]] | None:
    """(images, label folders to look for orphans in), or None when ``entry`` is missing."""
    path = (root / os.path.expanduser(entry)).resolve()
    if path.is_dir():
        return _images_in(path), [label_path(path / "x").parent]
    if path.is_file() and path.suffix == ".txt":
        images = []
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            line = line.strip()
            if line:
                p = Path(line)
                images.append(p if p.is_absolute() else (path.parent / p).resolve())
        return images, []
    if path.is_file() and path.suffix.lower() in IMAGE_SUFFIXES:
        return [path], []
    return None


@dataclass
class Findings:
    """Problems found, by kind, with a few examples each."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    def add(self, kind: str, example: str, n: int = 1) -> None:
        """Count ``n`` occurrences of ``kind`` and keep ``example`` if there is room."""
        assert kind in KINDS
        self.counts[kind] += n
        if len(self.examples[kind]) < MAX_EXAMPLES:
            self.examples[kind].append(example)

    def as_list(self) -> list[dict[str, Any]]:
        """Errors first, then warnings, each in the order of ``KINDS``."""
        out = []
        for severity in ("error", "warning"):
            for kind, (sev, template) in KINDS.items():
                if sev == severity and self.counts[kind]:
                    n = self.counts[kind]
                    out.append({"severity": sev, "kind": kind, "count": n,
                                "message": template.format(n=n),
                                "examples": self.examples[kind]})
        return out


def _read_image(path: Path) -> tuple[str | None, str | None]:
    """(sha256 of the bytes, error) for one image; decodes it fully to find corruption."""
    from PIL import Image

    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, exc.strerror or str(exc)
    digest = hashlib.sha256(data).hexdigest()
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.verify()
        with Image.open(io.BytesIO(data)) as img:
            img.draft("RGB", (64, 64))  # JPEG decodes at reduced scale: fast, still complete
            img.load()
            if img.width < 1 or img.height < 1:
                return digest, "zero-sized image"
    except Exception as exc:  # PIL raises many types for bad files; all mean "corrupt"
        return digest, f"{type(exc).__name__}: {str(exc)[:120]}"
    return digest, None


def _rel(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def examine(spec: DataSpec, workers: int | None = None) -> dict[str, Any]:
    """Check the dataset described by ``spec``; return the report (without the header)."""
    findings = Findings()
    root = spec.root
    split_images: dict[str, list[Path]] = {}
    label_dirs: dict[str, list[Path]] = {}
    for split, entries in spec.splits.items():
        images: list[Path] = []
        dirs: list[Path] = []
        missing = False
        for entry in entries:
            got = _images_of_entry(entry, root)
            if got is None:
                findings.add("missing_dir", f"{split}: {entry} (looked in {root / entry})")
                missing = True
                continue
            images += got[0]
            dirs += got[1]
        split_images[split] = images
        label_dirs[split] = dirs
        if not images and not missing:
            if split == "test":
                findings.add("empty_test", f"{split}: {', '.join(entries)}")
            else:
                findings.add("empty_split", f"{split}: {', '.join(entries)}")

    all_images = sorted({p for imgs in split_images.values() for p in imgs})
    with ThreadPoolExecutor(max_workers=workers or min(8, os.cpu_count() or 1)) as pool:
        image_results = dict(zip(all_images, pool.map(_read_image, all_images)))

    instances: dict[str, Counter[int]] = {}
    images_with: dict[str, Counter[int]] = {}
    splits_out: dict[str, dict[str, int]] = {}
    by_hash: dict[str, list[tuple[str, Path]]] = defaultdict(list)
    for split, images in split_images.items():
        inst: Counter[int] = Counter()
        img_with: Counter[int] = Counter()
        labelled = background = 0
        seen_labels = set()
        for image in images:
            digest, error = image_results.get(image, (None, "not checked"))
            if error:
                findings.add("corrupt_image", f"{_rel(image, root)}: {error}")
            if digest:
                by_hash[digest].append((split, image))
            lpath = label_path(image)
            seen_labels.add(lpath)
            try:
                text = lpath.read_text(encoding="utf-8")
            except FileNotFoundError:
                findings.add("missing_label", _rel(image, root))
                background += 1
                continue
            except (OSError, UnicodeDecodeError) as exc:
                findings.add("unreadable_label", f"{_rel(lpath, root)}: {exc}")
                continue
            labelled += 1
            result = check_label_text(text, spec.nc)
            for problem in result.problems:
                findings.add(problem.kind, f"{_rel(lpath, root)}:{problem.line}: {problem.detail}")
            if not result.classes and not result.problems:
                background += 1
            inst.update(result.classes)
            img_with.update(set(result.classes))
        for folder in label_dirs[split]:
            for lfile in _label_files(folder):
                if lfile not in seen_labels:
                    findings.add("orphan_label", _rel(lfile, root))
        instances[split], images_with[split] = inst, img_with
        splits_out[split] = {"images": len(images), "labels": labelled,
                             "instances": sum(inst.values()), "background": background}

    _duplicates(by_hash, findings, root)
    if "train" in instances and split_images.get("train"):
        unused = [i for i in range(spec.nc) if instances["train"][i] == 0]
        for i in unused:
            findings.add("unused_class", f"{i} {spec.names[i]}")
    classes = [{"id": i, "name": spec.names[i],
                "instances": {s: instances[s][i] for s in instances},
                "images": {s: images_with[s][i] for s in images_with}}
               for i in range(spec.nc)]
    return {"root": str(root), "splits": splits_out, "classes": classes,
            "findings": findings.as_list()}


def _label_files(folder: Path) -> Iterable[Path]:
    if not folder.is_dir():
        return []
    out = []
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        out += [Path(root, f) for f in sorted(files) if f.endswith(".txt") and f != "classes.txt"]
    return out


def _duplicates(by_hash: dict[str, list[tuple[str, Path]]], findings: Findings,
                root: Path) -> None:
    for group in by_hash.values():
        if len(group) < 2:
            continue
        first = _rel(group[0][1], root)
        for _split, image in group[1:]:
            findings.add("duplicate_image", f"{_rel(image, root)} = {first}")
        if len({split for split, _ in group}) > 1:
            findings.add("split_leak", " = ".join(f"{s}:{_rel(p, root)}" for s, p in group[:3]))


def run_doctor(yaml_path: Path, workers: int | None = None) -> dict[str, Any]:
    """The full report for ``yaml_path`` (schema ``gpurent.doctor/1``)."""
    require_libraries()
    head: dict[str, Any] = {"schema": SCHEMA, "data": str(yaml_path.resolve())}
    try:
        spec = load_spec(yaml_path)
    except SpecError as exc:
        finding = {"severity": "error", "kind": "yaml", "count": 1,
                   "message": str(exc), "examples": []}
        body: dict[str, Any] = {"root": None, "nc": None, "names": None, "splits": {},
                                "classes": [], "findings": [finding]}
    else:
        body = {"nc": spec.nc, "names": spec.names, **examine(spec, workers)}
    errors = sum(f["count"] for f in body["findings"] if f["severity"] == "error")
    warnings = sum(f["count"] for f in body["findings"] if f["severity"] == "warning")
    return {**head, "ok": errors == 0, "errors": errors, "warnings": warnings, **body}


def render(report: dict[str, Any]) -> str:
    """The readable form of a doctor report."""
    lines = [f"doctor: {report['data']}"]
    if report["splits"]:
        sizes = ", ".join(f"{s} {v['images']} images" for s, v in report["splits"].items())
        lines.append(f"  {report['nc']} classes; {sizes}")
    for f in report["findings"]:
        tag = "ERROR  " if f["severity"] == "error" else "warning"
        lines.append(f"  {tag} {f['kind']}: {f['message']}")
        lines += [f"            {e}" for e in f["examples"]]
        if f["count"] > len(f["examples"]) and f["examples"]:
            lines.append(f"            ... and {f['count'] - len(f['examples'])} more")
    if report["classes"]:
        splits = list(report["splits"])
        width = max(len(c["name"]) for c in report["classes"]) + 4
        lines.append("class balance (instances / images with the class):")
        lines.append("  " + "class".ljust(width) + "".join(f"{s:>16}" for s in splits))
        for c in report["classes"]:
            cells = "".join(f"{c['instances'][s]:>9} / {c['images'][s]:<4}" for s in splits)
            lines.append(("  " + f"{c['id']} {c['name']}".ljust(width) + cells).rstrip())
    result = "ok" if report["ok"] else "FAILED"
    lines.append(f"result: {result}: {report['errors']} error(s), {report['warnings']} warning(s)")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    """Entry point: 0 no errors, 1 errors found, 2 bad arguments or a missing library."""
    p = argparse.ArgumentParser(prog="python3 -m trainer doctor",
                                description="Check a YOLO dataset (read-only).")
    p.add_argument("data", help="the dataset's data.yaml")
    p.add_argument("--json", action="store_true",
                   help="print the report as JSON (schema gpurent.doctor/1, docs/SCHEMAS.md)")
    p.add_argument("--workers", type=int, default=None, help="threads that read images")
    args = p.parse_args(argv)
    path = Path(args.data)
    if not path.is_file():
        print(f"doctor: {args.data}: no such file", file=sys.stderr)
        return 2
    try:
        report = run_doctor(path, args.workers)
    except MissingDependency as exc:
        print(f"doctor: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2) if args.json else render(report))
    return 0 if report["ok"] else 1
