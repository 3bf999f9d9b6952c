#!/usr/bin/env bash
# Set up .venv and run the main job on the built-in default: a real local training run
# on a generated shapes dataset, watched in the TUI.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/gpurent-tui --demo "$@"
