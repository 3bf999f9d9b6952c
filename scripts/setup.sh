#!/usr/bin/env bash
# Create .venv with the app, the trainer extra and (with --dev) the test tools and the
# Modal client (its tests run the real `modal` CLI against a local stand-in).
# torch 2.13.0 is installed first so that the `train` extra's range installs nothing more.
set -euo pipefail
cd "$(dirname "$0")/.."
extras="train"
if [ "${1:-}" = "--dev" ]; then extras="train,dev,modal"; fi
if [ ! -x .venv/bin/python ]; then python3 -m venv .venv; fi
.venv/bin/python -m pip install -q --disable-pip-version-check torch==2.13.0
.venv/bin/python -m pip install -q --disable-pip-version-check -e ".[${extras}]"
