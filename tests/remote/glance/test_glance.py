"""``gpurent glance`` (issue 42): the read-only page of every box and run, started as a
user starts it, on real parts: a real sshd box holding a run the trainer wrote for real
on the CPU (and a live one, and two whose names are markup), the Vast stand-in's
account, and Debian's Chromium, headless, loading the page at a phone's size. A wrong or
missing token gets 403, any other method than GET 405, the box's text stays text (no
script runs), nothing secret is in any answer, and a box lost is said with when it was
last reached."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from remote.glance.server import CSP
from remote.glance.shape import (
    MAX_COLUMNS,
    MAX_LOG_BYTES,
    MAX_ROWS,
    REDACTED,
    log_text,
    metrics_table,
    redact,
)
from tests.fixtures import glance_kit as kit
from tests.fixtures.sshd import SSHServer
from tests.fixtures.tui_runs import write_run
from trainer import runfiles
from trainer.text import format_duration, money


def title(dom: str) -> str:
    found = re.search(r"<title>(.*?)</title>", dom, re.S)
    return found.group(1) if found else ""


def test_the_page_shows_every_box_and_run_in_a_browser_and_runs_nothing_of_theirs(
        box: SSHServer, provider_standin, shapes_data: Path, tmp_path: Path) -> None:
    runs = Path(box.home) / "runs"
    runs.mkdir(parents=True)
    # A real run, trained once, while the page starts and the refusals are checked.
    training = kit.train(runs, "exp1", shapes_data, epochs=2, wait=False)
    sleeper = subprocess.Popen(["sleep", "600"])  # the live run's process
    served = None
    try:
        vast = provider_standin("vast")
        iid = vast.add_instance()
        vast.set_address(iid, box.host, box.port)
        vast.started(iid, 3600)
        stopped = vast.add_instance()
        vast.instances[stopped].update(actual_status="stopped", intended_status="stopped")
        env = kit.laptop_env(tmp_path, box, [f"vast:{iid}"], vast)
        served = kit.start_glance(env, "--port", "0", "--every", "2", "-i", box.key_path)
        bodies = check_the_refusals(served)
        kit.finished(training)
        real = runs / "exp1"
        shutil.copytree(real, runs / kit.HOSTILE_NAME,
                        ignore=shutil.ignore_patterns("weights"))
        marked = kit.hostile_copy(runs / kit.HOSTILE_NAME, kit.HOSTILE_MARKED)
        live = write_run(runs / "live", done=7, total=30, pid=sleeper.pid)
        for run in (real, runs / kit.HOSTILE_NAME, marked, live):
            kit.register_run(box, run)
        check_the_page(served, bodies, vast, (iid, stopped), real, env, box, tmp_path)
        assert served.stop() == 0
        state = Path(env["XDG_STATE_HOME"]) / "gpurent" / "glance.json"
        assert not state.exists()  # the record of the running page goes with it
    finally:
        if served is not None:
            served.stop()
        if training.poll() is None:
            os.killpg(training.pid, signal.SIGKILL)
        training.wait()
        sleeper.kill()
        sleeper.wait()


def check_the_refusals(served: kit.Served) -> list[bytes]:
    """The token: /api/ answers only with it, on 127.0.0.1 too; the page's files carry
    no data, so they need none. Only GET, whatever the token. The bodies said."""
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/#t=[A-Za-z0-9_-]{43}", served.url)
    bodies: list[bytes] = []
    for token in (None, "", "wrong-" + served.token[6:], served.token + "x"):
        status, _h, body = kit.request(served.base + "/api/runs", token)
        assert status == 403, (token, status)
        bodies.append(body)
    status, headers, page = kit.request(served.base + "/")
    assert status == 200 and headers["Content-Security-Policy"] == CSP
    assert "'unsafe-inline'" not in CSP and "script-src 'self'" in CSP
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert b"<script src=\"/app.js\"" in page and b"<script>" not in page
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        for path in ("/", "/api/runs", "/api/instances"):
            status, headers, body = kit.request(served.base + path, served.token, method,
                                                b"{}" if method != "DELETE" else None)
            assert (status, headers.get("Allow")) == (405, "GET"), (method, path, status)
            bodies.append(body)
    return bodies


def check_the_page(served: kit.Served, bodies: list[bytes], vast, ids: tuple[str, str],
                   real: Path, env: dict[str, str], box: SSHServer, tmp_path: Path) -> None:
    """What the JSON and the browser show, and a box lost."""
    iid, stopped = ids

    def all_read() -> dict | None:
        got = kit.api(served, "/api/runs")
        return got if len(got["runs"]) == 4 and all(r["reached"] for r in got["runs"]) \
            else None

    answer = kit.wait_until(all_read, 90, "the four runs read from the box")
    by_name = {r["name"]: r for r in answer["runs"]}
    instances = kit.api(served, "/api/instances")
    rows = {r["target"]: r for r in instances["instances"]}
    price = vast.instances[iid]["dph_total"]
    assert rows[f"vast:{iid}"]["state"] == "running" and rows[f"vast:{iid}"]["billing"]
    assert rows[f"vast:{iid}"]["price_per_hour"] == pytest.approx(price)
    assert rows[f"vast:{iid}"]["runs"] == 4 and rows[f"vast:{iid}"]["live_runs"] == 1
    assert rows[f"vast:{iid}"]["weights"]["safe"] is False  # never pushed, never pulled
    assert (rows[f"vast:{stopped}"]["state"], rows[f"vast:{stopped}"]["billing"]) == (
        "stopped", False)

    # The real run, as the trainer wrote it; its money from the instance's price.
    status_json = runfiles.read_status(real).fields
    run = by_name["exp1"]
    assert (run["state"], run["health"], run["epoch"], run["total_epochs"]) == (
        "completed", "completed", 2, 2)
    assert run["best_metric"] == pytest.approx(status_json["best_metric"])
    assert run["cost_usd"] == pytest.approx(status_json["elapsed_seconds"] * price / 3600)
    going = by_name["live"]
    assert (going["state"], going["health"], going["epoch"]) == ("running", "live", 7)
    eta = format_duration(23 * 42.0)
    assert going["words"]["eta"] == f"ETA {eta}"
    details = {}
    for name in ("exp1", kit.HOSTILE_MARKED):
        q = f"?run={by_name[name]['id']}"
        details[name] = [kit.api(served, f"/api/{what}{q}") for what in
                         ("status", "metrics", "log")]
    status, table, log = details["exp1"]
    assert status["state"] == "completed" and status["gpurent"]["health"] == "completed"
    assert [r["epoch"] for r in table["rows"]] == [1, 2]
    assert "metrics/mAP50-95" in table["columns"]
    assert "completed after 2/2 epochs" in log["log"]
    capped = kit.api(served, f"/api/log?run={run['id']}&bytes=999999999")
    assert capped["bytes"] == MAX_LOG_BYTES
    assert kit.request(served.base + "/api/log?run=../../etc", served.token)[0] == 400
    assert kit.request(served.base + "/api/status?run=" + "0" * 16, served.token)[0] == 404
    for path in ("/api/runs", "/api/instances"):
        bodies.append(kit.request(served.base + path, served.token)[2])
    bodies += [json.dumps(d).encode() for d in details.values()]
    for body in bodies:  # nothing secret: the account key, the token
        assert vast.key.encode() not in body and served.token.encode() not in body

    # The browser: the page as a phone shows it, its numbers, the box's markup as text.
    dom = kit.dump_dom(served.url)
    assert title(dom) == "gpurent glance"
    text = dom.replace("&amp;", "&")
    for said in ("exp1", "epoch 2/2 (100%)", f"mAP50-95 {status_json['best_metric']:.4g}",
                 f"{money(run['cost_usd'])} so far", "epoch 7/30 (23%)", f"ETA {eta}",
                 f"vast:{iid}", f"billing {money(price, 4)}/h", "weights NOT safe",
                 "&lt;img src=x onerror=alert(1)&gt;", "completed", ">live<"):
        assert said in text, said
    assert "<img" not in dom.lower() and "data-pwned" not in dom
    page = kit.dump_dom(f"{served.url}&run={by_name[kit.HOSTILE_MARKED]['id']}")
    assert title(page) == "gpurent glance" and "data-pwned" not in page
    assert "&lt;script&gt;document.title='pwned'" in page  # the log line, as text
    assert "<script>document" not in page and "<img" not in page.lower()
    assert re.search(r'<svg [^>]*class="chart"', page) and "<polyline" in page
    shot = kit.screenshot(served.url, tmp_path / "phone.png")
    assert kit.png_size(shot) == kit.PHONE

    # `gpurent glance --url` prints the running page's link (the TUI's key reads it too).
    said = subprocess.run([str(kit.GPURENT), "glance", "--url"], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60)
    assert (said.returncode, said.stdout.strip()) == (0, served.url)

    # The box is lost: its runs stay, said not reached since their last read.
    last = {r["name"]: r["seen_at"] for r in kit.api(served, "/api/runs")["runs"]}
    box.sshd.stop()

    def lost() -> dict | None:
        got = kit.api(served, "/api/runs")
        return got if got["runs"] and not any(r["reached"] for r in got["runs"]) else None

    gone = kit.wait_until(lost, 60, "the runs said not reached")
    # A read on a connection opened before sshd stopped can still end after the stop: its
    # last read is the bound, not the stop.
    seen_lost = time.time()
    for r in gone["runs"]:
        assert last[r["name"]] <= r["lost_since"] <= seen_lost  # its last read
        hhmm = time.strftime("%H:%M", time.localtime(r["lost_since"]))
        assert r["words"]["seen"] == f"not reached since {hhmm}", r["words"]
    assert "unreachable" in json.dumps(kit.api(served, "/api/instances"))


def test_what_an_answer_may_hold_is_bounded_and_secrets_are_redacted() -> None:
    rows = [{"epoch": n, **{f"metrics/m{c}": c / 7 for c in range(60)},
             "nested": {"a": 1}, "nan": math.nan, "name": "x" * 5000}
            for n in range(MAX_ROWS + 200)]
    table = metrics_table(rows)
    assert len(table["rows"]) == MAX_ROWS and table["truncated"]
    assert table["rows"][0]["epoch"] == 200 and len(table["columns"]) == MAX_COLUMNS
    assert "nested" not in table["rows"][0] and table["rows"][0].get("nan") is None
    assert all(len(v) <= 300 for r in table["rows"] for v in r.values() if isinstance(v, str))
    json.dumps(table, allow_nan=False)  # every number finite
    tail = b"".join(f"line {n} \x1b]0;title\x07<b>\n".encode() for n in range(5000))
    shown, cut = log_text(tail, 1000)
    assert cut and shown.startswith("line ") and len(shown.encode()) <= 1000
    assert "\x1b" not in shown and "<b>" in shown  # markup stays text: the page escapes it
    key = "standin-0123456789abcdef"
    said = redact({"error": f"GET https://x/?api_key={key} failed", key: [key]}, [key, ""])
    assert key not in json.dumps(said) and said["error"].count(REDACTED) == 1


@pytest.mark.anyio
async def test_p_in_the_tui_says_the_running_pages_link_and_none_for_a_stale_record(
        run_factory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from remote.glance import running_url
    from remote.glance.record import record_path
    from tui.app import GpurentApp
    from tui.spec import BoxSpec

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    record_path().parent.mkdir(parents=True)
    url = "http://127.0.0.1:8765/#t=" + "A" * 43
    # A record whose pid is gone, then one whose pid is another program: none runs.
    gone = subprocess.Popen(["true"])
    gone.wait()
    other = subprocess.Popen(["sleep", "60"])
    server = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)",
                               "gpurent", "glance"])
    try:
        for pid in (gone.pid, other.pid):
            record_path().write_text(json.dumps({"url": url, "pid": pid}))
            assert running_url() is None
        run = run_factory("exp1", done=1, total=3, state="completed")
        app = GpurentApp([BoxSpec("local", "local", project=str(run.parent))])
        async with app.run_test(size=(120, 40), notifications=True) as pilot:
            await pilot.press("P")
            await until_said(pilot, app, "No glance page runs on this laptop")
            record_path().write_text(json.dumps({"url": url, "pid": server.pid}))
            await pilot.press("P")
            await until_said(pilot, app, url)
    finally:
        for proc in (other, server):
            proc.kill()
            proc.wait()


async def until_said(pilot, app, words: str, timeout: float = 60.0) -> None:
    """Until a notification of ``app`` held ``words`` (kept: a toast may have gone)."""
    deadline = time.monotonic() + timeout
    while not any(words in said for said in getattr(app, "notified", [])):
        assert time.monotonic() < deadline, getattr(app, "notified", [])
        await pilot.pause(0.1)
