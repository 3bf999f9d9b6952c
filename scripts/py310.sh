#!/usr/bin/env bash
# Make the Python 3.10 venv with torch that the 3.10 box tests use, unless it is there
# and imports what training needs. Outside the clone (it is 4.7 GB), made once, under a
# lock so that two test runs do not build it at the same time.
set -euo pipefail
venv="${GPURENT_PY310_VENV:-$HOME/.cache/gpurent/py310}"
need="import torch, numpy, PIL, yaml, psutil"
base="${GPURENT_PY310:-${PYENV_ROOT:-$HOME/.pyenv}/versions/3.10.13/bin/python3}"
[ -x "$base" ] || base="$(command -v python3.10 || true)"
if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$need" 2>/dev/null; then
  exit 0
fi
if [ -z "$base" ] || [ ! -x "$base" ]; then
  echo "py310.sh: no Python 3.10 here (pyenv or python3.10 on PATH); the tests that" \
       "train on a 3.10 box will skip" >&2
  exit 0
fi
mkdir -p "$(dirname "$venv")"
(
  flock 9
  if [ -x "$venv/bin/python3" ] && "$venv/bin/python3" -c "$need" 2>/dev/null; then
    exit 0
  fi
  echo "py310.sh: making $venv (Python 3.10, torch 2.13.0: a few GB, once)" >&2
  start=$(date +%s)
  rm -rf "$venv"
  "$base" -m venv "$venv"
  "$venv/bin/python3" -m pip install -q --disable-pip-version-check \
    torch==2.13.0 numpy pillow pyyaml psutil
  "$venv/bin/python3" -c "$need"
  echo "py310.sh: made $venv in $(( $(date +%s) - start ))s" >&2
) 9>"$venv.lock"
