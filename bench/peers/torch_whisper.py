#!/usr/bin/env python3
"""PyTorch's figures for `npm run bench -- gpu-speech`: transformers' Whisper on random weights of a shape.

    python3 bench/peers/torch_whisper.py '{"melBins":128,"width":1280,...,"rows":[5,20],"beams":5,"context":32,"steps":32,"runs":2}'

A WhisperForConditionalGeneration of the shape (float16, transformers' default attention, random
weights, on CUDA unless "device" says otherwise). The encoder on one 30 s window of features, then per
row count the decoder as beam search drives it: every row's `context` prompt tokens in one call, then
`steps` one-token calls with the cache, the beams' self-attention cache reordered each step (a cycle
within every transcription) and each row's 2 x beams likeliest tokens taken, medians of `runs` after a warm-up.
Prints one JSON line: {"encodeMs", "rows": {n: {"promptMs", "msPerStep"}}}.
"""

import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForSpeechSeq2Seq, WhisperConfig

spec = json.loads(sys.argv[1])
device = spec.get("device", "cuda")
dtype = torch.float16 if device == "cuda" else torch.float32
torch.manual_seed(0)

config = WhisperConfig(
    vocab_size=spec["vocab"],
    num_mel_bins=spec["melBins"],
    d_model=spec["width"],
    encoder_layers=spec["encoderLayers"],
    decoder_layers=spec["decoderLayers"],
    encoder_attention_heads=spec["heads"],
    decoder_attention_heads=spec["heads"],
    encoder_ffn_dim=spec["ffn"],
    decoder_ffn_dim=spec["ffn"],
    max_source_positions=1500,
    max_target_positions=448,
)
# Built on the device in its dtype: a 1.5B model initialized on the CPU in float32 would take minutes.
torch.set_default_device(device)
try:
    model = AutoModelForSpeechSeq2Seq.from_config(config, dtype=dtype)
except TypeError:
    model = AutoModelForSpeechSeq2Seq.from_config(config, torch_dtype=dtype)
# Some transformers versions take the dtype keyword without applying it.
model = model.to(device=device, dtype=dtype).eval()
beams, context, steps, runs = spec["beams"], spec["context"], spec["steps"], spec["runs"]
features = (torch.randn(1, spec["melBins"], 3000, device=device) * 0.5).to(dtype)


def sync():
    if device == "cuda":
        torch.cuda.synchronize()


def reorder(cache, order):
    """Moves the self-attention cache's rows (the cross-attention cache is the same window for every beam)."""
    own = getattr(cache, "self_attention_cache", cache)
    if hasattr(own, "reorder_cache"):
        own.reorder_cache(order)
        return cache
    # Older transformers: a tuple per layer of (self key, self value, cross key, cross value).
    return tuple(tuple(t.index_select(0, order) if i < 2 else t for i, t in enumerate(layer)) for layer in cache)


def timed(fn):
    sync()
    t0 = time.perf_counter()
    out = fn()
    sync()
    return out, (time.perf_counter() - t0) * 1000


with torch.inference_mode():
    encoder = model.model.encoder
    decoder = model.model.decoder
    encoder(features)  # warm-up
    encode_ms = statistics.median(timed(lambda: encoder(features))[1] for _ in range(runs))
    states = encoder(features).last_hidden_state
    result = {"encodeMs": encode_ms, "rows": {}}
    for n in spec["rows"]:
        hidden = states.expand(n, -1, -1).contiguous()
        prompt = torch.full((n, context), 65, dtype=torch.long, device=device)
        # Each transcription's beams rotate by one, as kiln's bench moves them.
        order = torch.tensor([r - r % beams + (r + 1) % beams for r in range(n)], device=device)

        def run_once():
            def prompt_call():
                out = decoder(input_ids=prompt, encoder_hidden_states=hidden, use_cache=True)
                logits = model.proj_out(out.last_hidden_state[:, -1])
                return out.past_key_values, logits.topk(2 * beams, dim=-1).indices

            (cache, top), prompt_ms = timed(prompt_call)

            def step_calls():
                nonlocal cache, top
                for _ in range(steps):
                    cache = reorder(cache, order)
                    ids = top[order, :1]
                    out = decoder(input_ids=ids, encoder_hidden_states=hidden, past_key_values=cache, use_cache=True)
                    cache = out.past_key_values
                    top = model.proj_out(out.last_hidden_state[:, -1]).topk(2 * beams, dim=-1).indices

            _, steps_ms = timed(step_calls)
            return prompt_ms, steps_ms / steps

        run_once()  # warm-up at this row count
        measured = [run_once() for _ in range(runs)]
        result["rows"][n] = {"promptMs": statistics.median(m[0] for m in measured), "msPerStep": statistics.median(m[1] for m in measured)}
    print(json.dumps(result))
