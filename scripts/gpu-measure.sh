#!/usr/bin/env bash
# The one prepared command for a lent GPU machine: run it there after `source .device/on-device.sh`
# (node, the packed node_modules and the NVIDIA Vulkan driver; see docs/benchmarks.md, "On a GPU").
# It writes the synthetic GGUFs of the three shapes there (the weights cannot travel), then runs
# `npm run bench -- gpu` within a total under 8 minutes, and leaves everything under $OUT:
#   nvidia-smi.txt, gguf.log, bench-gpu-attention.txt (decode attention alone at the Llama-3.2-1B
#   geometry: the target's pool against GroupQueryAttention, batched and one batch-1 node per row,
#   bench/gpu-attention.ts),
#   bench-gpu.txt / bench-gpu.json (SmolLM2-135M and Llama-3.2-1B shapes, every peer, the bare
#   step of the default GroupQueryAttention build, the explicit one and the float16 one), bench-gpu-8b.txt /
#   bench-gpu-8b.json (Llama-3.1-8B shape, with the time left).
#
#   source .device/on-device.sh && bash scripts/gpu-measure.sh
#
# QUICK=1 runs the same steps on the tiny shape only (`bench gpu --quick`): a smoke test of this script
# anywhere WebGPU runs, lavapipe included.
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
cd "$(dirname "$0")/.."
total=470 # seconds for everything, under 8 minutes
left() { echo $((total - SECONDS)); }

nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || echo "no nvidia-smi" > "$OUT/nvidia-smi.txt"
node --version >> "$OUT/nvidia-smi.txt" 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'cuda', torch.cuda.is_available())" >> "$OUT/nvidia-smi.txt" 2>&1

threads=$(nproc)
if [ "${QUICK:-0}" = 1 ]; then
  small=(--quick --bare explicit,float16) big=(--quick --skip-cpu) shapes=tiny
  attention=(--shape tiny --rows 1,4 --capacity 64 --past 20 --steps 5 --repeats 2)
else
  attention=(--shape llama-3.2-1b --rows 1,16,64 --capacity 1024 --past 512 --steps 20 --repeats 3)
  small=(--shapes smollm2-135m,llama-3.2-1b --rows 1,16,64 --steps 32 --runs 2 --budget-minutes 4 --bare explicit,float16)
  big=(--shapes llama-3.1-8b --rows 1,16,64 --steps 16 --runs 1 --skip-cpu)
  shapes=smollm2-135m,llama-3.2-1b,llama-3.1-8b
fi
node --import tsx bench/synthetic-gguf.ts --shapes "$shapes" --out .cache/gguf > "$OUT/gguf.log" 2>&1
cat "$OUT/gguf.log"

# Decode attention alone, four ways over the same device-resident cache: about a minute and a half at most.
timeout 100 node --import tsx bench/gpu-attention.ts "${attention[@]}" 2>&1 | grep -v "W:onnxruntime" | tee "$OUT/bench-gpu-attention.txt"

# The two small shapes with every peer: about 4-5 minutes. Shapes not started by 4 minutes are skipped.
timeout "$(( $(left) - 90 ))" node --import tsx bench/gpu.ts --device webgpu "${small[@]}" --threads "$threads" \
  --json "$OUT/bench-gpu.json" 2>&1 | grep -v "W:onnxruntime" | tee "$OUT/bench-gpu.txt"

# The 8B shape with what time is left: one run, no CPU engine (minutes a step at 64 rows on the CPU).
if [ "$(left)" -gt 60 ]; then
  timeout "$(( $(left) - 10 ))" node --import tsx bench/gpu.ts --device webgpu "${big[@]}" --threads "$threads" \
    --json "$OUT/bench-gpu-8b.json" 2>&1 | grep -v "W:onnxruntime" | tee "$OUT/bench-gpu-8b.txt"
else
  echo "llama-3.1-8b: not run, $(left) s left" | tee "$OUT/bench-gpu-8b.txt"
fi
echo "gpu-measure: done in ${SECONDS} s"
