"""``remote.bootstrap`` against a real sshd: upload once per version, prefix, notes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import trainer
from remote.bootstrap import bootstrap, content_hash, package_files
from remote.transport.base import TransportError
from tests.fixtures.sshd import SSHServer


def test_bootstrap_uploads_once_and_sets_the_prefix(sshd: SSHServer) -> None:
    steps: list[str] = []
    with sshd.connect() as box:
        first = bootstrap(box, steps.append)
        digest = content_hash(package_files())
        assert first.trainer_dir == f"{sshd.home}/.cache/gpurent/trainer-" \
                                    f"{trainer.__version__}-{digest}"
        assert (Path(first.trainer_dir) / ".complete").read_text().strip() == digest
        assert (Path(first.trainer_dir) / "trainer" / "runfiles.py").read_bytes() == \
            (Path(trainer.__file__).parent / "runfiles.py").read_bytes()
        assert first.python.startswith("/") and first.python_version
        # The box runs the uploaded copy, not this checkout.
        where = box.run(f"cd / && {box.trainer_prefix} -c "
                        "'import trainer; print(trainer.__file__)'")
        assert where.stdout.decode().strip() == f"{first.trainer_dir}/trainer/__init__.py"
        assert isinstance(first.preflight, dict) and first.preflight.get("python")
        assert any("upload" in s for s in steps) and any("preflight" in s for s in steps)

    with sshd.connect() as again:
        steps.clear()
        second = bootstrap(again, steps.append, preflight=False)
        assert not second.uploaded and second.trainer_dir == first.trainer_dir
        assert any("already on the box" in s for s in steps)
        assert again.trainer_prefix == box.trainer_prefix
        assert second.preflight is None


def test_incomplete_upload_is_redone(sshd: SSHServer) -> None:
    with sshd.connect() as box:
        result = bootstrap(box, preflight=False)
        marker = Path(result.trainer_dir) / ".complete"
        marker.unlink()
        (Path(result.trainer_dir) / "trainer" / "runfiles.py").write_text("broken")
        redone = bootstrap(box, preflight=False)
        assert redone.uploaded and marker.exists()
        assert "RunWriter" in (Path(redone.trainer_dir) / "trainer" / "runfiles.py").read_text()


def test_missing_needs_are_noted_when_pip_cannot_install(sshd: SSHServer,
                                                         tmp_path: Path) -> None:
    """A box python without psutil, huggingface_hub or even pip: bootstrap says so and
    still leaves a working trainer (``follow`` needs only the standard library)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True,
                   timeout=120)
    with sshd.connect() as box:
        result = bootstrap(box, python=str(bare / "bin" / "python3"), preflight=False)
        assert any("could not install huggingface_hub, psutil" in n for n in result.notes)
        res = box.run(f"{box.trainer_prefix} -m trainer follow --help")
        assert res.ok, res.stderr


def test_no_usable_python_is_one_clear_error(sshd: SSHServer) -> None:
    with sshd.connect() as box, pytest.raises(TransportError, match="not a python"):
        bootstrap(box, python="/bin/false")
