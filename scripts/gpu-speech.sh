#!/usr/bin/env bash
# A third prepared command for a lent GPU machine (under 6 minutes): Whisper on the device. After
# `source .device/on-device.sh`, it writes synthetic CTranslate2 Whispers of the large-v3-turbo and
# large-v3 shapes there (bench/synthetic-whisper.ts; the weights cannot travel), compiles each for
# the GPU and the CPU, and runs `npm run bench -- gpu-speech`: encode a 30 s window, then decoder steps
# at beam 5 for 1 and 4 transcriptions, beside PyTorch (where the machine has it) and the CPU engine on
# its cores. It leaves under $OUT: gpu-memory.csv (nvidia-smi's memory use each second),
# whisper.log (writing the folders), bench-gpu-speech.txt and bench-gpu-speech.json.
#
#   source .device/on-device.sh && bash scripts/gpu-speech.sh
#
# QUICK=1 runs the same steps on the tiny shape (a smoke test anywhere WebGPU runs, lavapipe included).
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
cd "$(dirname "$0")/.."
total=${TOTAL_SECONDS:-340}
left() { echo $((total - SECONDS)); }
nvidia-smi --query-gpu=timestamp,memory.used,memory.total,utilization.gpu --format=csv -l 1 > "$OUT/gpu-memory.csv" 2>/dev/null &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
quiet() { grep -v "W:onnxruntime\|^Warning: max"; }

if [ "${QUICK:-0}" = 1 ]; then
  shapes=tiny bench=(--quick)
else
  shapes=large-v3-turbo,large-v3 bench=(--rows 5,20 --context 32 --steps 32 --runs 2)
fi
node --import tsx bench/synthetic-whisper.ts --shapes "$shapes" --out .cache/whisper > "$OUT/whisper.log" 2>&1
cat "$OUT/whisper.log"
# A shape not started by two thirds of the time is skipped; each one is reported as it ends.
timeout "$(( $(left) - 5 ))" node --import tsx bench/gpu-speech.ts --device webgpu --shapes "$shapes" "${bench[@]}" \
  --threads "$(nproc)" --budget-minutes "$(( $(left) * 2 / 3 / 60 ))" --json "$OUT/bench-gpu-speech.json" 2>&1 | quiet | tee "$OUT/bench-gpu-speech.txt"
echo "gpu-speech: done in ${SECONDS} s"
