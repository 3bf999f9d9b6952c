#!/usr/bin/env bash
# Run preflight and a set of profiles on a CUDA machine and print a Markdown section for
# docs/BENCHMARKS.md. Each profile is compared with the first one (workers=0, fp32),
# measured in the same run, so the ratios hold on a noisy machine.
#
#   bench/gpu_check.sh                  # on the GPU box, from the repository root
#   DEVICE=cpu IMGSZ=64 BATCH=4 STEPS=3 WARMUP=1 TRAIN=32 bench/gpu_check.sh   # smoke run
#
# Environment: PYTHON (python3), DEVICE (0), MODEL (gpdet-n), IMGSZ (320), BATCH (32),
# STEPS (30), WARMUP (5), TRAIN (512 generated images), WORKERS (8), PRICE (2.50 USD/h).
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-python3}
DEVICE=${DEVICE:-0}
MODEL=${MODEL:-gpdet-n}
IMGSZ=${IMGSZ:-320}
BATCH=${BATCH:-32}
STEPS=${STEPS:-30}
WARMUP=${WARMUP:-5}
TRAIN=${TRAIN:-512}
WORKERS=${WORKERS:-8}
PRICE=${PRICE:-2.50}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

require=--require-gpu
[ "$DEVICE" = cpu ] && require=
status=0
"$PYTHON" -m trainer preflight $require --json > "$WORK/preflight.json" || status=$?
if [ "$status" -ne 0 ] && [ "$status" -ne 1 ]; then
    echo "preflight crashed (exit $status)" >&2
    exit "$status"
fi
"$PYTHON" -m trainer shapes "$WORK/shapes" --train "$TRAIN" --val 8 --imgsz "$IMGSZ" > /dev/null

# name | extra train args | batch
CONFIGS=(
    "workers=0, fp32|workers=0 amp=False|$BATCH"
    "workers=0, amp|workers=0 amp=True|$BATCH"
    "workers=$WORKERS, amp|workers=$WORKERS amp=True|$BATCH"
    "workers=$WORKERS, amp, batch x2|workers=$WORKERS amp=True|$((BATCH * 2))"
)
i=0
for entry in "${CONFIGS[@]}"; do
    IFS='|' read -r name extra batch <<< "$entry"
    echo "$name" > "$WORK/profile_$i.name"
    # shellcheck disable=SC2086  # $extra holds several key=value words
    "$PYTHON" -m trainer profile "data=$WORK/shapes/data.yaml" "model=$MODEL" \
        "imgsz=$IMGSZ" "batch=$batch" "device=$DEVICE" $extra "steps=$STEPS" \
        "warmup=$WARMUP" "price=$PRICE" --out "$WORK/profile_$i.json" --json > /dev/null \
        2> "$WORK/profile_$i.err" \
        || echo "profile '$name' failed: $(tail -n 1 "$WORK/profile_$i.err")" >&2
    i=$((i + 1))
done

"$PYTHON" - "$WORK" "$i" <<'EOF'
import json
import sys
from pathlib import Path

work, count = Path(sys.argv[1]), int(sys.argv[2])
pre = json.loads((work / "preflight.json").read_text())
torch_info = pre.get("torch") or {}
print("## preflight and profile on CUDA (bench/gpu_check.sh)\n")
print(f"torch {torch_info.get('version')} (CUDA {torch_info.get('cuda')}), driver "
      f"{(pre.get('driver') or {}).get('version')}, preflight ok: {pre['ok']}\n")
for gpu in pre.get("gpus", []):
    k = gpu["kernel"]
    kernel = (f"matmul {k['seconds'] * 1000:.2f} ms, {k['tflops']:.1f} TFLOP/s"
              if k["ok"] else f"matmul FAILED: {k['error']}")
    print(f"- GPU {gpu['index']}: {gpu['name']}, sm {gpu['capability']} "
          f"({gpu['arch_support']}), {gpu['memory_total_bytes'] / 2**30:.0f} GiB, {kernel}")
for check in pre["checks"]:
    if check["status"] in ("warn", "fail"):
        print(f"- preflight {check['status']}: {check['name']}: {check['message']}")
print()
print("| config | step ms | data wait | GPU busy | images/s | vs first | verdict | $/100 epochs |")
print("|---|---|---|---|---|---|---|---|")
base = last = None
for i in range(count):
    name = (work / f"profile_{i}.name").read_text().strip()
    path = work / f"profile_{i}.json"
    if not path.exists():
        print(f"| {name} | failed | | | | | | |")
        continue
    r = last = json.loads(path.read_text())
    t, c = r["timing"], r["config"]
    base = base or t["images_per_second"]
    busy = r["gpu_busy_fraction"]
    cost = r["cost"]["cost_per_100_epochs"]
    print(f"| {name} (batch {c['batch']}, {c['precision']}) | {t['step_seconds'] * 1000:.1f} | "
          f"{t['data_wait_fraction'] * 100:.0f} % | "
          f"{'-' if busy is None else f'{busy * 100:.0f} %'} | {t['images_per_second']:.0f} | "
          f"{t['images_per_second'] / base:.2f}x | {r['verdict']} | "
          f"{'-' if cost is None else f'{cost:.2f}'} |")
if last:
    c, cost = last["config"], last["cost"]
    print(f"\n(model {c['model']}, imgsz {c['imgsz']}, {c['gpu'] or c['device']}, "
          f"{last['timing']['steps']} timed steps; cost for {cost['epoch_images']} training "
          f"images per epoch at ${cost['price_per_hour']}/h, training steps only)")
EOF
