#!/usr/bin/env bash
# Set up .venv and run the main job on the built-in default: a real local training run
# on a generated shapes dataset, watched in the TUI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
status=0
.venv/bin/gpurent-tui --demo "$@" || status=$?
bin="$(pwd)/.venv/bin"
echo "gpurent-tui and gpurent are in $bin; to run them by name:"
echo "  export PATH=\"$bin:\$PATH\"    (or install the app on its own: pipx install $(pwd))"
exit "$status"
