#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run all of it.
# Needs: python3 (3.11+); as root it installs openssh-server, iproute2, tmux and chromium
# (the glance page's tests load it in a real headless browser) with apt.
# The sshd the tests talk to is started by a pytest fixture, not here.
# The tests that train on a Python 3.10 box need a 3.10 venv with torch (4.7 GB: the
# index's torch for 3.10 is a CUDA build); it is made once, outside the clone, in
# $GPURENT_PY310_VENV (default ~/.cache/gpurent/py310) from pyenv's or PATH's python3.10.
# Without a Python 3.10 those tests skip and say why (-rs).
set -euo pipefail
cd "$(dirname "$0")/.."
# Three installs that wait on the network and the disk run side by side, each waited for
# before the tests: the system packages (apt), the 3.10 venv (minutes on a clean machine:
# unzipping a few GB) and .venv (setup.sh).
scripts/py310.sh &
py310=$!
apt=""
if ! { [ -x /usr/sbin/sshd ] && command -v ip >/dev/null && command -v tmux >/dev/null \
       && command -v chromium >/dev/null; }; then
  if [ "$(id -u)" = 0 ]; then
    { apt-get update -q
      DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client \
        iproute2 tmux chromium; } &
    apt=$!
  else
    echo "test.sh: openssh-server, iproute2, tmux or chromium is missing and this is not root" >&2
  fi
fi
scripts/setup.sh --dev
if [ -n "$apt" ]; then wait "$apt"; fi
wait "$py310"
.venv/bin/ruff check .
# The type hints of remote/ and tui/ ([tool.mypy] in pyproject.toml; its cache in
# .mypy_cache: about 30 s cold, a few seconds after).
.venv/bin/mypy
# Four workers on two cores: the tests wait on an sshd, a training child or a poll for
# about half their time (measured: ~1,150 CPU-s in ~2,300 s of tests).
# The tests marked `alone` compare two durations measured apart; they run afterwards, one
# at a time, so that no other test's load falls on one of the two.
many=0
.venv/bin/python -m pytest -q -rs --durations=25 -n "${GPURENT_TEST_WORKERS:-4}" \
  -m "not alone" "$@" || many=$?
alone=0
.venv/bin/python -m pytest -q -rs -m alone "$@" || alone=$?
# 5 is pytest's "no test selected": a part that the paths given hold none of.
if [ "$many" = 5 ] && [ "$alone" = 5 ]; then exit 5; fi
for rc in "$many" "$alone"; do
  if [ "$rc" != 0 ] && [ "$rc" != 5 ]; then exit "$rc"; fi
done
exit 0
