#!/usr/bin/env bash
# Run preflight and a set of profiles on a CUDA machine, then a short training with automatic
# batch size (batch=-1) per model size, and print two Markdown sections for
# docs/BENCHMARKS.md. Each profile is compared with the first one (workers=0, fp32),
# measured in the same run, so the ratios hold on a noisy machine.
#
#   bench/gpu_check.sh                  # on the GPU box, from the repository root
#   DEVICE=cpu IMGSZ=64 BATCH=4 STEPS=3 WARMUP=1 TRAIN=32 TRAIN_IMGSZ=64 VAL=8 \
#       bench/gpu_check.sh              # smoke run
#
# Environment: PYTHON (python3), DEVICE (0), MODEL (gpdet-n), IMGSZ (320), BATCH (32),
# STEPS (30), WARMUP (5), TRAIN (512 generated images), WORKERS (8), PRICE (2.50 USD/h).
# The training section: SIZES (n s m), TRAIN_IMGSZ (640: its images and imgsz),
# EPOCHS (2), VAL (64 generated validation images).
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
SIZES=${SIZES:-n s m}
TRAIN_IMGSZ=${TRAIN_IMGSZ:-640}
EPOCHS=${EPOCHS:-2}
VAL=${VAL:-64}
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

shapes=$WORK/shapes$TRAIN_IMGSZ
"$PYTHON" -m trainer shapes "$shapes" --train "$TRAIN" --val "$VAL" --imgsz "$TRAIN_IMGSZ" \
    > /dev/null
for size in $SIZES; do
    "$PYTHON" -m trainer train "model=gpdet-$size" "data=$shapes/data.yaml" \
        "imgsz=$TRAIN_IMGSZ" "epochs=$EPOCHS" batch=-1 "device=$DEVICE" "workers=$WORKERS" \
        "project=$WORK/runs" "name=$size" exist_ok=True > "$WORK/train_$size.out" \
        2> "$WORK/train_$size.err" \
        || echo "training gpdet-$size failed: $(tail -n 1 "$WORK/train_$size.err")" >&2
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

# shellcheck disable=SC2086  # $SIZES holds several words
"$PYTHON" - "$WORK" "$TRAIN_IMGSZ" "$EPOCHS" "$TRAIN" $SIZES <<'EOF'
import json
import sys
from pathlib import Path

work, imgsz, epochs, images, sizes = (Path(sys.argv[1]), sys.argv[2], sys.argv[3],
                                      sys.argv[4], sys.argv[5:])


def last_line(path: Path) -> str:
    lines = path.read_text(errors="replace").strip().splitlines() if path.exists() else []
    return lines[-1] if lines else ""


def number(value: object, fmt: str, scale: float = 1.0) -> str:
    real = isinstance(value, int | float) and not isinstance(value, bool)
    return format(value / scale, fmt) if real else "-"


print(f"\n## autobatch and {epochs}-epoch training per model size (bench/gpu_check.sh)\n")
print("| size | chosen batch | peak memory GiB | images/s | epoch seconds |")
print("|---|---|---|---|---|")
failures = []
for size in sizes:
    try:
        summary = json.loads((work / "runs" / size / "summary.json").read_text())
    except (OSError, ValueError):
        summary = {}
    if summary.get("state") != "completed":
        why = ((summary.get("error") or {}).get("message")
               or last_line(work / f"train_{size}.err") or last_line(work / f"train_{size}.out"))
        failures.append(f"- gpdet-{size} {summary.get('state', 'failed')}: {why or 'no output'}")
    batch = summary.get("batch") if summary.get("state") == "completed" else "failed"
    print(f"| gpdet-{size} | {'-' if batch is None else batch} | "
          f"{number(summary.get('peak_memory_bytes'), '.2f', 2**30)} | "
          f"{number(summary.get('images_per_second'), '.0f')} | "
          f"{number(summary.get('mean_epoch_seconds'), '.1f')} |")
print(f"\n(batch=-1, imgsz {imgsz}, epochs {epochs}, {images} generated shapes images)")
if failures:
    print("\n" + "\n".join(failures))
EOF
