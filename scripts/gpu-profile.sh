#!/usr/bin/env bash
# A second prepared command for a lent GPU machine, shorter than gpu-measure.sh (under 4.5 minutes):
# where a GPU step's time goes, and the engine checked on the device. After
# `source .device/on-device.sh`, it writes the SmolLM2-135M and Llama-3.2-1B synthetic GGUFs, then
# leaves under $OUT: gpu-memory.csv (nvidia-smi's memory use each second), engine-smollm2.txt (bench
# gpu through the engine, bare and floor, no peers), profile-smollm2.txt and profile-1b.txt (bench
# gpu-profile: wall, device and host time per step, per build and row count, the costliest
# operators), and engine-1b.txt with the time left.
#
#   source .device/on-device.sh && bash scripts/gpu-profile.sh
#
# QUICK=1 runs the same steps on the tiny shape (a smoke test anywhere WebGPU runs, lavapipe included).
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
cd "$(dirname "$0")/.."
total=${TOTAL_SECONDS:-250}
left() { echo $((total - SECONDS)); }
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 1 > "$OUT/gpu-memory.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
quiet() { grep -v "W:onnxruntime\|^Warning: max"; }

if [ "${QUICK:-0}" = 1 ]; then
  small=tiny big=tiny rows=1,4 capacity=64
else
  small=smollm2-135m big=llama-3.2-1b rows=1,16,64 capacity=1024
fi
node --import tsx bench/synthetic-gguf.ts --shapes "$small,$big" --out .cache/gguf 2>&1 | tail -3

timeout 70 node --import tsx bench/gpu.ts --device webgpu --shapes "$small" --rows "$rows" --steps 16 --runs 1 --skip-torch --skip-cpu \
  2>&1 | quiet > "$OUT/engine-smollm2.txt"
tail -12 "$OUT/engine-smollm2.txt"
timeout "$(( $(left) > 100 ? 100 : $(left) ))" node --import tsx bench/gpu-profile.ts --shape "$small" --builds gqa,explicit,float16,explicit+float16 \
  --rows "$rows" --steps 8 --capacity "$capacity" --top 10 2>&1 | quiet | tee "$OUT/profile-smollm2.txt"
if [ "$(left)" -gt 20 ]; then
  timeout "$(( $(left) - 10 ))" node --import tsx bench/gpu-profile.ts --shape "$big" --builds gqa,explicit+float16 \
    --rows "$rows" --steps 8 --capacity "$capacity" --top 10 2>&1 | quiet | tee "$OUT/profile-1b.txt"
fi
if [ "$(left)" -gt 25 ]; then
  timeout "$(( $(left) - 5 ))" node --import tsx bench/gpu.ts --device webgpu --shapes "$big" --rows "$rows" --steps 16 --runs 1 --skip-torch --skip-cpu \
    2>&1 | quiet > "$OUT/engine-1b.txt"
  tail -12 "$OUT/engine-1b.txt"
fi
echo "gpu-profile: done in ${SECONDS} s"
