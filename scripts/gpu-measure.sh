#!/usr/bin/env bash
# The one prepared command for a lent GPU machine: run it there after `source .device/on-device.sh`
# (node, the packed node_modules and the NVIDIA Vulkan driver; see docs/benchmarks.md, "On a GPU").
# It writes the synthetic GGUFs of the three shapes there (the weights cannot travel), then runs
# `npm run bench -- gpu` within a total under 8 minutes, and leaves everything under $OUT:
#   nvidia-smi.txt, gguf.log, bench-gpu.txt / bench-gpu.json (SmolLM2-135M and Llama-3.2-1B shapes,
#   every peer), bench-gpu-8b.txt / bench-gpu-8b.json (Llama-3.1-8B shape, with the time left).
#
#   source .device/on-device.sh && bash scripts/gpu-measure.sh
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
cd "$(dirname "$0")/.."
total=470 # seconds for everything, under 8 minutes
left() { echo $((total - SECONDS)); }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" > "$OUT/nvidia-smi.txt"
node --version >> "$OUT/nvidia-smi.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" >> "$OUT/nvidia-smi.txt" 2>&1

threads=$(nproc)
node --import tsx bench/synthetic-gguf.ts --shapes smollm2-135m,llama-3.2-1b,llama-3.1-8b --out .cache/gguf > "$OUT/gguf.log" 2>&1
cat "$OUT/gguf.log"

# The two small shapes with every peer: about 4-5 minutes. Shapes not started by 4 minutes are skipped.
timeout "$(( $(left) - 90 ))" node --import tsx bench/gpu.ts --device webgpu --shapes smollm2-135m,llama-3.2-1b --rows 1,16,64 --steps 32 \
  --runs 2 --threads "$threads" --budget-minutes 4 --json "$OUT/bench-gpu.json" 2>&1 | tee "$OUT/bench-gpu.txt"

# The 8B shape with what time is left: one run, no CPU engine (minutes a step at 64 rows on the CPU).
if [ "$(left)" -gt 60 ]; then
  timeout "$(( $(left) - 10 ))" node --import tsx bench/gpu.ts --device webgpu --shapes llama-3.1-8b --rows 1,16,64 --steps 16 \
    --runs 1 --threads "$threads" --skip-cpu --json "$OUT/bench-gpu-8b.json" 2>&1 | tee "$OUT/bench-gpu-8b.txt"
else
  echo "llama-3.1-8b: not run, $(left) s left" | tee "$OUT/bench-gpu-8b.txt"
fi
echo "gpu-measure: done in ${SECONDS} s"
