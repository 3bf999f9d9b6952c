"""The suite does not depend on how it is started: started as a background job (SIGINT
and SIGQUIT ignored, as ``nohup scripts/test.sh &`` and many CI runners start it), the
processes tests start still get the default dispositions (``tests/conftest.py``)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests.fixtures.paths import ROOT

#: A child's view of its SIGINT and SIGQUIT dispositions, as the kernel holds them.
PROBE = ("import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler,"
         " signal.getsignal(signal.SIGQUIT) == signal.SIG_DFL)")


def test_a_child_of_a_test_gets_default_signal_dispositions() -> None:
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.split() == ["True", "True"]


def _ignore_like_a_background_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def test_the_suite_started_as_a_background_job_still_gives_children_defaults() -> None:
    """The test above, run by a pytest started with SIGINT and SIGQUIT ignored."""
    here = (f"{Path(__file__).relative_to(ROOT)}"
            "::test_a_child_of_a_test_gets_default_signal_dispositions")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", here],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
                         preexec_fn=_ignore_like_a_background_job)
    assert out.returncode == 0, out.stdout[-2000:]
    assert "1 passed" in out.stdout
