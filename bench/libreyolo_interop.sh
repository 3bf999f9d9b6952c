#!/bin/sh
# The real LibreYOLO 1.6.0 through gpurent over a real sshd: launch -> watch -> push ->
# stop -> resume -> complete, a run taken away from one sshd box resumed on another from
# the Hub (`gpurent resume ORG/REPO:NAME --on`), `libreyolo monitor` on our trainer's
# runs, and the test stand-in against the real one (bench/libreyolo_interop.py). Not part of the pytest
# suite: LibreYOLO needs its own ~6 GB venv (torch 2.14.1, torchvision 0.29.1), made here
# when missing (about 3 minutes from a local package index). Run from the repository
# root after scripts/setup.sh --dev; the result goes to docs/BENCHMARKS.md by hand.
#
#   bench/libreyolo_interop.sh            # venv: $LIBREYOLO_VENV or ~/.cache/gpurent/libreyolo
set -eu
VENV="${LIBREYOLO_VENV:-$HOME/.cache/gpurent/libreyolo}"
if ! "$VENV/bin/libreyolo" --version >/dev/null 2>&1; then
    echo "making LibreYOLO's venv in $VENV" >&2
    python3 -m venv "$VENV"
    "$VENV/bin/pip" install torch==2.14.1 torchvision==0.29.1 libreyolo==1.6.0
fi
exec .venv/bin/python bench/libreyolo_interop.py --venv "$VENV" "$@"
