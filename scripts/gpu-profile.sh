#!/usr/bin/env bash
# A second prepared command for a lent GPU machine, shorter than gpu-measure.sh (under 5 minutes):
# where a GPU step's time goes, with the WebGPU provider's two storage buffer caches side by side,
# and the engine on the device. After `source .device/on-device.sh`, it writes the SmolLM2-135M and
# Llama-3.2-1B synthetic GGUFs, then leaves under $OUT: gpu-memory.csv (nvidia-smi's memory use each
# second), profile-<shape>-<cache>.txt (bench gpu-profile: wall, device and host time per step, per
# build and row count, the costliest operators; "bucket" is onnxruntime's default, "simple" keeps
# every released buffer), and engine-smollm2.txt (bench gpu through the engine with the simple
# cache, the bare graph and the floor, no peers).
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
profile "$small" gqa,explicit bucket 60
profile "$small" gqa,explicit simple 60
timeout "$(cap 60)" node --import tsx bench/gpu.ts --device webgpu --shapes "$small" --rows "$rows" --steps 16 --runs 1 --skip-torch --skip-cpu \
  --buffer-cache simple 2>&1 | quiet > "$OUT/engine-$small.txt"
tail -9 "$OUT/engine-$small.txt" | head -5
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 bucket 45
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 simple 45
echo "gpu-profile: done in ${SECONDS} s"
