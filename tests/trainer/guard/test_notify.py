"""The guard's webhooks: a local receiver gets its messages in each shape (plain JSON,
ntfy, Slack, Discord) from a real guard process; the webhook URLs and the API key, which
travel on stdin, appear in no process's argv, no file and no log line; a failing or
unreachable webhook never holds the action up."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

import pytest

from remote.billing.providers import ConfigError, notify_config
from remote.runs.guard import GuardError, arm_guard, notify_lines
from remote.transport.local import LocalTransport
from tests.fixtures.guard_kit import (
    Receiver,
    argv_holding,
    guard_json,
    guard_over,
    stop_guard,
    wait_until,
)
from tests.fixtures.guard_runs import assert_no_secret, make_run
from trainer import runfiles
from trainer.guard.notify import Notifier, Target, detect_format, parse_target, request_for
from trainer.guard.state import GuardError as BoxGuardError


@pytest.fixture
def receiver():
    got = Receiver()
    yield got
    got.close()


def test_each_shape_arrives_and_no_secret_is_in_any_argv(tmp_path, receiver,
                                                         provider_standin):
    vast = provider_standin("vast", settle_polls=1)
    iid = vast.add_instance()
    token = {fmt: secrets.token_hex(12) for fmt in ("json", "ntfy", "slack", "discord")}
    receiver.fail[f"/json/{token['json']}"] = 2  # delivered on the third try
    closed = f"http://127.0.0.1:{_closed_port()}/hook/{secrets.token_hex(12)}"
    urls = [f"{fmt} {receiver.base}/{fmt}/{tok}" for fmt, tok in token.items()] + \
        [f"json {closed}"]
    trainer = subprocess.Popen(["sleep", "600"])
    run_dir = tmp_path / "run"
    try:
        make_run(run_dir, trainer.pid)
        status = runfiles.read_status(run_dir).fields or {}
        status.update(elapsed_seconds=3600.0, best_metric=0.4123,
                      best_metric_name="mAP50-95", best_epoch=1)
        runfiles.atomic_write_json(run_dir / runfiles.STATUS_FILE, status)
        arm_guard(LocalTransport(), str(run_dir), "done", "stop", None, "vast", iid, vast.key,
                  send_account_key=True, base_url=vast.base_url, notify=urls, poll=0.2)
        hidden = [*token.values(), closed, vast.key]
        assert argv_holding(hidden) == []
        trainer.kill()
        trainer.wait()
        killed = time.monotonic()
        while guard_over(run_dir) is None:  # look at every process while the guard works
            assert argv_holding(hidden) == []
            pid = guard_json(run_dir).get("pid")
            try:  # the guard may end between two looks: then nothing is left to read
                held = Path(f"/proc/{pid}/environ").read_bytes() \
                    if isinstance(pid, int) else b""
            except (ProcessLookupError, FileNotFoundError):
                held = b""
            assert not any(s.encode() in held for s in hidden)
            time.sleep(0.05)
    finally:
        trainer.kill()
        trainer.wait()
        stop_guard(run_dir)
    final = guard_json(run_dir)
    assert final["state"] == "done" and final["outcome"]["action"] == "stop"
    # The run-ended message waited 2 + 4 s for its retries; the stop did not (a poll,
    # the look, the stop and the confirming poll: one Vast show interval, 2 s).
    assert vast.meter(iid).full_rate_seconds(killed) < 5.0

    plain = {r.body["event"]: r.body for r in receiver.to(f"/json/{token['json']}")}
    assert sorted(plain) == ["acted", "run-ended"]  # two tries failed: either may be first
    ended, acted = plain["run-ended"], plain["acted"]
    assert ended["state"] == "dead" and ended["run"] == "run" and ended["instance"] == iid
    assert ended["best"] == {"metric": "mAP50-95", "value": 0.4123, "epoch": 1}
    assert acted["spent_usd"] >= 0.452 and acted["price_per_hour"] == pytest.approx(0.452)
    assert acted["outcome"]["confirmed"] and "is stopped" in acted["guard"]
    assert "$0.45 so far" in acted["text"] or "$0.46 so far" in acted["text"]

    ntfy = receiver.to("/ntfy/")  # JSON publishing: the server root, the topic inside
    assert [m.body["topic"] for m in ntfy] == [token["ntfy"]] * 2
    assert ntfy[0].body["title"] == "gpurent: run dead" and ntfy[0].body["priority"] == 4
    assert "best mAP50-95 0.4123 at epoch 1" in ntfy[0].body["message"]
    slack = [r.body for r in receiver.to(f"/slack/{token['slack']}")]
    assert len(slack) == 2 and slack[1]["text"].startswith("*gpurent: instance stopped*\n")
    assert set(slack[0]) == {"text"}
    discord = [r.body for r in receiver.to(f"/discord/{token['discord']}")]
    assert len(discord) == 2 and discord[0]["content"].startswith("**gpurent: run dead**")
    assert discord[0]["allowed_mentions"] == {"parse": []}
    assert all(r.headers["Content-Type"] == "application/json" for r in receiver.got)

    told = final["notify"]
    assert sum(t["delivered"] for t in told) == 8
    lost = [t for t in told if not t["delivered"]]
    assert [t["target"] for t in lost] == [5, 5] and "after 4 tries" in lost[0]["detail"]
    for secret in hidden:
        assert_no_secret(run_dir, secret)


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_an_alarm_is_sent(tmp_path, receiver, vast_standin):
    iid = vast_standin.add_instance()
    vast_standin.ignore(iid, "destroy", "stop")
    run_dir = tmp_path / "run"
    writer = make_run(run_dir, 999_999_999, best=False)
    writer.write_status({"state": "failed", "pid": 999_999_999,
                         "error": {"type": "RuntimeError", "message": "<!channel> boom"}})
    arm_guard(LocalTransport(), str(run_dir), "done", "destroy", None, "vast", iid,
              vast_standin.key, send_account_key=True, base_url=vast_standin.base_url,
              notify=[f"slack {receiver.base}/s"], poll=0.1, confirm_timeout=0.3,
              give_up_after=1.0)
    try:
        final = wait_until("the alarm", lambda: guard_over(run_dir), timeout=60)
    finally:
        stop_guard(run_dir)
    assert final["state"] == "alarm"
    texts = [r.body["text"] for r in receiver.to("/s")]
    assert len(texts) == 2 and texts[1].startswith("*gpurent: ALARM")
    assert "&lt;!channel&gt; boom" in texts[0] and "<!channel>" not in texts[0]


def test_shapes_and_targets():
    assert detect_format("https://hooks.slack.com/services/T0/B0/x") == "slack"
    assert detect_format("https://discord.com/api/webhooks/1/abc") == "discord"
    assert detect_format("https://ntfy.sh/topic") == "ntfy"
    assert detect_format("https://ntfy.example.org/topic") == "ntfy"
    assert detect_format("https://example.org/hook") == "json"
    assert parse_target("discord https://example.org/x").format == "discord"
    assert parse_target("https://example.org/x", "slack").format == "slack"
    secret = "https://hooks.slack.com/services/T0/B0/very-secret"
    assert "very-secret" not in repr(parse_target(secret))
    for bad in ("ftp://example.org/x", "not a url at all", "teams https://x.org/y"):
        with pytest.raises(BoxGuardError) as err:
            parse_target(bad)
        assert "x.org" not in str(err.value) and "example" not in str(err.value)
    long = {"event": "acted", "title": "t", "text": "x" * 5000}
    url, body = request_for(Target("https://discord.com/api/webhooks/1/a", "discord"), long)
    assert len(json.loads(body)["content"]) == 2000
    url, _ = request_for(Target("https://push.example.org/sub/dir/topic", "ntfy"), long)
    assert url == "https://push.example.org/sub/dir/"
    assert notify_lines(["https://a.org/1", "ntfy https://b.org/2"], "slack") == \
        ["slack https://a.org/1", "ntfy https://b.org/2"]
    with pytest.raises(GuardError) as err:
        notify_lines(["https://a.org/ok", "hooks.slack.com/secret-path"])
    assert "#2" in str(err.value) and "secret-path" not in str(err.value)


def test_delivery_retries_then_reports(receiver):
    receiver.fail["/flaky"] = 2
    reports: list[tuple[int, str, bool, str]] = []
    waits: list[float] = []
    notifier = Notifier([Target(f"{receiver.base}/flaky", "json"),
                         Target(f"http://127.0.0.1:{_closed_port()}/gone", "json")],
                        lambda i, _t, e, ok, d: reports.append((i, e, ok, d)),
                        sleep=waits.append)
    notifier.send({"event": "alarm", "title": "t", "text": "x"})
    notifier.flush(30)
    assert sorted(reports) == [(1, "alarm", True, "delivered (try 3)"),
                               (2, "alarm", False, "not delivered after 4 tries: "
                                                   "Connection refused")]
    assert sorted(waits) == [2.0, 2.0, 4.0, 4.0, 8.0]  # 2 for the flaky one, 3 for the other


def test_notify_config_file(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text('[notify]\nurls = ["https://ntfy.sh/t1"]\nformat = "ntfy"\n')
    os.chmod(path, 0o600)
    assert notify_config(path) == (["https://ntfy.sh/t1"], "ntfy")
    path.write_text('[notify]\nurls = 3\n')
    with pytest.raises(ConfigError, match="must be a list"):
        notify_config(path)
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        notify_config(path)
    assert notify_config(tmp_path / "none.toml") == ([], None)


def test_gpurent_guard_arm_show_disarm(tmp_path, vast_standin, monkeypatch, capsys):
    """The headless command: the account key from the environment (sent because the
    config file asks, with a warning) and the webhook from the config file travel on
    stdin; a bad --notify is bad input that never echoes it."""
    from remote.cli import main as gpurent

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    config = tmp_path / "cfg" / "gpurent" / "config.toml"
    config.parent.mkdir(parents=True)
    config.write_text('[notify]\nurls = ["json http://127.0.0.1:9/secret-from-config"]\n'
                      '[vast]\nsend_account_key = true\n')
    os.chmod(config, 0o600)
    iid = vast_standin.add_instance()
    trainer = subprocess.Popen(["sleep", "600"])
    run_dir = tmp_path / "run"
    try:
        make_run(run_dir, trainer.pid)
        base = ["guard", str(run_dir)]
        assert gpurent([*base, "arm", "--notify", "ftp://secret-x", "--provider", "vast",
                        "--instance", iid]) == 2
        err = capsys.readouterr().err
        assert "not an http(s) URL" in err and "secret-x" not in err
        assert gpurent([*base, "arm", "--provider", "vast", "--instance", iid,
                        "--base-url", vast_standin.base_url, "--poll", "0.2"]) == 0
        said = capsys.readouterr()
        assert said.out.startswith("guard armed: when done then stop")
        assert said.err.startswith("WARNING: sending the vast account key to the box")
        assert "notifying 1 webhook (json)" in (run_dir / "guard.log").read_text()
        assert gpurent([*base, "--json"]) == 0
        shown = json.loads(capsys.readouterr().out)["guard"]
        assert shown["state"] == "armed" and shown["alive"] and shown["alarm"] is None
        # A guard that does not answer (stopped): the disarm is not said to have worked.
        guard_pid = json.loads((run_dir / "guard.json").read_text())["pid"]
        os.kill(guard_pid, signal.SIGSTOP)
        try:
            # Stopped, it cannot answer within any wait: a short one shows it.
            assert gpurent([*base, "disarm", "--wait", "2"]) == 1
            said = capsys.readouterr()
            assert said.out.startswith("guard armed")
            assert "has not said it stood down within 2 s" in said.err
        finally:
            os.kill(guard_pid, signal.SIGCONT)
        # Its pending SIGTERM lands now: it may stand down and exit while this disarm
        # looks at it, which is a disarm all the same (not a "stale pid").
        assert gpurent([*base, "disarm"]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out.startswith("guard disarmed")
    finally:
        trainer.kill()
        trainer.wait()
        stop_guard(run_dir)
    assert not vast_standin.calls("PUT") and not vast_standin.calls("DELETE")
    assert_no_secret(run_dir, "secret-from-config")
    assert_no_secret(run_dir, vast_standin.key)
