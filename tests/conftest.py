"""Shared pytest configuration: harness plugins live in ``tests/fixtures/``."""

pytest_plugins: list[str] = [
]
