#!/usr/bin/env bash
# Set up everything the test suite needs on a fresh machine, then run all of it.
# Needs: python3 (3.11+); as root it installs openssh-server, iproute2 and tmux with apt.
# The sshd the tests talk to is started by a pytest fixture, not here.
# The tests that train on a Python 3.10 box need a 3.10 venv with torch (4.7 GB: the
# index's torch for 3.10 is a CUDA build); it is made once, outside the clone, in
# $GPURENT_PY310_VENV (default ~/.cache/gpurent/py310) from pyenv's or PATH's python3.10.
# Without a Python 3.10 those tests skip and say why (-rs).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! { [ -x /usr/sbin/sshd ] && command -v ip >/dev/null && command -v tmux >/dev/null; }; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q openssh-server openssh-client iproute2 tmux
  else
    echo "test.sh: openssh-server, iproute2 or tmux is missing and this is not root" >&2
  fi
fi
scripts/setup.sh --dev
scripts/py310.sh
.venv/bin/ruff check .
exec .venv/bin/python -m pytest -q -rs --durations=25 "$@"
