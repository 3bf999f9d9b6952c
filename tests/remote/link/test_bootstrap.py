"""``remote.link.bootstrap`` against a real sshd: upload once per version (and again when the
code changed), the python that can train, what is remembered and what overrides it,
needs installed with ``pip --target``, notes."""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import remote.link.bootstrap
import trainer
from remote import config
from remote.link.bootstrap import bootstrap_box, box_id, content_hash, package_files
from remote.link.connector import Connector
from remote.transport.base import TransportError
from tests.fixtures.boxes import PY39, PY310, require, torch_venv
from tests.fixtures.sshd import SSHServer


def ready(box, cwd: str = "/") -> dict:
    """``trainer ready --json`` run on the box through the bootstrapped prefix."""
    res = box.run(f"cd {cwd} && {box.trainer_prefix} -m trainer ready --json", timeout=120)
    assert res.stdout, res.stderr
    return json.loads(res.stdout)


def test_bootstrap_uploads_once_and_sets_the_prefix(sshd: SSHServer) -> None:
    steps: list[str] = []
    digest = content_hash(package_files())
    # Other tests of the session may have bootstrapped this box already.
    shutil.rmtree(Path(sshd.home) / ".cache" / "gpurent" /
                  f"trainer-{trainer.__version__}-{digest}", ignore_errors=True)
    with sshd.connect() as box:
        first = bootstrap_box(box, steps.append)
        assert first.trainer_dir == f"{sshd.home}/.cache/gpurent/trainer-" \
                                    f"{trainer.__version__}-{digest}"
        assert (Path(first.trainer_dir) / ".complete").read_text().strip() == digest
        assert (Path(first.trainer_dir) / "trainer" / "runfiles.py").read_bytes() == \
            (Path(trainer.__file__).parent / "runfiles.py").read_bytes()
        assert first.python.startswith("/") and first.python_version and first.torch
        # The box runs the uploaded copy, not this checkout.
        assert ready(box)["trainer"] == f"{first.trainer_dir}/trainer"
        assert isinstance(first.preflight, dict) and first.preflight.get("python")
        assert first.preflight.get("executable") == first.python
        assert any("upload" in s for s in steps) and any("preflight" in s for s in steps)
        assert any(s == f"using python {first.python_version} at {first.python} (torch "
                   f"{first.torch})" for s in steps)

    with sshd.connect() as again:
        steps.clear()
        second = bootstrap_box(again, steps.append, preflight=False)
        assert not second.uploaded and second.trainer_dir == first.trainer_dir
        assert any("already on the box" in s for s in steps)
        assert again.trainer_prefix == box.trainer_prefix
        assert second.preflight is None


def test_a_trainer_folder_in_the_working_directory_cannot_shadow_ours(
        sshd: SSHServer, tmp_path: Path) -> None:
    """What ``-P`` does on 3.11, for every python: a project holding ``trainer/`` (the
    launcher ``cd``s into the project) still runs the uploaded trainer."""
    shadow = tmp_path / "project" / "trainer"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise SystemExit('the project shadowed the trainer')")
    (shadow / "__main__.py").write_text("")
    with sshd.connect() as box:
        for python in (None, require(PY39, "Python 3.9")):
            result = bootstrap_box(box, python=python, preflight=False, install=False)
            assert ready(box, str(shadow.parent))["trainer"] == f"{result.trainer_dir}/trainer"


def test_edited_trainer_code_is_uploaded_again(sshd: SSHServer, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Independent of ``content_hash``: edit one file's content (same name, same size)
    and the box must get a new directory holding the edited file."""
    copy = tmp_path / "trainer"
    shutil.copytree(Path(trainer.__file__).parent, copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(remote.link.bootstrap, "_PACKAGE_DIR", copy)
    target = copy / "smi.py"
    with sshd.connect() as box:
        before = bootstrap_box(box, preflight=False, install=False)
        original = target.read_bytes()
        edited = original.replace(b"nvidia-smi", b"NVIDIA-SMI", 1)
        assert edited != original and len(edited) == len(original)
        target.write_bytes(edited)
        after = bootstrap_box(box, preflight=False, install=False)
    assert after.uploaded and after.trainer_dir != before.trainer_dir
    assert (Path(after.trainer_dir) / "trainer" / "smi.py").read_bytes() == edited
    assert (Path(before.trainer_dir) / "trainer" / "smi.py").read_bytes() == original


def test_incomplete_upload_is_redone(sshd: SSHServer) -> None:
    with sshd.connect() as box:
        result = bootstrap_box(box, preflight=False)
        marker = Path(result.trainer_dir) / ".complete"
        marker.unlink()
        (Path(result.trainer_dir) / "trainer" / "runfiles.py").write_text("broken")
        redone = bootstrap_box(box, preflight=False)
        assert redone.uploaded and marker.exists()
        assert "RunWriter" in (Path(redone.trainer_dir) / "trainer" / "runfiles.py").read_text()


@pytest.fixture
def mixed_box(box_factory: Callable[..., SSHServer], tmp_path: Path) -> SSHServer:
    """A box whose PATH's python3 is 3.9 without torch and whose ``~/venv`` has torch."""
    py39 = require(PY39, "Python 3.9")
    box = box_factory(path=[str(Path(py39).parent), "/usr/bin", "/bin"])
    torch_venv(Path(box.home) / "venv", sys._base_executable)
    return box


def test_the_python_that_has_torch_is_chosen_and_remembered(mixed_box: SSHServer) -> None:
    venv_python = f"{mixed_box.home}/venv/bin/python"
    with mixed_box.connect() as box:
        steps: list[str] = []
        chosen = bootstrap_box(box, steps.append, preflight=False, install=False)
        assert chosen.python == venv_python and chosen.torch
        assert config.remembered(box_id(box))["python"] == venv_python
        blob = base64.b64decode(mixed_box.host_key_line.split()[1])
        fingerprint = base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
        assert box_id(box) == f"{mixed_box.user}@SHA256:{fingerprint}"
        # --python overrides for this connection and is not remembered.
        forced = bootstrap_box(box, python=require(PY39, "Python 3.9"), preflight=False,
                           install=False)
        assert forced.python == str(PY39) and forced.torch == ""
        assert ready(box)["executable"] == str(PY39)
        assert config.remembered(box_id(box))["python"] == venv_python


def test_a_remembered_python_wins_while_it_can_train(box_factory, tmp_path: Path) -> None:
    """Two pythons with torch: the one remembered for this box is kept (the PATH one
    would be first); a remembered one without torch is dropped for one that has it."""
    box = box_factory(path=[str(Path(sys.executable).parent), "/usr/bin", "/bin"])
    other = torch_venv(Path(box.home) / "venv", sys._base_executable)
    with box.connect() as t:
        config.remember(box_id(t), python=str(other))
        assert bootstrap_box(t, preflight=False, install=False).python == str(other)
        config.remember(box_id(t), python="/usr/bin/python3")  # no torch there
        assert bootstrap_box(t, preflight=False, install=False).python != "/usr/bin/python3"


def test_the_config_file_names_the_python_per_host(sshd: SSHServer, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    py39 = require(PY39, "Python 3.9")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path = tmp_path / "gpurent" / "config.toml"
    path.parent.mkdir()
    host = f"{sshd.user}@{sshd.host}"
    path.write_text(f'[hosts."{host}"]\npython = "{py39}"\n')
    path.chmod(0o600)
    options = {"known_hosts": sshd.known_hosts, "identity_files": (sshd.key_path,),
               "allow_agent": False, "ssh_config": sshd.ssh_config}
    connector = Connector(host, port=sshd.port, ssh_options=options)
    with connector.open() as box:
        assert ready(box)["executable"] == py39
    # --python (the connector's python) overrides the config file.
    forced = Connector(host, port=sshd.port, ssh_options=options, python=sys.executable)
    with forced.open() as box:
        assert ready(box)["executable"] == sys.executable
    path.write_text(f'[hosts."{host}"]\npython = "python3"\n')
    with pytest.raises(ValueError, match="must be an absolute path"):
        Connector(host, port=sshd.port, ssh_options=options).open()


def test_a_venv_box_gets_its_needs_with_pip_target(sshd: SSHServer, tmp_path: Path) -> None:
    """A virtualenv python (``pip install --user`` fails there) without psutil and
    huggingface_hub: they land in the trainer's versioned directory."""
    py310 = require(PY310, "Python 3.10")
    venv = tmp_path / "venv310"
    subprocess.run([py310, "-m", "venv", str(venv)], check=True, timeout=300)
    python = str(venv / "bin" / "python3")
    with sshd.connect() as box:
        assert all(ready(box)["optional"].values())  # the default python has them
        result = bootstrap_box(box, python=python, preflight=False)
        deps = f"{result.trainer_dir}/deps-3.10"
        assert f"installed huggingface_hub, psutil into {deps} (pip --target)" in result.notes
        report = ready(box)
        assert report["executable"] == python
        assert report["optional"]["psutil"] and report["optional"]["huggingface_hub"]
        again = bootstrap_box(box, python=python, preflight=False)
        assert not any("install" in n for n in again.notes)


def test_missing_needs_are_noted_once_when_pip_cannot_install(sshd: SSHServer,
                                                              tmp_path: Path) -> None:
    """A box python without psutil, huggingface_hub or even pip: bootstrap says so once
    and still leaves a working trainer (``follow`` needs only the standard library)."""
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True,
                   timeout=120)
    with sshd.connect() as box:
        result = bootstrap_box(box, python=str(bare / "bin" / "python3"), preflight=False)
        said = [n for n in result.notes if "could not install huggingface_hub, psutil" in n]
        assert len(said) == 1 and "this python has no pip" in said[0]
        res = box.run(f"{box.trainer_prefix} -m trainer follow --help")
        assert res.ok, res.stderr
        steps: list[str] = []
        again = bootstrap_box(box, steps.append, python=str(bare / "bin" / "python3"),
                          preflight=False)
        assert not any("install" in line for line in again.notes + steps)


def test_no_usable_python_is_one_clear_error(sshd: SSHServer) -> None:
    with sshd.connect() as box, pytest.raises(TransportError, match="not a python"):
        bootstrap_box(box, python="/bin/false")
