"""The destroy check, ``gpurent instance`` against provider stand-ins with a real run
directory checked by ``trainer safe`` on this machine (and its Hub ledger by the Hub
stand-in), and the laptop's key/config rules. The gate's attack cases are in
``tests/remote/weights/test_destroy_check.py``."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from remote.billing import teardown
from remote.billing.providers import ConfigError, load_config, resolve_api_key, resolve_instance
from remote.cli import main as gpurent
from remote.config import remember_hub_repo
from remote.transport.base import TransportError
from tests.fixtures.hub_standin import VALID_TOKEN, HubStandin, record_push
from trainer import runfiles
from trainer.providers import get_provider


@dataclass(frozen=True)
class Answer:
    """A safety answer as ``remote.weights.safety.Safety`` gives it (the fields the gate reads)."""

    safe: bool
    reason: str


@pytest.fixture
def laptop(tmp_path, monkeypatch):
    """A laptop with no keys, no config and an empty pull ledger."""
    for var in ("VAST_API_KEY", "RUNPOD_API_KEY", "LAMBDA_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("GPURENT_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    remember_hub_repo("org/run")  # the user's repository (record_push pushes there)
    return tmp_path


def make_run(run_dir: Path, *, pushed: HubStandin | None = None) -> Path:
    """A finished run with best.pt; ``pushed`` to that Hub stand-in (which the laptop
    then asks) when given."""
    writer = runfiles.RunWriter(run_dir)
    writer.write_status({"state": "completed", "pid": 999_999_999, "total_epochs": 3,
                         "completed_epochs": 3, "best_epoch": 2})
    best = writer.weights_dir / "best.pt"
    runfiles.atomic_write_bytes(best, os.urandom(2048))
    if pushed is not None:
        record_push(pushed, run_dir, ("best.pt", "status.json"))  # its weights, its end
    return run_dir


@pytest.fixture
def hub(hub_standin, monkeypatch) -> HubStandin:
    """The Hub stand-in, as this laptop's Hub (with a valid token)."""
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    return hub_standin


def instance_cmd(standin, iid, action, *extra):
    return ["instance", "local", action, "--provider", standin.provider, "--instance", iid,
            "--base-url", standin.base_url, "--interval", "0", "--timeout", "10", *extra]


# ---------------------------------------------------------------------- the gate


def test_gate_decisions():
    safe = teardown.check_destroy(Answer(True, "on the Hub"), "42")
    assert safe.allowed and safe.safe and "on the Hub" in safe.reason
    refused = teardown.check_destroy(Answer(False, "never pushed"), "42")
    assert not refused.allowed and refused.reason.startswith("refusing to destroy instance 42")
    assert refused.details == ("never pushed",) and "override" in refused.fix
    wrong = teardown.check_destroy(Answer(False, "x"), "42", override=True, typed_id="43")
    assert not wrong.allowed and "nothing destroyed" in wrong.reason
    empty = teardown.check_destroy(Answer(False, "x"), "42", override=True, typed_id=None)
    assert not empty.allowed
    typed = teardown.check_destroy(Answer(False, "x"), "42", override=True,
                                   typed_id=" 42\n")
    assert typed.allowed and typed.overridden and typed.reason.startswith("OVERRIDE")


def test_unknown_safety_is_unsafe():
    assert not teardown.resolve_safety(None).safe

    def unreachable():
        raise TransportError("cannot reach root@box: connection refused")

    answer = teardown.resolve_safety(unreachable)
    assert not answer.safe and "connection refused" in answer.reason


def test_teardown_refuses_unsafe_destroy_without_override(vast_standin):
    iid = vast_standin.add_instance()
    provider = get_provider("vast", vast_standin.key, vast_standin.base_url)
    with pytest.raises(teardown.DestroyRefused) as err:
        teardown.run_teardown(provider, iid, "destroy", safety=Answer(False, "never pushed"),
                          interval=0)
    assert "refusing to destroy" in str(err.value)
    assert not vast_standin.calls("DELETE")
    outcome = teardown.run_teardown(provider, iid, "destroy", safety=lambda: Answer(True, "ok"),
                                interval=0, timeout=10)
    assert outcome.confirmed and len(vast_standin.calls("DELETE")) == 1


def test_warnings_say_what_keeps_billing(vast_standin, lambda_standin):
    vast = get_provider("vast", vast_standin.key, vast_standin.base_url)
    inst = vast.get_instance(vast_standin.add_instance())
    stop = teardown.stop_warning(vast, inst)
    assert "releases the GPUs" in stop and "$0.0694/h" in stop
    lam = get_provider("lambda", lambda_standin.key, lambda_standin.base_url)
    assert "cannot stop" in teardown.stop_warning(lam, None)
    assert "$0.4520/h" in teardown.destroy_warning(vast, inst)


# ---------------------------------------------------------------------- gpurent instance


def test_cli_refuses_destroy_of_unsafe_weights(laptop, vast_standin, monkeypatch, capsys):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance()
    run_dir = make_run(laptop / "run")
    rc = gpurent(instance_cmd(vast_standin, iid, "destroy", "--run", str(run_dir), "--yes"))
    err = capsys.readouterr().err
    assert rc == 1 and "refusing to destroy" in err and "never pushed" in err
    why, file, fix = err.splitlines()  # why, the file that is not safe, what to do
    assert why.endswith("1 weight file is not safe off the box"), err
    assert file.startswith(f"  {run_dir}/weights/best.pt: never pushed"), err
    assert f"gpurent pull local:{run_dir})" in fix and "--override-unsafe" in fix, err
    assert not vast_standin.calls("DELETE")
    # no run given: the weights cannot be checked, which is unsafe too
    assert gpurent(instance_cmd(vast_standin, iid, "destroy", "--yes")) == 1
    assert "not checked" in capsys.readouterr().err
    assert not vast_standin.calls("DELETE")


def test_cli_override_needs_the_typed_id(laptop, runpod_standin, monkeypatch, capsys):
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_standin.key)
    pid = runpod_standin.add_instance()
    run_dir = make_run(laptop / "run")
    args = instance_cmd(runpod_standin, pid, "destroy", "--run", str(run_dir),
                        "--override-unsafe", "--json")
    monkeypatch.setattr("sys.stdin", io.StringIO("not-it\n"))
    assert gpurent(args) == 1
    assert "nothing destroyed" in capsys.readouterr().err
    assert not runpod_standin.calls("DELETE")
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{pid}\n"))
    assert gpurent(args) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["gate"]["overridden"] is True
    assert data["outcome"]["confirmed"] is True and data["outcome"]["state"] == "destroyed"
    assert len(runpod_standin.calls("DELETE")) == 1


def test_cli_destroys_safe_weights(laptop, lambda_standin, hub, monkeypatch, capsys):
    monkeypatch.setenv("LAMBDA_API_KEY", lambda_standin.key)
    iid = lambda_standin.add_instance()
    run_dir = make_run(laptop / "run", pushed=hub)
    rc = gpurent(instance_cmd(lambda_standin, iid, "destroy", "--run", str(run_dir),
                              "--yes", "--json"))
    data = json.loads(capsys.readouterr().out)
    assert rc == 0, data
    assert data["gate"]["safe"] is True and "on the Hub" in data["gate"]["reason"]
    assert data["outcome"]["state"] == "destroyed"
    assert lambda_standin.instances[iid]["status"] == "terminated"


def test_cli_destroy_still_billing_is_an_alarm(laptop, vast_standin, hub, monkeypatch,
                                               capsys):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance()
    vast_standin.never_gone(iid)
    run_dir = make_run(laptop / "run", pushed=hub)
    rc = gpurent(["instance", "local", "destroy", "--provider", "vast", "--instance", iid,
                  "--base-url", vast_standin.base_url, "--interval", "0.05", "--timeout",
                  "0.5", "--run", str(run_dir), "--yes"])
    assert rc == 1 and "ALARM" in capsys.readouterr().err


def test_cli_stop_warns_and_confirms(laptop, vast_standin, monkeypatch, capsys):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance()
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    assert gpurent(instance_cmd(vast_standin, iid, "stop")) == 2
    assert "pass --yes" in capsys.readouterr().err
    assert not vast_standin.calls("PUT")
    assert gpurent(instance_cmd(vast_standin, iid, "stop", "--yes")) == 0
    out = capsys.readouterr().out
    assert "releases the GPUs" in out and "$0.0694/h" in out and "is stopped" in out
    assert vast_standin.instances[iid]["actual_status"] == "stopped"


def test_cli_info(laptop, vast_standin, monkeypatch, capsys):
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance()
    assert gpurent(instance_cmd(vast_standin, iid, "info")) == 0
    out = capsys.readouterr().out
    assert "running" in out and "$0.4520/h now" in out and "break-even" in out
    assert gpurent(instance_cmd(vast_standin, "999", "info")) == 1
    assert "no instance 999" in capsys.readouterr().err


def test_cli_missing_key(laptop, vast_standin, capsys):
    assert gpurent(instance_cmd(vast_standin, "1", "info")) == 2
    err = capsys.readouterr().err
    assert "no API key for Vast.ai: set VAST_API_KEY" in err and err.count("\n") == 1


def test_cli_manual_provider_gives_instructions(laptop, capsys):
    assert gpurent(["instance", "local", "stop", "--provider", "manual", "--instance",
                    "box7", "--yes"]) == 1
    err = capsys.readouterr().err
    assert "no provider API configured" in err and "instance box7" in err


# ---------------------------------------------------------------------- keys and config


def write_config(laptop: Path, text: str, mode: int) -> Path:
    path = laptop / "config" / "gpurent" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def test_config_file_readable_by_others_is_refused(laptop, vast_standin, capsys):
    iid = vast_standin.add_instance()
    path = write_config(laptop, f'[vast]\napi_key = "{vast_standin.key}"\n', 0o644)
    with pytest.raises(ConfigError) as err:
        resolve_api_key("vast")
    assert f"chmod 600 {path}" in str(err.value) and vast_standin.key not in str(err.value)
    assert gpurent(instance_cmd(vast_standin, iid, "info")) == 2
    cli_err = capsys.readouterr().err
    assert f"run: chmod 600 {path}" in cli_err and cli_err.count("\n") == 1
    path.chmod(0o600)
    assert resolve_api_key("vast") == vast_standin.key
    assert gpurent(instance_cmd(vast_standin, iid, "info")) == 0


def test_environment_wins_and_config_is_not_read(laptop, monkeypatch):
    write_config(laptop, '[vast]\napi_key = "from-file"\n', 0o644)  # unreadable by rule
    monkeypatch.setenv("VAST_API_KEY", "from-env")
    assert resolve_api_key("vast") == "from-env"


def test_bad_toml_is_a_one_line_error(laptop):
    write_config(laptop, "[vast\napi_key = 1\n", 0o600)
    with pytest.raises(ConfigError) as err:
        load_config()
    assert "not valid TOML" in str(err.value) and "\n" not in str(err.value)


def test_an_oversized_config_is_an_error_that_says_so(laptop):
    """A valid start and 1 MiB of padding: not cut and then misread as bad TOML."""
    write_config(laptop, '[vast]\napi_key = "k"\n' + "#" * (1 << 20) + "\n", 0o600)
    with pytest.raises(ConfigError) as err:
        load_config()
    assert "is over 1 MiB" in str(err.value) and "TOML" not in str(err.value)


def test_instance_from_config_hosts(laptop, vast_standin, monkeypatch, capsys):
    iid = vast_standin.add_instance()
    write_config(laptop, f'[vast]\napi_key = "{vast_standin.key}"\n'
                         f'[hosts."root@203.0.113.7"]\nprovider = "vast"\n'
                         f'instance = "{iid}"\n', 0o600)
    ref = resolve_instance("root@203.0.113.7")
    assert (ref.provider, ref.instance, ref.source) == ("vast", iid, "config")
    # the box is never contacted: flags or config say which instance it is
    assert gpurent(["instance", "root@203.0.113.7", "info", "--base-url",
                    vast_standin.base_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "config" and data["instance_state"]["state"] == "running"


def test_instance_detected_on_the_box(laptop, runpod_standin, monkeypatch, capsys):
    monkeypatch.setenv("RUNPOD_API_KEY", runpod_standin.key)
    monkeypatch.setenv("RUNPOD_POD_ID", runpod_standin.add_instance())
    assert gpurent(["instance", "local", "info", "--base-url", runpod_standin.base_url,
                    "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["source"] == "box" and data["provider"] == "runpod"
