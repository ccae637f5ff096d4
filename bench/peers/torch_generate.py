#!/usr/bin/env python3
"""PyTorch's figures for `npm run bench -- gpu`: transformers `generate` on random weights of a shape.

    python3 bench/peers/torch_generate.py '{"layers":16,"hidden":2048,...,"rows":[1,16,64],"steps":32,"prompt":512,"runs":3}'

A LlamaForCausalLM of the shape (bf16, eager attention, random weights, on CUDA): TTFT of one
`prompt`-token prompt (generate with one new token), then per batch size the decode rate: `steps`
new tokens after a 16-token prompt, greedy, end of sequence ignored, minus that batch's own
one-token time, medians of `runs`. Prints one JSON line: {"ttftMs", "rows": {n: {"msPerStep", "tokensPerSecond"}}}.
"""

import json
import statistics
import sys
import time

import torch
from transformers import AutoModelForCausalLM, LlamaConfig

CONTEXT = 16


def build(spec: dict):
    config = LlamaConfig(
        vocab_size=spec["vocab"],
        hidden_size=spec["hidden"],
        intermediate_size=spec["ffn"],
        num_hidden_layers=spec["layers"],
        num_attention_heads=spec["heads"],
        num_key_value_heads=spec["kvHeads"],
        max_position_embeddings=spec["contextLength"],
        rope_theta=spec["ropeTheta"],
        tie_word_embeddings=spec["tied"],
    )
    torch.set_default_device("cuda")
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16, attn_implementation="eager")
    except TypeError:
        model = AutoModelForCausalLM.from_config(config, torch_dtype=torch.bfloat16, attn_implementation="eager")
    return model.to("cuda").eval()


def timed_generate(model, ids, new_tokens: int) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.no_grad():
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                       do_sample=False, pad_token_id=0)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    spec = json.loads(sys.argv[1])
    model = build(spec)
    vocab = spec["vocab"]
    steps, runs = spec["steps"], spec["runs"]
    gen = torch.Generator(device="cuda").manual_seed(1)
    rand = lambda rows, length: torch.randint(256, vocab, (rows, length), generator=gen, device="cuda")
    timed_generate(model, rand(1, CONTEXT), 2)  # warm-up
    ttft = statistics.median(timed_generate(model, rand(1, spec["prompt"]), 1) for _ in range(runs)) * 1000
    rows = {}
    for n in spec["rows"]:
        samples = []
        for _ in range(runs):
            ids = rand(n, CONTEXT)
            first = timed_generate(model, ids, 1)
            total = timed_generate(model, ids, steps + 1)
            samples.append((total - first) / steps)
        per_step = statistics.median(samples)
        rows[n] = {"msPerStep": per_step * 1000, "tokensPerSecond": n / per_step}
    print(json.dumps({"ttftMs": ttft, "rows": rows}))


if __name__ == "__main__":
    main()
