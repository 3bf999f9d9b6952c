"""Shared pytest configuration: harness plugins live in ``tests/fixtures/``."""

from __future__ import annotations

import inspect
import os
import signal
from collections.abc import Iterator

import pytest

from trainer.text import clean_text

#: Seconds Textual's Pilot waits for the screen's widgets to handle the messages pending
#: when a key is pressed or a pause asked (its own default is 30). On a machine at load
#: 15 the screen took longer than 30 s to settle after opening the launch form or during
#: a pull, and the Pilot raised ``WaitForScreenTimeout`` with nothing wrong in the app. A
#: screen that never settles still fails, after this and before the test's own timeout.
PILOT_WAIT = 120.0

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
    "tests.fixtures.modal_env",
    "tests.fixtures.sleeper",
    "tests.fixtures.small_disk",
]


#: Threads torch may use in every process the suite starts (trainers, profiles, preflights,
#: on this machine or on an sshd box). Three workers and their trainers share two cores:
#: a trainer's second OpenMP thread spins at every barrier while it waits for a core,
#: which cost a 2-epoch run 1.2 CPU-s of its 6 here. What a test asserts never depends on it.
SUITE_THREADS = "1"


def pytest_configure(config: pytest.Config) -> None:
    """Children of tests start with the signal dispositions a terminal gives them, however
    the suite was started: a job started with ``&`` (``nohup scripts/test.sh &``, many CI
    runners) inherits SIGINT and SIGQUIT ignored, and an ignored signal stays ignored
    across exec, so a graceful stop by SIGINT would never reach a child. Every child also
    gets ``OMP_NUM_THREADS`` (``SUITE_THREADS``) unless the run was given one."""
    os.environ.setdefault("OMP_NUM_THREADS", SUITE_THREADS)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGQUIT) == signal.SIG_IGN:
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked ``first`` (the whole user paths, a minute or more each) start
    first: xdist deals the first tests out one to a worker, so each runs beside the
    short tests, and none starts last as the suite's tail (measured: 4 workers done at
    ~625 s of tests, the fourth at 860 s with both paths at its end). Only these few: all
    the slow tests first ran three trainers at once on two cores (slower, 920 s)."""
    items.sort(key=lambda item: item.get_closest_marker("first") is None)


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


@pytest.fixture(autouse=True, scope="session")
def _pilot_waits_for_a_loaded_machine() -> Iterator[None]:
    """The Pilot's wait for the screen to settle (``Pilot._wait_for_screen``, which
    ``press``, ``pause`` and ``run_test`` call with its default) is ``PILOT_WAIT``.
    Textual has no setting for it: only that one default is replaced, and a Textual
    whose method no longer takes ``timeout`` fails here, not as a slow test."""
    from textual.pilot import Pilot

    waits = Pilot._wait_for_screen
    if "timeout" not in inspect.signature(waits).parameters:
        raise RuntimeError("textual.pilot.Pilot._wait_for_screen takes no timeout any "
                           "more: see PILOT_WAIT in tests/conftest.py")

    async def wait_for_screen(self: Pilot, timeout: float = PILOT_WAIT) -> bool:
        return await waits(self, timeout=timeout)

    Pilot._wait_for_screen = wait_for_screen  # type: ignore[method-assign]
    yield
    Pilot._wait_for_screen = waits  # type: ignore[method-assign]
