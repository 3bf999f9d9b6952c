"""``gpurent-tui`` command line: arguments become box specs, bad input is one line, and
``--help`` never loads textual or paramiko."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.fixtures.paths import ROOT
from tests.fixtures.tui_main_kit import specs


def test_hosts_become_tabs_with_shared_options():
    got = specs("root@203.0.113.7", "box2", "-p", "41022", "--project", "runs/x",
                "--run", "exp3", "--price", "2.5", "--accept-new")
    assert [s.target for s in got] == ["root@203.0.113.7", "box2"]
    assert all(s.kind == "ssh" and s.port == 41022 and s.project == "runs/x"
               and s.run == "exp3" and s.price == 2.5 and s.accept_new for s in got)
    assert got[0].title == "root@203.0.113.7:41022"


def test_provider_and_instance_go_together():
    got = specs("h", "--provider", "vast", "--instance", "123")
    assert (got[0].provider, got[0].instance) == ("vast", "123")


def test_no_host_opens_the_fleet():
    assert specs() == []  # the app opens the fleet screen (tests/tui/fleet/test_fleet.py)


@pytest.mark.parametrize("argv, message", [
    (["h", "--local"], "cannot be combined"),
    (["h", "--provider", "vast"], "needs --instance"),
    (["h", "--instance", "1"], "--instance needs --provider"),
    (["a", "b", "--provider", "vast", "--instance", "1"], "single HOST"),
    (["h", "--price", "-1"], "--price"),
    (["h", "-p", "70000"], "--port"),
    (["h", "--run", "../x"], "run name"),
])
def test_bad_arguments_are_one_line_errors(argv, message, capsys):
    with pytest.raises(SystemExit) as exc:
        specs(*argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_local_run_directory_opens_that_run(run_factory):
    run = run_factory("exp7", done=2, total=5)
    got = specs("--local", str(run))
    assert got[0].kind == "local"
    assert (got[0].project, got[0].run) == (str(run.parent), "exp7")
    got = specs("--local", str(run.parent))
    assert (got[0].project, got[0].run) == (str(run.parent), None)


def test_demo_uses_the_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    got = specs("--demo")
    assert got[0].demo and got[0].project == str(tmp_path / "gpurent" / "demo" / "runs")


def test_demo_without_the_trainers_packages_says_how_to_get_them():
    # The laptop-only install (pipx install .) has no numpy or torch: --demo says so at
    # once, with the install that brings them, instead of failing inside the app.
    code = ("import sys\n"
            "sys.modules['numpy'] = sys.modules['torch'] = None  # not installed\n"
            "from tui.main import main\n"
            "main(['--demo'])\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert "missing here: torch, numpy" in error and "pipx install '.[train]'" in error
    assert "Traceback" not in done.stderr


def test_help_loads_neither_textual_nor_paramiko():
    code = ("import sys, json\n"
            "from tui.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
            "('textual', 'paramiko', 'torch', 'rich'))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert "gpurent-tui" in out
    assert json.loads(out.strip().splitlines()[-1]) == []


def test_tui_imports_no_torch():
    code = ("import sys, tui.app, tui.main, tui.demo\n"
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, check=True).stdout
    assert out.strip() == "False"
