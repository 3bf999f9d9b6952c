"""Shared pytest configuration: harness plugins live in ``tests/fixtures/``."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from trainer.text import clean_text

pytest_plugins: list[str] = [
    "tests.fixtures.sshd",
    "tests.fixtures.netbox",
    "tests.fixtures.providers_standin",
    "tests.fixtures.hub_standin",
    "tests.fixtures.tui_runs",
    "tests.fixtures.shapes",
    "tests.fixtures.boxes",
    "tests.fixtures.gpubox",
    "tests.fixtures.fleetbox",
]


def pytest_configure(config: pytest.Config) -> None:
    """Children of tests start with the signal dispositions a terminal gives them, however
    the suite was started: a job started with ``&`` (``nohup scripts/test.sh &``, many CI
    runners) inherits SIGINT and SIGQUIT ignored, and an ignored signal stays ignored
    across exec, so a graceful stop by SIGINT would never reach a child."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


@pytest.fixture(autouse=True)
def _private_ledgers(tmp_path_factory: pytest.TempPathFactory,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep what tests launch and pull out of the real home: the box's run registry and
    cache directory (for boxes on this machine) and the laptop's pull ledger, per test."""
    where = tmp_path_factory.mktemp("ledgers")
    monkeypatch.setenv("GPURENT_RUN_REGISTRY", str(where / "runs.txt"))
    monkeypatch.setenv("GPURENT_CACHE_DIR", str(where / "box-cache"))
    monkeypatch.setenv("GPURENT_DATA_DIR", str(where / "laptop-data"))


@pytest.fixture(autouse=True, scope="session")
def _notifications_kept() -> Iterator[None]:
    """Every notification an app shows is also kept in its ``notified`` list: a toast
    expires (sooner than a loaded machine lets a test look), what was said stays."""
    from tui.app import GpurentApp

    shown = GpurentApp.notify

    def notify(self: GpurentApp, message: str, **options: object) -> None:
        self.__dict__.setdefault("notified", []).append(clean_text(str(message)))
        shown(self, message, **options)  # type: ignore[arg-type]

    GpurentApp.notify = notify  # type: ignore[method-assign]
    yield
    GpurentApp.notify = shown  # type: ignore[method-assign]


@pytest.fixture(autouse=True, scope="session")
def _laptop_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """What the laptop remembers about boxes (``remote.config.state_path``) goes to a
    throwaway directory, never to the real home; subprocesses inherit it."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("laptop-state"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before
