"""The fleet (``gpurent instances``): every instance of several accounts per provider,
listed through the real clients against the provider stand-ins (documented list shapes
and error bodies), priced, and each running box reached with one exec on a real sshd:
an idle box flagged with the right dollars, a busy one not, an unknown host key never
accepted silently."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.billing.accounts import configured_accounts
from remote.billing.providers import ConfigError
from remote.commands.instances import print_fleet
from remote.config import remember_hub_repo
from remote.fleet.boxweights import unknown
from remote.fleet.fleet import Fleet, FleetOptions, FleetRow, list_fleet
from remote.runs.probe import BoxReport, BoxRun
from tests.fixtures.fleet_kit import ROOT, account, finished_run, held_run, register_run
from tests.fixtures.fleetbox import known_as
from tests.fixtures.hub_standin import VALID_TOKEN, record_push
from trainer.guard.ring import GpuUse
from trainer.providers import ProviderError, get_provider
from trainer.providers.pace import Pacer
from trainer.providers.vast import VastProvider

GPURENT = Path(sys.executable).with_name("gpurent")


def test_list_calls_are_account_level_and_read_each_providers_shape(provider_standin):
    vast, runpod, lam = (provider_standin(p, pace=1.0)  # the providers' own waits
                         for p in ("vast", "runpod", "lambda"))
    iid = vast.add_instance(gpu_util=87.0, num_gpus=2)
    vast.started(iid, 3600)
    pid = runpod.add_instance()
    runpod.started(pid, 1800)
    lid = lam.add_instance()
    [v] = get_provider("vast", vast.key, vast.base_url).list_instances()
    assert (v.id, v.state, v.gpu, v.gpu_util) == (iid, "running", "2x RTX 4090", 87.0)
    assert abs(time.time() - 3600 - v.started_at) < 5
    [r] = get_provider("runpod", runpod.key, runpod.base_url).list_instances()
    assert (r.id, r.state, r.price_per_hour) == (pid, "running", 0.69)
    assert abs(time.time() - 1800 - r.started_at) < 5
    [la] = get_provider("lambda", lam.key, lam.base_url).list_instances()
    assert (la.id, la.price_per_hour, la.started_at) == (lid, 0.75, None)  # no start time
    # An instance's own key manages that instance only: never the account's list.
    for standin, iid_ in ((vast, iid), (runpod, pid)):
        key = standin.instance_key(iid_)
        client = get_provider(standin.provider, key, standin.base_url, retries=0)
        client.get_instance(iid_)  # its own instance: allowed
        with pytest.raises(ProviderError, match="check the API key") as refused:
            client.list_instances()
        assert refused.value.kind == "auth"
    # 429 with Retry-After is waited out; the Vast 429 body is plain text, naming its
    # interval; waits past the caller's bound end in a one-line error.
    waits: list[float] = []
    pacer = Pacer(clock=time.monotonic, sleep=waits.append)
    client = get_provider("runpod", runpod.key, runpod.base_url, pacer=pacer)
    runpod.fail(429, retry_after="3")
    assert [p.id for p in client.list_instances()] == [pid]
    assert [round(w, 1) for w in waits] == [3.0]
    vast.fail(429, times=5)
    with pytest.raises(ProviderError, match="rate limited.*too frequent"):
        get_provider("vast", vast.key, vast.base_url, max_rate_wait=2.0,
                     pacer=Pacer(sleep=lambda _s: None)).list_instances()


def test_several_accounts_listed_at_once_priced_and_a_failing_one_said(provider_standin,
                                                                       monkeypatch, tmp_path):
    work, home = provider_standin("vast", delay=0.3), provider_standin("vast", delay=0.3)
    runpod, lam = provider_standin("runpod", delay=0.3), provider_standin("lambda", delay=0.3)
    a, b = work.add_instance(), home.add_instance(dph_base=1.0)
    home.started(b, 2 * 3600)
    stopped = runpod.add_instance(status="EXITED", cost=0)
    lam.add_instance()
    config = tmp_path / "xdg" / "gpurent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text(
        f'[vast]\napi_key = "{work.key}"\nbase_url = "{work.base_url}"\n'
        f'[[accounts]]\nprovider = "vast"\nlabel = "home"\nkey_env = "VAST_KEY_HOME"\n'
        f'base_url = "{home.base_url}"\n'
        f'[[accounts]]\nprovider = "runpod"\nlabel = "lab"\napi_key = "{runpod.key}"\n'
        f'base_url = "{runpod.base_url}"\n'
        f'[[accounts]]\nprovider = "lambda"\nlabel = "old"\napi_key = "revoked"\n'
        f'base_url = "{lam.base_url}"\n'
        f'[[accounts]]\nprovider = "lambda"\nlabel = "unset"\nkey_env = "NOT_SET_ANYWHERE"\n')
    config.chmod(0o600)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("VAST_KEY_HOME", home.key)
    for var in ("VAST_API_KEY", "RUNPOD_API_KEY", "LAMBDA_API_KEY", "GPURENT_VAST_URL"):
        monkeypatch.delenv(var, raising=False)
    accounts = configured_accounts()
    assert [x.name for x in accounts] == ["vast/default", "vast/home", "runpod/lab",
                                          "lambda/old", "lambda/unset"]
    assert "revoked" not in repr(accounts)
    started = time.monotonic()
    fleet = list_fleet(accounts, FleetOptions(timeout=5, ssh=False))
    took = time.monotonic() - started
    assert took < 1.2, f"five accounts at 0.3 s each took {took:.2f} s: not at once"
    rows = {r.target or r.account: r for r in fleet.rows}
    assert rows[f"vast:{a}"].account == "vast/default"
    spent = rows[f"vast:{b}"].spent(fleet.now)
    assert spent == pytest.approx(2 * (1.0 + 250 * 0.2 / 720), rel=0.01)
    exited = rows[f"runpod:{stopped}"]
    assert not exited.full_price and exited.words(fleet.now) == ["stopped: disk $1.67/day"]
    assert "account failed: Lambda Cloud: list instances refused (HTTP 401" in \
        rows["lambda/old"].words(fleet.now)[0]
    assert rows["lambda/unset"].error == "no key: NOT_SET_ANYWHERE is not set"
    # The same through the command, as JSON.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([str(GPURENT), "instances", "--json", "--no-ssh"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    body = json.loads(out.stdout)
    assert body["schema"] == "gpurent.fleet/1" and len(body["rows"]) == 5
    config.write_text(config.read_text() + '[[accounts]]\nprovider = "vast"\napi_key = "x"\n'
                      'label = "home"\n')
    with pytest.raises(ConfigError, match="two accounts are called vast/home"):
        configured_accounts()


def test_what_may_bill_is_never_listed_free_and_an_unchecked_box_never_safe(capsys):
    """Rows of instances as the Vast client reads them: a container that exited on its
    own while meant to run bills its GPUs; a stopped one whose disk price Vast did not
    give bills an unknown amount, not nothing; a weights check that could not run is not
    safe, in the words or the JSON."""
    vast = VastProvider("k")
    exited = FleetRow("vast/default", "vast", vast.parse("7", {
        "actual_status": "exited", "intended_status": "running", "dph_base": 1.15,
        "dph_total": 1.2, "storage_total_cost": 0.05}),
        weights=unknown("the check did not end in time"))
    stopped = FleetRow("vast/default", "vast", vast.parse("8", {
        "actual_status": "stopped", "intended_status": "stopped", "dph_base": 1.15}))
    now = time.time()
    body = Fleet([exited, stopped], now, 0.1).to_dict()
    said = {row["target"]: row for row in body["rows"]}
    assert said["vast:7"]["billing"] is True and exited.full_price
    assert said["vast:7"]["instance"]["billing_per_hour"] == 1.2
    assert said["vast:7"]["weights"] == {"state": "unknown", "safe": False, "where": None,
                                         "reason": "the check did not end in time"}
    assert said["vast:7"]["words"] == ["weights: ? the check did not end in time",
                                       "exited but billing $1.2000/h"]
    assert said["vast:8"]["billing"] is False
    assert said["vast:8"]["instance"]["billing_per_hour"] is None
    assert said["vast:8"]["disk_per_day_usd"] is None
    assert said["vast:8"]["words"] == ["stopped: disk cost unknown"]
    print_fleet(Fleet([exited, stopped], now, 0.1))
    out = capsys.readouterr().out.splitlines()
    assert "exited, billing $1.2000/h" in out[0], out
    assert "stopped, not billing GPUs $?/h" in out[1], out
    assert out[2].startswith("2 instances, billing $1.2000/h now (+1 unknown)"), out


def test_an_idle_box_is_flagged_with_its_dollars_and_a_busy_one_is_not(provider_standin,
                                                                       box, tmp_path):
    vast = provider_standin("vast")
    idle = vast.add_instance(dph_base=1.0, storage_total_cost=0.2)  # $1.20/h
    vast.set_address(idle, box.host, box.port)
    vast.started(idle, 47 * 60 + 5)
    busy = vast.add_instance()
    vast.set_address(busy, box.host, box.port)  # the same sshd, but let it hold a run
    stranger = vast.add_instance()
    vast.set_address(stranger, box.host, box.port)
    options = known_as(tmp_path, box, f"vast:{idle}", f"vast:{busy}")
    fleet = list_fleet([account(vast)], options)
    rows = {r.target: r for r in fleet.rows}
    row = rows[f"vast:{idle}"]
    assert row.box is not None and row.box.runs == [] and row.box.gpus is None
    assert row.idle is not None and row.idle.why == "no live run"
    assert row.idle.words() == "idle 47 min, $0.94"  # 47 min at $1.20/h
    # An unknown host key is not accepted: unreachable, with the reason.
    assert rows[f"vast:{stranger}"].box is None
    assert "unreachable: " in " ".join(rows[f"vast:{stranger}"].words(fleet.now))
    assert "not known" in rows[f"vast:{stranger}"].unreachable or \
        "unknown" in rows[f"vast:{stranger}"].unreachable

    # A live run (its process holding) makes the box busy; the idle words go.
    with held_run(box) as run_dir:
        again = {r.target: r for r in list_fleet([account(vast)], options).rows}
        busy_row = again[f"vast:{busy}"]
        assert [(r.run_dir, r.live) for r in busy_row.box.runs] == [(str(run_dir), True)]
        assert busy_row.idle is None and again[f"vast:{idle}"].idle is None


def test_a_busy_pass_ends_the_idle_stretch_the_listings_remember(
        provider_standin, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Idle an hour ago, busy 10 min ago, idle again now, where neither the ring nor the
    run gives a time: the stretch the listings remember began now, not an hour ago."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.started(iid, 5 * 3600)
    seen = {"now": 0.0, "util": 0.0}

    def probe(client, inst, target) -> BoxReport:
        """A live run whose status gives no start, its GPU at ``util`` %, no ring."""
        return BoxReport(seen["now"], [GpuUse(0, seen["util"], 900.0, 81920.0)],
                         [BoxRun("/r/exp", "starting")])

    options = FleetOptions(timeout=5, weights=False, probe=probe)
    now = time.time()
    idle: list[float | None] = []
    for at, util in [(now - 3600, 1.0), (now - 600, 90.0), (now, 1.0)]:
        seen.update(now=at, util=util)
        [row] = list_fleet([account(vast)], options, now=at).rows
        idle.append(None if row.idle is None else row.idle.seconds)
    assert idle[0] is not None and idle[1] is None and idle[2] is not None, idle
    assert 0 <= idle[2] <= 1, idle


def count_execs(monkeypatch) -> list[str]:
    """Every command the laptop runs on a box over SSH from now on (its first line)."""
    from remote.transport.ssh import SSHTransport

    seen: list[str] = []
    real = SSHTransport.run

    def run(self, command: str, **kwargs):
        seen.append(command.splitlines()[0][:80])
        return real(self, command, **kwargs)

    monkeypatch.setattr(SSHTransport, "run", run)
    return seen


def test_each_reached_box_says_whether_its_weights_are_safe_by_the_gates_rules(
        provider_standin, box, tmp_path, hub_standin, monkeypatch):
    """The gate's verdict in each row, on the probe's connection: a Hub copy in the
    user's repository (confirmed by the Hub stand-in with the user's token) is safe; a
    copy the box names in a stranger's repository is not; a box with no run is unknown
    (never safe, nor "NOT safe": nothing was judged); a check that cannot end in time is
    ``weights: ?``."""
    monkeypatch.setenv("HF_ENDPOINT", hub_standin.url)
    monkeypatch.setenv("HF_TOKEN", VALID_TOKEN)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    remember_hub_repo("org/run")
    vast = provider_standin("vast")
    iid = vast.add_instance()
    vast.set_address(iid, box.host, box.port)
    options = known_as(tmp_path, box, f"vast:{iid}")
    [row] = list_fleet([account(vast)], options).rows
    assert row.weights is not None and row.weights.state == "unknown"  # not "NOT safe"
    assert row.weights.words() == "weights: ? no run registered on the box (files " \
        "outside runs are not checked)"

    run = finished_run(Path(box.home) / "proj" / "exp")
    register_run(box, run)
    record_push(hub_standin, run, ("best.pt", "status.json"))  # org/run: the user's
    execs = count_execs(monkeypatch)
    [row] = list_fleet([account(vast)], options).rows
    assert row.weights.words() == "weights safe (hub)", row.weights
    assert len(execs) == 2, execs  # no trainer on the box yet: the check's own exec
    execs.clear()
    [row] = list_fleet([account(vast)], options).rows  # installed now: one exec in all
    assert row.weights.words() == "weights safe (hub)", row.weights
    assert len(execs) == 1, execs
    other = finished_run(Path(box.home) / "proj" / "exp2")
    register_run(box, other)
    record_push(hub_standin, other, ("best.pt", "status.json"),
                repo="evil/copy")  # the box's claim: not the user's
    execs.clear()
    fleet = list_fleet([account(vast)], options)
    assert len(execs) == 1, execs
    [row] = fleet.rows
    assert row.weights.state == "unsafe" and "exp2/weights/best.pt" in row.weights.reason
    assert "exp/weights" not in row.weights.reason
    assert row.to_dict(fleet.now)["weights"]["safe"] is False

    from dataclasses import replace as changed

    os.utime(other / "status.json")  # the answer kept on the box no longer holds
    [row] = list_fleet([account(vast)], changed(options, weights_timeout=0.001)).rows
    assert row.box is not None and row.weights.state == "unknown"
    assert row.weights.words().startswith("weights: ? not checked: "), row.weights
    hub_standin.hold("paths_info")  # the Hub does not answer: the listing does not wait
    try:
        started = time.monotonic()
        [row] = list_fleet([account(vast)], changed(options, timeout=1.0,
                                                    weights_timeout=2.0)).rows
        # The Hub holds forever: a listing that waited on it would not come back at all.
        assert time.monotonic() - started < 60
    finally:
        hub_standin.release("paths_info")
    assert row.box is not None and row.weights.state == "unknown"
    # Whichever limit ran out first says so: the listing's own, or (on a loaded machine)
    # the box-side tool's, which is given the same 2 s.
    assert re.fullmatch(r"weights: \? (the check did not end in time|not checked: "
                        r"trainer safe did not end within 2 s)", row.weights.words()), row.weights
    [row] = list_fleet([account(vast)], changed(options, weights=False)).rows
    assert row.box is not None and row.weights is None


def test_a_folded_check_that_did_not_run_the_tool_is_asked_again_and_a_failed_one_is_unknown():
    """The probe's folded weights section is judged only when the tool ran there: a gate
    that would have to boot the box, a cut report or no exit code means the box is asked
    in an exec of its own; a tool that ran past its limit or failed is ``weights: ?``,
    even when its stdout looks like a report."""
    from remote.fleet.boxweights import (
        MAX_SAFE_BYTES,
        SAFE_OUT,
        SAFE_RC,
        box_weights,
        folded_answer,
    )
    from remote.link.gate import MARK

    report = json.dumps({"runs": []}).encode()
    assert folded_answer({}) is None
    assert folded_answer({SAFE_OUT: f"{MARK}\nhome /root\n".encode(),
                          SAFE_RC: b"0\n"}) is None
    assert folded_answer({SAFE_OUT: report}) is None
    assert folded_answer({SAFE_OUT: b"{" * (MAX_SAFE_BYTES + 1), SAFE_RC: b"0\n"}) is None
    assert folded_answer({SAFE_OUT: report, SAFE_RC: b"0\n"}).report == {"runs": []}

    class Box:
        label = "vast:1"

    def never(*_args):
        raise AssertionError("the Hub is not asked about a check that failed")

    for rc, said in ((b"124", "weights: ? not checked: trainer safe did not end within 30 s"),
                     (b"1", "weights: ? not checked: cannot list the weights on vast:1: ")):
        verdict = box_weights(Box(), "vast:1", True, never,
                              folded={SAFE_OUT: report, SAFE_RC: rc})
        assert verdict.state == "unknown" and verdict.words().startswith(said), verdict
