#!/usr/bin/env bash
# A second prepared command for a lent GPU machine, shorter than gpu-measure.sh (under 5 minutes):
# where a GPU step's time goes, with the WebGPU provider's two storage buffer caches side by side,
# and the engine on the device. After `source .device/on-device.sh`, it writes the SmolLM2-135M and
# Llama-3.2-1B synthetic GGUFs, then leaves under $OUT: gpu-memory.csv (nvidia-smi's memory use each
# second), engine-<shape>-<cache>.txt (bench gpu through the engine, the bare graph and the floor,
# no peers, with each cache, first: whether the engine runs on the device), and
# profile-<shape>-<cache>[-context<n>].txt (bench gpu-profile: wall, device and host time per step,
# per build and row count, the costliest operators; "bucket" is onnxruntime's default, "simple"
# keeps every released buffer; at 16 cached positions, and once at 512, where the step's past span
# covers 512 positions of the pools instead of 64).
#
#   source .device/on-device.sh && bash scripts/gpu-profile.sh
#
# QUICK=1 runs the same steps on the tiny shape (a smoke test anywhere WebGPU runs, lavapipe included).
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
cd "$(dirname "$0")/.."
total=${TOTAL_SECONDS:-300}
left() { echo $((total - SECONDS)); }
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 1 > "$OUT/gpu-memory.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
quiet() { grep -v "W:onnxruntime\|^Warning: max"; }
cap() { local want=$1 have; have=$(( $(left) - 5 )); echo $(( have < want ? have : want )); }

if [ "${QUICK:-0}" = 1 ]; then
  small=tiny big=tiny rows=1,4 capacity=64 context_long=40
else
  small=smollm2-135m big=llama-3.2-1b rows=1,16,64 capacity=1024 context_long=512
fi
node --import tsx bench/synthetic-gguf.ts --shapes "$small,$big" --out .cache/gguf 2>&1 | tail -3

profile() { # shape builds cache seconds [context]
  local context=${5:-16} tag=$3
  [ "$context" != 16 ] && tag="$3-context$context"
  timeout "$(cap "$4")" node --import tsx bench/gpu-profile.ts --shape "$1" --builds "$2" --buffer-cache "$3" \
    --rows "$rows" --steps 8 --capacity "$capacity" --context "$context" --top 8 2>&1 | quiet > "$OUT/profile-$1-$tag.txt"
  grep "row(s)" "$OUT/profile-$1-$tag.txt"
}
engine() { # cache rows seconds
  timeout "$(cap "$3")" node --import tsx bench/gpu.ts --device webgpu --shapes "$small" --rows "$2" --steps 16 --runs 1 --skip-torch --skip-cpu \
    --buffer-cache "$1" 2>&1 | quiet > "$OUT/engine-$small-$1.txt"
  grep -A4 "engine ms/step" "$OUT/engine-$small-$1.txt"; grep "failed" "$OUT/engine-$small-$1.txt" | head -2
}
# The engine first: whether it runs on the device at all (it ran out of memory there before the past span).
engine bucket "$rows" 50
engine simple "$rows" 50
profile "$small" gqa,float16,explicit bucket 55
profile "$small" gqa,float16,explicit simple 55
# A longer context: the past span grows with it (16 positions read 64 of the pools, these 512).
profile "$small" gqa,float16 simple 35 "$context_long"
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 bucket 40
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 simple 40
echo "gpu-profile: done in ${SECONDS} s"
