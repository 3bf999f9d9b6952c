"""The money model and ``gpurent cost``: the published figures, run costs, and prices
read from a provider stand-in."""

from __future__ import annotations

import json

import pytest

from remote.billing.cost import (
    break_even_hours,
    cost_report,
    format_report,
    stopped_per_hour,
)
from remote.cli import main as gpurent
from trainer import runfiles


def test_published_figures():
    stopped = stopped_per_hour(250, 0.20)
    assert round(stopped, 4) == 0.0694
    hours = break_even_hours(1.00, stopped)
    assert hours == pytest.approx(14.4)
    assert 13.5 * stopped < 1.00 < 15.0 * stopped  # stop for 13.5 h, destroy for 15 h
    # an average (730 h) month gives the lower figure; the model names its assumption
    assert round(stopped_per_hour(250, 0.20, hours_per_month=730), 4) == 0.0685
    assert break_even_hours(1.00, 0.0) is None
    with pytest.raises(ValueError):
        stopped_per_hour(-1, 0.2)


def test_run_figures_from_status():
    status = {"state": "running", "elapsed_seconds": 7200, "mean_epoch_seconds": 600,
              "eta_seconds": 3600}
    report = cost_report(price_per_hour=2.0, disk_gb=250, status=status)
    assert report.spent_usd == pytest.approx(4.0)
    assert report.per_epoch_usd == pytest.approx(2.0 / 6)
    assert report.to_finish_usd == pytest.approx(2.0)
    assert report.projected_total_usd == pytest.approx(6.0)
    text = "\n".join(format_report(report))
    assert "$4.00 so far" in text and "$2.00 (ETA x price)" in text
    done = cost_report(price_per_hour=2.0, status={**status, "state": "completed"})
    assert done.to_finish_usd == 0.0
    unknown = cost_report(status=status)
    assert unknown.spent_usd is None and unknown.stopped_per_hour is None
    assert "pass --price" in "\n".join(format_report(unknown))


def test_cli_reproduces_the_published_figures(capsys):
    assert gpurent(["cost", "--disk-gb", "250", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert round(data["stopped_per_hour"], 4) == 0.0694
    assert data["rebuild_usd"] == 1.0 and round(data["break_even_hours"]) == 14
    assert gpurent(["cost", "--disk-gb", "250", "--rebuild-usd", "1"]) == 0
    out = capsys.readouterr().out
    assert "$0.0694/h" in out and "pauses under ~14 h" in out


def test_cli_run_dir_and_bad_input(tmp_path, capsys):
    writer = runfiles.RunWriter(tmp_path / "run")
    writer.write_status({"state": "running", "elapsed_seconds": 1800, "eta_seconds": 5400,
                         "mean_epoch_seconds": 300})
    assert gpurent(["cost", str(tmp_path / "run"), "--price", "1.2", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["spent_usd"] == pytest.approx(0.6)
    assert data["to_finish_usd"] == pytest.approx(1.8)
    assert data["per_epoch_usd"] == pytest.approx(0.1)
    assert gpurent(["cost", str(tmp_path / "missing")]) == 2
    assert "no status.json" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_:
        gpurent(["cost", "--price", "-3"])
    assert exit_.value.code == 2


def test_cli_reads_prices_from_the_provider(vast_standin, monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance(dph_total=0.61, disk_space=100.0, storage_cost=0.15,
                                    storage_total_cost=100 * 0.15 / 720)
    assert gpurent(["cost", "--provider", "vast", "--instance", iid, "--base-url",
                    vast_standin.base_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["price_per_hour"] == pytest.approx(0.61) and data["disk_gb"] == 100
    assert data["stopped_per_hour"] == pytest.approx(100 * 0.15 / 720)
    assert data["price_source"] == "vast API"
    monkeypatch.setenv("VAST_API_KEY", "wrong")
    assert gpurent(["cost", "--provider", "vast", "--instance", iid, "--base-url",
                    vast_standin.base_url]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "check the API key" in err


def test_lambda_gets_no_stop_advice(lambda_standin, monkeypatch, tmp_path, capsys):
    """Lambda cannot stop: no stopped price, no break-even, no "stopping is cheaper"."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("LAMBDA_API_KEY", lambda_standin.key)
    iid = lambda_standin.add_instance()
    base = ["cost", "--provider", "lambda", "--instance", iid, "--base-url",
            lambda_standin.base_url]
    assert gpurent(base) == 0
    out = capsys.readouterr().out
    assert "running      $0.7500/h (lambda API)" in out
    assert "cannot stop an instance" in out
    assert "pauses under" not in out and "break-even" not in out and "rebuild" not in out
    assert gpurent([*base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["can_stop"] is False
    assert data["stopped_per_hour"] is None and data["break_even_hours"] is None
    assert gpurent(["cost", "--provider", "lambda", "--price", "1.1", "--disk-gb", "100"]) == 0
    assert "pauses under" not in capsys.readouterr().out


def test_a_stopped_vast_instance_shows_its_running_price(vast_standin, monkeypatch, tmp_path,
                                                         capsys):
    """Vast's dph_total follows the state (stopped: the storage alone); the running
    price comes from dph_base + storage."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setenv("VAST_API_KEY", vast_standin.key)
    iid = vast_standin.add_instance(actual_status="stopped", intended_status="stopped")
    raw = vast_standin.instances[iid]
    assert raw["dph_total"] == pytest.approx(250 * 0.20 / 720)  # as Vast answers it
    assert gpurent(["cost", "--provider", "vast", "--instance", iid, "--base-url",
                    vast_standin.base_url, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["price_per_hour"] == pytest.approx(0.452)
    assert data["stopped_per_hour"] == pytest.approx(250 * 0.20 / 720)
