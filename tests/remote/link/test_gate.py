"""The connect path over a real sshd (``remote.link.gate``, ``remote.link.connector``): a
watch starts in one exec (the first time with the package on the exec's stdin, and never SFTP; two
when the python the laptop remembers is gone), its first messages carry the chosen
run's status and then the
project's runs, the package hash is computed once per install, the box caches its needs
check by version, and the early connection of ``gpurent-tui`` is adopted with its
follower."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest

import remote.link.bootstrap
from remote import config
from remote.link.bootstrap import box_id, install_name, package_digest
from remote.watch.events import ChosenEvent, RunsEvent, StatusEvent
from tests.fixtures.gate_kit import connector_for, watch_once
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_runs import write_run
from trainer.watch import boxinfo
from tui.main import connect_early
from tui.spec import BoxSpec


@pytest.fixture
def project(sshd: SSHServer, request: pytest.FixtureRequest) -> Path:
    """Three runs, the middle one live (this process), on a box without our package."""
    root = Path(sshd.home) / "gate" / request.node.name
    write_run(root / "exp1", done=3, total=3, state="completed")
    write_run(root / "exp2", done=1, total=5, state="running", pid=threading.get_native_id())
    write_run(root / "exp3", done=2, total=2, state="completed")
    for old in Path(sshd.home, ".cache", "gpurent").glob("trainer-*"):
        shutil.rmtree(old)
    return root


def test_a_known_box_is_watched_in_one_exec(sshd: SSHServer, project: Path,
                                            tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "fresh-laptop"))
    first, seen, gate = watch_once(sshd, project)
    # Never seen: the package rides on the exec's stdin, the gate chooses the python and
    # starts the follower, whose hello names it. No SFTP at all.
    assert len(first.execs) == 1 and first.stdin_bytes > 10_000 and first.sftp == 0
    assert (Path(sshd.home) / ".cache" / "gpurent" / install_name() / ".complete").exists()
    with sshd.connect() as link:
        known = config.remembered(box_id(link))
    assert known["trainer"] == install_name() and known["python"]
    assert gate.trainer_prefix and install_name() in gate.trainer_prefix

    again, seen, _ = watch_once(sshd, project)
    assert len(again.execs) == 1 and again.stdin_bytes == 0 and again.sftp == 0
    assert "trainer follow" in again.execs[0] or " follow " in again.execs[0]
    order = [type(e).__name__ for e in seen.events
             if isinstance(e, StatusEvent | RunsEvent | ChosenEvent)]
    assert order[:3] == ["ChosenEvent", "StatusEvent", "RunsEvent"]
    [chosen] = seen.of(ChosenEvent)
    assert chosen.run_dir == f"{project}/exp2"  # the live one, not the newest
    [runs] = seen.of(RunsEvent)
    assert sorted(r.name for r in runs.runs) == ["exp1", "exp2", "exp3"]


def test_a_python_gone_from_the_box_is_chosen_again(sshd: SSHServer, project: Path,
                                                   tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "laptop"))
    watch_once(sshd, project)
    with sshd.connect() as link:
        memory = box_id(link)
    chosen = config.remembered(memory)["python"]
    config.remember(memory, python=f"{sshd.home}/gone/bin/python3")
    again, seen, _ = watch_once(sshd, project)
    # The gate says it cannot start (and prints the probe), bootstrap chooses again.
    assert len(again.execs) == 2 and again.sftp == 0
    assert config.remembered(memory)["python"] == chosen
    assert seen.of(StatusEvent)


def test_a_version_already_on_the_box_is_not_shipped(sshd: SSHServer, project: Path,
                                                     tmp_path: Path, monkeypatch) -> None:
    watch_once(sshd, project)  # installs it (whatever the laptop remembered)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "other-laptop"))
    # Another laptop: it ships the package, the box keeps the copy it has.
    marker = Path(sshd.home) / ".cache" / "gpurent" / install_name() / ".complete"
    before = marker.stat().st_mtime_ns
    first, _, _ = watch_once(sshd, project)
    assert first.sftp == 0 and marker.stat().st_mtime_ns == before


def test_the_package_hash_is_computed_once_per_install(tmp_path: Path, monkeypatch) -> None:
    package = tmp_path / "trainer"
    shutil.copytree(Path(remote.link.bootstrap._PACKAGE_DIR), package,
                    ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(remote.link.bootstrap, "_PACKAGE_DIR", package)
    monkeypatch.setattr(remote.link.bootstrap, "_digests", {})  # as a fresh process
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    hashed: list[int] = []
    real = remote.link.bootstrap.content_hash
    monkeypatch.setattr(remote.link.bootstrap, "content_hash",
                        lambda files: hashed.append(1) or real(files))
    first = package_digest()
    assert package_digest() == first and len(hashed) == 1
    remote.link.bootstrap._digests.clear()  # another process: the laptop's cache file answers
    assert package_digest() == first and len(hashed) == 1
    version = package / "version.py"
    version.write_bytes(version.read_bytes().replace(b"0.1.0", b"0.1.1"))  # the same size
    same_size = package_digest()
    assert same_size != first and len(hashed) == 2
    version.write_text('__version__ = "0.1.0"  # edited\n')
    changed = package_digest()
    assert changed not in (first, same_size) and len(hashed) == 3


def test_the_needs_check_is_cached_by_version(tmp_path: Path) -> None:
    install = tmp_path / "trainer-0.1.0-abc"
    install.mkdir()
    (install / ".complete").write_text("abc\n")
    assert boxinfo.missing_needs(["json", "no_such_module_here"], install) == \
        ["no_such_module_here"]
    assert not list(install.glob("deps-*.ok-*"))
    assert boxinfo.missing_needs(["json"], install) == []
    [ok] = install.glob(f"{boxinfo.deps_name()}.ok-*")
    # Cached: this python is not asked again for this version.
    assert boxinfo.missing_needs(["no_such_module_here"], install) == []
    ok.unlink()
    assert boxinfo.missing_needs(["no_such_module_here"], install) == ["no_such_module_here"]


@pytest.mark.anyio
async def test_the_early_connection_and_its_follower_are_adopted(sshd: SSHServer,
                                                                 project: Path,
                                                                 monkeypatch) -> None:
    """What ``gpurent-tui HOST`` does: the early thread's follower is the one the app's
    watcher uses (the app builds its own command; one follower means they matched)."""
    from tests.fixtures.pilot import SIZE, until
    from tui.app import GpurentApp
    from tui.box.view import BoxView

    watch_once(sshd, project)  # the box is known: the early command is the watcher's
    gate = connector_for(sshd)
    target, port, options = gate.host, gate.port, dict(gate.ssh_options)
    streams: list[str] = []
    real_stream = type(gate.open(early=False)).stream

    def counted(self: Any, command: str, **kw: Any) -> Any:
        streams.append(command)
        return real_stream(self, command, **kw)

    monkeypatch.setattr(type(gate.open(early=False)), "stream", counted)
    spec = BoxSpec("ssh", target, port=port, project=str(project), run="exp3",
                   ssh_options=tuple(options.items()))
    [spec] = connect_early([spec])
    app = GpurentApp([spec])
    async with app.run_test(size=SIZE) as pilot:
        box = app.query_one(BoxView)
        await until(pilot, lambda: box.state.status is not None and box.state.transport is not None,
                    timeout=60)
        assert box.state.status.read.get("completed_epochs") == 2
    followers = [c for c in streams if "trainer follow" in c]
    assert len(followers) == 1, f"the app started a second follower: {followers}"
