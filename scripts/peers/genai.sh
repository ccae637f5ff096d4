#!/usr/bin/env bash
# Builds the onnxruntime-genai peer for `npm run bench -- peers` and `npm run bench -- lm-eval`
# (not run by `npm test`): everything lands under .cache/peers/genai and each step is skipped when
# its output is already there, so running it again is cheap.
#   venv/   python with a CPU build of torch, transformers, accelerate, gguf, onnx,
#           onnxruntime-genai, numpy, lm-eval
#   hf/     float32 checkpoint + tokenizer dequantized from kiln's GGUF (the exact reference: no hub
#           is reachable, so the GGUF kiln serves is the only source of the weights)
#   int4/ int8/   onnxruntime-genai's own builder output for CPU from hf/
# Env: KILN_GGUF (default: the smollm2-135m-instruct GGUF under ~/.kiln/models), GENAI_THREADS
# (intra_op_num_threads written into genai_config.json, default 2), GENAI_MAX_LENGTH (default 1024).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

log() { printf 'peers/genai: %s\n' "$*"; }
root=.cache/peers/genai
venv=$root/venv
py=$venv/bin/python
gguf=${KILN_GGUF:-$HOME/.kiln/models/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf}
threads=${GENAI_THREADS:-2}
maxlen=${GENAI_MAX_LENGTH:-1024}
export PIP_NO_INPUT=1

if [[ ! -f $gguf ]]; then
  log "pulling smollm2-135m-instruct (no GGUF at $gguf)"
  node bin/kiln.mjs pull smollm2-135m-instruct </dev/null
fi

if [[ ! -x $py ]]; then
  log "python3 -m venv $venv"
  mkdir -p "$root"
  python3 -m venv "$venv" </dev/null
fi

if "$py" -c "import torch" >/dev/null 2>&1; then
  log "torch present ($("$py" -c 'import torch; print(torch.__version__)'))"
else
  # The default torch wheel carries CUDA libraries (several GB); a +cpu wheel is a fraction of
  # that. pip's configured find-links folders may hold one, so prefer it when they do.
  cpu_wheel=$(python3 -m pip config list 2>/dev/null | sed -n "s/.*find-links='\(.*\)'/\1/p" | tr ' ' '\n' \
    | while read -r d; do [[ -d $d ]] && ls "$d"/torch-*+cpu-cp3*-linux*_x86_64.whl "$d"/torch-*+cpu-cp3*-manylinux*_x86_64.whl 2>/dev/null; done \
    | grep "cp$("$py" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')-" | sort -V | tail -1 || true)
  if [[ -n $cpu_wheel ]]; then
    log "pip install $(basename "$cpu_wheel") (CPU-only torch)"
    "$py" -m pip install --quiet "$cpu_wheel" </dev/null
  else
    log "pip install torch (no CPU-only wheel offered: the default build, with its CUDA libraries)"
    "$py" -m pip install --quiet torch </dev/null
  fi
fi

if "$py" -c "import transformers, accelerate, gguf, onnx, onnxruntime, onnxruntime_genai, numpy, lm_eval" >/dev/null 2>&1; then
  log "python packages present (transformers, accelerate, gguf, onnx, onnxruntime-genai, numpy, lm-eval)"
else
  log "pip install transformers accelerate gguf onnx onnxruntime-genai numpy lm-eval"
  "$py" -m pip install --quiet transformers accelerate gguf onnx onnx-ir onnxruntime-genai onnxruntime numpy sentencepiece protobuf "lm-eval[api]" </dev/null
fi

if [[ -f $root/hf/config.json && -f $root/hf/tokenizer.json ]]; then
  log "float32 checkpoint present ($root/hf)"
else
  log "dequantizing $(basename "$gguf") into a float32 checkpoint ($root/hf)"
  "$py" - "$gguf" "$root/hf" <<'PY'
import os, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
gguf, out = sys.argv[1], sys.argv[2]
d, f = os.path.dirname(os.path.abspath(gguf)), os.path.basename(gguf)
model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
# Loading from a GGUF marks the model as quantized; the weights are already plain float32
# tensors, and a checkpoint saved with that mark makes later loaders expect GGUF again.
if getattr(model.config, "quantization_config", None) is not None:
    del model.config.quantization_config
for attr in ("hf_quantizer", "quantization_method"):
    if hasattr(model, attr):
        try: delattr(model, attr)
        except AttributeError: setattr(model, attr, None)
model.config.torch_dtype = torch.float32
model.save_pretrained(out, safe_serialization=True)
tok.save_pretrained(out)
PY
fi

for prec in int4 int8; do
  out=$root/$prec
  if [[ -f $out/genai_config.json && -f $out/model.onnx ]]; then
    log "onnxruntime-genai $prec model present ($out)"
  else
    log "onnxruntime-genai builder -p $prec -e cpu -> $out"
    rm -rf "$out" "$root/cache-$prec"
    "$py" -m onnxruntime_genai.models.builder -i "$root/hf" -o "$out" -p "$prec" -e cpu -c "$root/cache-$prec" </dev/null >"$root/build-$prec.log" 2>&1 \
      || { tail -20 "$root/build-$prec.log"; exit 1; }
    rm -rf "$root/cache-$prec"
  fi
  "$py" - "$out/genai_config.json" "$threads" "$maxlen" <<'PY'
import json, sys
path, threads, maxlen = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = json.load(open(path))
so = cfg["model"]["decoder"].setdefault("session_options", {})
so["intra_op_num_threads"] = threads
so["inter_op_num_threads"] = 1
cfg["search"]["max_length"] = maxlen
cfg["model"]["context_length"] = max(cfg["model"].get("context_length", maxlen), maxlen)
json.dump(cfg, open(path, "w"), indent=4)
PY
  log "$prec genai_config.json: intra_op_num_threads=$threads max_length=$maxlen"
done

log "done ($(du -sh "$venv" | cut -f1) venv, $(du -sh "$root/hf" | cut -f1) hf, $(du -sh "$root/int4" | cut -f1) int4, $(du -sh "$root/int8" | cut -f1) int8)"
