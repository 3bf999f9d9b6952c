"""Shared pytest configuration: harness plugins live in ``tests/fixtures/``."""

pytest_plugins: list[str] = [
    "tests.fixtures.sshd",
    "tests.fixtures.netbox",
    "tests.fixtures.providers_standin",
    "tests.fixtures.hub_standin",
    "tests.fixtures.tui_runs",
    "tests.fixtures.shapes",
]
