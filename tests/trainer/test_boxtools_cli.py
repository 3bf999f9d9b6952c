"""``gpurent preflight|doctor|profile``: the box tools from a script, on this machine."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.fixtures.status_cli_kit import gpurent


def test_preflight_reports_this_cpu_box(tmp_path: Path) -> None:
    result = gpurent("preflight", "local", "--project", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "gpurent.preflight/1"
    assert report["gpu_available"] is False and report["gpus"] == []
    readable = gpurent("preflight", "local", "--project", str(tmp_path))
    assert "warn  gpu:" in readable.stdout and readable.stdout.rstrip().endswith("ok")
    failing = gpurent("preflight", "local", "--require-gpu")
    assert failing.returncode == 1 and "problems found" in failing.stdout


def test_doctor_passes_a_clean_set_and_flags_a_broken_one(shapes_data: Path,
                                                          tmp_path: Path) -> None:
    clean = gpurent("doctor", "local", str(shapes_data), "--json")
    assert clean.returncode == 0, clean.stderr
    assert json.loads(clean.stdout)["ok"] is True
    broken = tmp_path / "broken"
    shutil.copytree(shapes_data.parent, broken)
    label = sorted((broken / "labels").rglob("*.txt"))[0]
    label.write_text("0 0.5 0.5 0.2\n")  # four fields
    result = gpurent("doctor", "local", str(broken / shapes_data.name))
    assert result.returncode == 1
    assert "field_count" in result.stdout and "problems found" in result.stdout


def test_missing_dataset_is_one_line_and_exit_1(tmp_path: Path) -> None:
    result = gpurent("doctor", "local", str(tmp_path / "nope.yaml"))
    assert result.returncode == 1
    assert result.stderr.startswith("gpurent doctor: trainer doctor failed (exit 2)")
    assert len(result.stderr.strip().splitlines()) == 1


def test_profile_gives_a_verdict(shapes_data: Path, tmp_path: Path) -> None:
    result = gpurent("profile", "local", f"data={shapes_data}", "model=n", "imgsz=64",
                     "batch=4", "workers=0", "steps=3", "warmup=1", "price=2.0",
                     f"project={tmp_path}", "name=prof", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "gpurent.profile/1"
    assert report["verdict"] in ("dataloader", "unknown")
    assert report["cost"]["price_per_hour"] == 2.0
    bad = gpurent("profile", "local", "no-equals-sign")
    assert bad.returncode == 2 and "is not KEY=VALUE" in bad.stderr
