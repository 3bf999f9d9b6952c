"""``gpurent providers check``: the read-only canary, against the stand-ins as the
providers answer and as a provider that changed its shape would."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fixtures.paths import ROOT

GPURENT = Path(sys.executable).with_name("gpurent")


def check(tmp_path: Path, **keys: tuple[str, str]) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PYTHONPATH=str(ROOT), XDG_CONFIG_HOME=str(tmp_path / "xdg"))
    for provider, (key, url) in keys.items():
        env[f"{provider.upper()}_API_KEY"] = key
        env[f"GPURENT_{provider.upper()}_URL"] = url
    return subprocess.run([str(GPURENT), "providers", "check", "--timeout", "10"], env=env,
                          capture_output=True, text=True, timeout=120)


def test_every_account_as_the_code_reads_it_and_nothing_changed(provider_standin,
                                                                  tmp_path):
    # The providers' own intervals (1-2 s): the turns waited are seconds, far above what
    # a busy machine's scheduling adds or takes away.
    standins = {p: provider_standin(p, pace=1.0) for p in ("vast", "runpod", "lambda")}
    for standin in standins.values():
        standin.add_instance()
    done = check(tmp_path, **{p: (s.key, s.base_url) for p, s in standins.items()})
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    for name in ("vast/default", "runpod/default", "lambda/default"):
        assert f"{name}: OK" in out
    assert "list: API v1, 1 instance(s)" in out and "list: API v2" in out
    assert "all as expected" in out
    assert out.count("rate limit: 0 answer(s) 429") == 3, out  # every account paced
    for standin in standins.values():
        assert standin.key not in out + done.stderr  # no secret in the report
        assert {r.method for r in standin.requests} == {"GET"}  # read-only
        assert all(r.fault is None for r in standin.requests)  # paced: never limited
    # The second read of one instance waited its turn (Vast: show 2 s apart).
    assert "waited for turns" in out and "rate limit: 0 answer(s) 429, 0.0 s" not in \
        out.split("vast/default")[1].split("runpod/default")[0]


def test_a_changed_shape_and_a_refused_key_are_said_field_by_field(provider_standin,
                                                                    tmp_path):
    vast, runpod = provider_standin("vast"), provider_standin("runpod")
    iid = vast.add_instance()
    vast.instances[iid]["start_date"] = "2026-12-01T10:00:00Z"  # now a string
    del vast.instances[iid]["cur_state"]
    runpod.add_instance()
    done = check(tmp_path, vast=(vast.key, vast.base_url), runpod=("revoked", runpod.base_url))
    assert done.returncode == 1
    out = done.stdout
    assert "vast/default: DIFFERS" in out
    assert "start_date: string, expected number or null" in out
    assert "cur_state: missing" in out and "2 differ" in out
    assert "runpod/default: FAILED" in out and "check the API key" in out
    assert "revoked" not in out
    as_json = subprocess.run(
        [str(GPURENT), "providers", "check", "--json"], capture_output=True, text=True,
        env={**{k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")},
             "PYTHONPATH": str(ROOT), "XDG_CONFIG_HOME": str(tmp_path / "x"),
             "VAST_API_KEY": vast.key, "GPURENT_VAST_URL": vast.base_url}, timeout=120)
    data = json.loads(as_json.stdout)
    assert data["ok"] is False and data["accounts"][0]["differs"] == [
        "cur_state: missing", "start_date: string, expected number or null"]
