#!/usr/bin/env bash
# A second prepared command for a lent GPU machine, shorter than gpu-measure.sh (under 5 minutes):
# where a GPU step's time goes, with the WebGPU provider's two storage buffer caches side by side,
# and the engine on the device. After `source .device/on-device.sh`, it writes the SmolLM2-135M and
# Llama-3.2-1B synthetic GGUFs, then leaves under $OUT: gpu-memory.csv (nvidia-smi's memory use each
# second), profile-<shape>-<cache>.txt (bench gpu-profile: wall, device and host time per step, per
# build and row count, the costliest operators; "bucket" is onnxruntime's default, "simple" keeps
# every released buffer), and engine-<shape>-<cache>.txt (bench gpu through the engine, the bare graph
# and the floor, no peers: with the simple cache at every row count, then with the default cache at
# all but the largest, a smaller pool).
#
#   source .device/on-device.sh && bash scripts/gpu-profile.sh
#
# QUICK=1 runs the same steps on the tiny shape (a smoke test anywhere WebGPU runs, lavapipe included).
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
cd "$(dirname "$0")/.."
total=${TOTAL_SECONDS:-280}
left() { echo $((total - SECONDS)); }
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 1 > "$OUT/gpu-memory.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
quiet() { grep -v "W:onnxruntime\|^Warning: max"; }
cap() { local want=$1 have; have=$(( $(left) - 5 )); echo $(( have < want ? have : want )); }

if [ "${QUICK:-0}" = 1 ]; then
  small=tiny big=tiny rows=1,4 capacity=64
else
  small=smollm2-135m big=llama-3.2-1b rows=1,16,64 capacity=1024
fi
node --import tsx bench/synthetic-gguf.ts --shapes "$small,$big" --out .cache/gguf 2>&1 | tail -3

profile() { # shape builds cache seconds
  timeout "$(cap "$4")" node --import tsx bench/gpu-profile.ts --shape "$1" --builds "$2" --buffer-cache "$3" \
    --rows "$rows" --steps 8 --capacity "$capacity" --top 8 2>&1 | quiet > "$OUT/profile-$1-$3.txt"
  grep "row(s)" "$OUT/profile-$1-$3.txt"
}
profile "$small" gqa,float16,explicit bucket 60
profile "$small" gqa,float16,explicit simple 60
engine() { # cache rows seconds
  timeout "$(cap "$3")" node --import tsx bench/gpu.ts --device webgpu --shapes "$small" --rows "$2" --steps 16 --runs 1 --skip-torch --skip-cpu \
    --buffer-cache "$1" 2>&1 | quiet > "$OUT/engine-$small-$1.txt"
  grep -A4 "engine ms/step" "$OUT/engine-$small-$1.txt"; grep "failed" "$OUT/engine-$small-$1.txt" | head -2
}
engine simple "$rows" 50
engine bucket "${rows%,*}" 40
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 bucket 45
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 simple 45
echo "gpu-profile: done in ${SECONDS} s"
