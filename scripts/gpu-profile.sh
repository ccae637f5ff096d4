#!/usr/bin/env bash
# A second prepared command for a lent GPU machine, shorter than gpu-measure.sh (under 5 minutes):
# where a GPU step's time goes, the engine on the device, the KV pools written in place against written
# fresh each step, and the WebGPU provider's two storage buffer caches side by side. After
# `source .device/on-device.sh`, it writes the SmolLM2-135M and Llama-3.2-1B synthetic GGUFs, then
# leaves under $OUT: gpu-memory.csv (nvidia-smi's memory use each second),
# engine-<shape>-<cache>-<pools>.txt (bench gpu through the engine, the bare graph and the floor, no
# peers, first: whether the engine runs on the device), and
# profile-<shape>-<cache>-<pools>[-context<n>].txt (bench gpu-profile: wall, device and host time per
# step, per build and row count, the costliest operators; "bucket" is onnxruntime's default cache,
# "simple" keeps every released buffer; "inplace" pool writes are kiln's default, "fresh" the way
# before; at 16 cached positions in pools of 1024, once in pools of 4096, and once at 512 cached
# positions, where the step's past span covers 512 positions of the pools instead of 64), and, with
# the time left, attention-<shape>.txt (bench gpu-attention at 16 and 64 rows: the batched
# GroupQueryAttention against one batch-1 node per row).
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
  small=tiny big=tiny rows=1,4 capacity=64 context_long=40 capacity_large=256
else
  small=smollm2-135m big=llama-3.2-1b rows=1,16,64 capacity=1024 context_long=512 capacity_large=4096
fi
node --import tsx bench/synthetic-gguf.ts --shapes "$small,$big" --out .cache/gguf 2>&1 | tail -3

profile() { # shape builds cache pools seconds [context] [capacity]
  local context=${6:-16} positions=${7:-$capacity} tag=$3-$4
  [ "$context" != 16 ] && tag="$tag-context$context"
  [ "$positions" != "$capacity" ] && tag="$tag-capacity$positions"
  echo "== profile $1 $2 $tag"
  timeout "$(cap "$5")" node --import tsx bench/gpu-profile.ts --shape "$1" --builds "$2" --buffer-cache "$3" --pool-writes "$4" \
    --rows "$rows" --steps 8 --capacity "$positions" --context "$context" --top 8 2>&1 | quiet > "$OUT/profile-$1-$tag.txt"
  grep "row(s)" "$OUT/profile-$1-$tag.txt"
}
engine() { # cache pools seconds
  echo "== engine $small $1 $2"
  timeout "$(cap "$3")" node --import tsx bench/gpu.ts --device webgpu --shapes "$small" --rows "$rows" --steps 16 --runs 1 --skip-torch --skip-cpu \
    --buffer-cache "$1" --pool-writes "$2" 2>&1 | quiet > "$OUT/engine-$small-$1-$2.txt"
  grep -A4 "engine ms/step" "$OUT/engine-$small-$1-$2.txt"; grep "failed" "$OUT/engine-$small-$1-$2.txt" | head -2
}
# The engine first: whether it runs on the device now (with pools written fresh each step, it ran out of memory there).
engine bucket inplace 50
profile "$small" gqa,float16,explicit bucket inplace 50
profile "$small" gqa bucket fresh 25
# Pools four times larger: written in place, a step should cost the same (fresh, it copied them whole).
profile "$small" gqa bucket inplace 25 16 "$capacity_large"
profile "$small" gqa,float16 simple inplace 35
# A longer context: the past span grows with it (16 positions read 64 of the pools, these 512).
profile "$small" gqa,float16 bucket inplace 30 "$context_long"
[ "$(left)" -gt 30 ] && profile "$big" gqa,explicit+float16 bucket inplace 45
# Attention alone at 16 and 64 rows: the batched GroupQueryAttention against one batch-1 node per row.
if [ "$(left)" -gt 25 ]; then
  echo "== gpu-attention"
  timeout "$(cap 60)" node --import tsx bench/gpu-attention.ts --shape "$big" --rows "${rows#1,}" --capacity "$capacity" --past "$((capacity / 2))" \
    --steps 10 --repeats 2 2>&1 | quiet | tee "$OUT/attention-$big.txt"
fi
echo "gpu-profile: done in ${SECONDS} s"
