"""onnxruntime-genai as a peer of kiln: speed of its own int4 and int8 CPU builds, and the fidelity
of each against the exact float32 reference (the GGUF's weights dequantized, run in torch).

    .cache/peers/genai/venv/bin/python bench/peers/genai_bench.py [--threads 2] [--runs 3]
        [--builds int4,int8] [--steps 64] [--no-speed] [--no-fidelity] [--root .cache/peers/genai]

Built by scripts/peers/genai.sh. Prints progress on stderr and one JSON object on stdout.

Speed (per build, medians of --runs, build order alternating between runs, a fresh generator each):
- decode@128: 127 prompt tokens appended untimed, one untimed generate_next_token (it only samples
  the logits the append left), then --steps timed generate_next_token calls, each one forward pass
  of one token plus a greedy pick, at positions 127 .. 127+steps-1: the same forwards kiln's
  bench runs.
- prefill 512: one append_tokens of 512 tokens into an empty cache.
- batch 16: 16 sequences of the same 127 tokens, then the same --steps forwards for all 16 at once;
  tokens/s counts every sequence's tokens.
One untimed pass of the three workloads per build comes first (warm-up).
Each generator's max_length is the length it needs (genai preallocates the KV cache to it).

Fidelity: the held-out text (bench/peers/heldout.txt) tokenized by the checkpoint's tokenizer,
teacher forced: the reference is the float32 checkpoint in torch over the whole sequence; each
build appends the same tokens one at a time to genai's own generator and its logits are read after
each (its runtime exactly as it serves). Per position: top-1 agreement and KL(reference || build).
The reference's log-prob rows go to <root>/reference.bin (float32, [positions, vocab], row i is
the distribution of the token after token i) with <root>/reference.json (token ids, vocab,
positions), so other engines are scored on the same tokens (bench/peers/genai.ts kilnFidelity).
"""
import argparse, json, os, statistics, sys, time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

ap = argparse.ArgumentParser()
ap.add_argument("--root", default=os.path.join(REPO, ".cache", "peers", "genai"))
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--runs", type=int, default=3)
ap.add_argument("--steps", type=int, default=64)
ap.add_argument("--builds", default="int4,int8")
ap.add_argument("--heldout", default=os.path.join(HERE, "heldout.txt"))
ap.add_argument("--no-speed", action="store_true")
ap.add_argument("--no-fidelity", action="store_true")
args = ap.parse_args()
builds = [b for b in args.builds.split(",") if b]

import onnxruntime_genai as og  # noqa: E402
from transformers import AutoTokenizer  # noqa: E402


def log(s):
    print(s, file=sys.stderr, flush=True)


hf_dir = os.path.join(args.root, "hf")
tokenizer = AutoTokenizer.from_pretrained(hf_dir)
heldout_text = open(args.heldout, encoding="utf-8").read().strip()
heldout_ids = tokenizer(heldout_text, add_special_tokens=False)["input_ids"]

# Speed prompt: the held-out text repeated past 512 tokens (content does not change the cost).
prompt_ids = []
while len(prompt_ids) < 513:
    prompt_ids += heldout_ids
prompt_ids = prompt_ids[:513]

PREFILL = 512
CONTEXT = 128
BATCH = 16


def load(build):
    """genai model with intra_op_num_threads = --threads (overlaid on its genai_config.json)."""
    cfg = og.Config(os.path.join(args.root, build))
    cfg.clear_providers()  # CPU
    cfg.overlay(json.dumps({"model": {"decoder": {"session_options": {"intra_op_num_threads": args.threads, "inter_op_num_threads": 1}}}}))
    return og.Model(cfg)


def generator(model, max_length, batch=1):
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=max_length, batch_size=batch, do_sample=False)
    return og.Generator(model, params)


def decode_tps(model, batch):
    g = generator(model, CONTEXT + args.steps + 1, batch)
    g.append_tokens(np.array([prompt_ids[: CONTEXT - 1]] * batch, dtype=np.int32))
    g.generate_next_token()  # samples the appended prompt's logits; no forward pass
    t = time.perf_counter()
    for _ in range(args.steps):
        g.generate_next_token()
    dt = time.perf_counter() - t
    del g
    return batch * args.steps / dt


def prefill_tps(model):
    g = generator(model, PREFILL + 1)
    t = time.perf_counter()
    g.append_tokens(np.array([prompt_ids[:PREFILL]], dtype=np.int32))
    dt = time.perf_counter() - t
    del g
    return PREFILL / dt


def log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def compare(ref_lp, lp):
    """Top-1 agreement and mean KL(ref || other) over positions; rows are log-probs."""
    top1 = float((ref_lp.argmax(-1) == lp.argmax(-1)).mean())
    kl = (np.exp(ref_lp) * (ref_lp - lp)).sum(-1)
    return {"top1": top1, "kl_mean": float(kl.mean()), "kl_p99": float(np.quantile(kl, 0.99)), "positions": int(len(kl))}


out = {
    "engine": "onnxruntime-genai",
    "version": og.__version__ if hasattr(og, "__version__") else None,
    "threads": args.threads,
    "runs": args.runs,
    "steps": args.steps,
    "prompt_ids": prompt_ids,
    "builds": {},
    "loadavg": list(os.getloadavg()),
}
models = {}
for b in builds:
    t = time.perf_counter()
    models[b] = load(b)
    size = sum(os.path.getsize(os.path.join(args.root, b, f)) for f in os.listdir(os.path.join(args.root, b)) if f.startswith("model.onnx"))
    out["builds"][b] = {"load_s": time.perf_counter() - t, "model_bytes": size}

if not args.no_speed:
    # Warm-up, as kiln's side gets: onnxruntime's first run of each shape allocates and plans.
    for b in builds:
        prefill_tps(models[b])
        decode_tps(models[b], 1)
        decode_tps(models[b], BATCH)
    samples = {b: {"decode128": [], "prefill512": [], "batch16": []} for b in builds}
    for r in range(args.runs):
        order = builds if r % 2 == 0 else builds[::-1]
        for b in order:
            m = models[b]
            s = samples[b]
            s["prefill512"].append(prefill_tps(m))
            s["decode128"].append(decode_tps(m, 1))
            s["batch16"].append(decode_tps(m, BATCH))
            log(f"genai {b} run {r + 1}/{args.runs}: decode@128 {s['decode128'][-1]:.0f} tok/s, prefill 512 {s['prefill512'][-1]:.0f}, batch 16 {s['batch16'][-1]:.0f}")
    for b in builds:
        out["builds"][b]["speed"] = {k: statistics.median(v) for k, v in samples[b].items()}
        out["builds"][b]["samples"] = samples[b]

if not args.no_fidelity:
    import torch
    from transformers import AutoModelForCausalLM

    torch.set_num_threads(args.threads)
    ids = heldout_ids
    n = len(ids) - 1  # positions with a next token to predict
    log(f"reference: float32 checkpoint in torch over {len(ids)} held-out tokens ...")
    ref_model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    ref_model.eval()
    with torch.no_grad():
        logits = ref_model(torch.tensor([ids])).logits[0, :n].numpy()
    ref_lp = log_softmax(logits)
    vocab = ref_lp.shape[1]
    ref_lp.astype(np.float32).tofile(os.path.join(args.root, "reference.bin"))
    header = {
        "file": "reference.bin",
        "dtype": "float32",
        "layout": "[positions, vocab] natural-log probabilities; row i is the distribution of token i+1 given tokens 0..i",
        "token_ids": ids,
        "positions": n,
        "vocab": vocab,
        "source": "float32 checkpoint dequantized from the GGUF, transformers + torch",
        "heldout": os.path.relpath(args.heldout, REPO),
    }
    json.dump(header, open(os.path.join(args.root, "reference.json"), "w"))
    out["reference"] = {"positions": n, "vocab": vocab, "path": os.path.join(args.root, "reference.bin")}
    for b in builds:
        g = generator(models[b], len(ids) + 1)
        rows = np.empty((n, vocab), dtype=np.float32)
        for i in range(n):
            g.append_tokens(np.array([[ids[i]]], dtype=np.int32))
            lg = np.asarray(g.get_logits()).reshape(-1)
            rows[i] = lg[-vocab:]
        del g
        out["builds"][b]["fidelity"] = compare(ref_lp, log_softmax(rows))
        log(f"genai {b} fidelity: top-1 {out['builds'][b]['fidelity']['top1'] * 100:.1f}%, mean KL {out['builds'][b]['fidelity']['kl_mean']:.4f}")

out["loadavg_end"] = list(os.getloadavg())
print(json.dumps(out))
