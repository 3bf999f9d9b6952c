"""Shared pytest configuration: harness plugins live in ``tests/fixtures/``."""

import pytest

pytest_plugins: list[str] = [
    "tests.fixtures.sshd",
    "tests.fixtures.netbox",
    "tests.fixtures.providers_standin",
    "tests.fixtures.hub_standin",
    "tests.fixtures.tui_runs",
    "tests.fixtures.shapes",
]


@pytest.fixture(autouse=True)
def _private_ledgers(tmp_path_factory: pytest.TempPathFactory,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep what tests launch and pull out of the real home: the box's run registry (for
    boxes on this machine) and the laptop's pull ledger, one pair per test."""
    where = tmp_path_factory.mktemp("ledgers")
    monkeypatch.setenv("GPURENT_RUN_REGISTRY", str(where / "runs.txt"))
    monkeypatch.setenv("GPURENT_DATA_DIR", str(where / "laptop-data"))
