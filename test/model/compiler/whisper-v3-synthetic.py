"""Synthetic Whisper large-v3 for whisper-v3-shape.test.ts: large-v3's layout (128 mel bins, the
multilingual vocabulary of 51,866 ids with 100 languages and the shifted special tokens) with few,
narrow layers of seeded random weights, written as a CTranslate2 folder; then CTranslate2's own
numerics on it as the reference.

Usage: whisper-v3-synthetic.py TINY_EN_DIR OUT_DIR WAV OUT_JSON STEPS [WIDTH,HEADS,FFN,ENCODER_LAYERS,DECODER_LAYERS]
TINY_EN_DIR lends its byte-level BPE (regular tokens) and the spec's scalar attributes. Writes OUT_DIR
(model.bin, config.json, tokenizer.json, vocabulary.txt), OUT_JSON (language probabilities after
<|startoftranscript|>, and for the transcribe and translate prompts CTranslate2's greedy tokens and
logits per step) and OUT_JSON.mel.f32 ([1, 128, 3000], faster-whisper's FeatureExtractor).
"""
import json
import os
import struct
import sys

import ctranslate2
import numpy as np
from faster_whisper.audio import decode_audio
from faster_whisper.feature_extractor import FeatureExtractor

tiny_dir, out_dir, wav, out_json, steps = sys.argv[1:6]
steps = int(steps)

MELS = 128
# Narrow by default; large-v3's own width is 1280,20,5120 (32 layers each).
WIDTH, HEADS, FFN, ENC_LAYERS, DEC_LAYERS = (int(x) for x in (sys.argv[6] if len(sys.argv) > 6 else "128,2,512,2,2").split(","))
AUDIO_CTX, TEXT_CTX = 1500, 448
# whisper/tokenizer.py's LANGUAGES order: large-v3 adds Cantonese last.
LANGUAGES = (
    "en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi ml cy sk te "
    "fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo ht ps "
    "tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue"
).split()
assert len(LANGUAGES) == 100
REGULAR = 50257
SPECIALS = (
    ["<|endoftext|>", "<|startoftranscript|>"]
    + [f"<|{l}|>" for l in LANGUAGES]
    + ["<|translate|>", "<|transcribe|>", "<|startoflm|>", "<|startofprev|>", "<|nospeech|>", "<|notimestamps|>"]
    + [f"<|{i * 0.02:.2f}|>" for i in range(1501)]
)
VOCAB = REGULAR + len(SPECIALS)
assert VOCAB == 51866
ID = {t: REGULAR + i for i, t in enumerate(SPECIALS)}


def read_ct2_scalars(path):
    """The scalar attributes of a CTranslate2 model.bin (version 6), as raw (dtype id, bytes)."""
    with open(path, "rb") as f:
        data = f.read()
    pos = 0

    def u32():
        nonlocal pos
        (v,) = struct.unpack_from("<I", data, pos)
        pos += 4
        return v

    def string():
        nonlocal pos
        (n,) = struct.unpack_from("<H", data, pos)
        s = data[pos + 2 : pos + 2 + n - 1].decode()
        pos += 2 + n
        return s

    assert u32() == 6
    string()
    u32()
    scalars = {}
    for _ in range(u32()):
        name = string()
        rank = data[pos]
        pos += 1
        dims = [u32() for _ in range(rank)]
        dtype = data[pos]
        pos += 1
        size = u32()
        if rank == 0:
            scalars[name] = (dtype, data[pos : pos + size])
        pos += size
    return scalars


def ct2_string(s):
    b = s.encode()
    return struct.pack("<H", len(b) + 1) + b + b"\0"


def variables(rng):
    """Every weight of the spec, float32, seeded; large enough that logits spread out."""
    def w(*shape, scale=None):
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    def norm(prefix, out):
        out[f"{prefix}/gamma"] = (1 + 0.1 * rng.standard_normal(WIDTH)).astype(np.float32)
        out[f"{prefix}/beta"] = w(WIDTH, scale=0.05)

    def linear(prefix, n_out, n_in, out):
        out[f"{prefix}/weight"] = w(n_out, n_in)
        out[f"{prefix}/bias"] = w(n_out, scale=0.05)

    v = {}
    v["encoder/conv1/weight"] = w(WIDTH, MELS, 3, scale=1 / np.sqrt(MELS * 3))
    v["encoder/conv1/bias"] = w(WIDTH, scale=0.05)
    v["encoder/conv2/weight"] = w(WIDTH, WIDTH, 3, scale=1 / np.sqrt(WIDTH * 3))
    v["encoder/conv2/bias"] = w(WIDTH, scale=0.05)
    v["encoder/position_encodings/encodings"] = w(AUDIO_CTX, WIDTH, scale=0.5)
    for l in range(ENC_LAYERS):
        p = f"encoder/layer_{l}"
        norm(f"{p}/self_attention/layer_norm", v)
        linear(f"{p}/self_attention/linear_0", 3 * WIDTH, WIDTH, v)
        linear(f"{p}/self_attention/linear_1", WIDTH, WIDTH, v)
        norm(f"{p}/ffn/layer_norm", v)
        linear(f"{p}/ffn/linear_0", FFN, WIDTH, v)
        linear(f"{p}/ffn/linear_1", WIDTH, FFN, v)
    norm("encoder/layer_norm", v)
    v["decoder/embeddings/weight"] = w(VOCAB, WIDTH, scale=1.0)
    v["decoder/position_encodings/encodings"] = w(TEXT_CTX, WIDTH, scale=0.5)
    for l in range(DEC_LAYERS):
        p = f"decoder/layer_{l}"
        norm(f"{p}/self_attention/layer_norm", v)
        linear(f"{p}/self_attention/linear_0", 3 * WIDTH, WIDTH, v)
        linear(f"{p}/self_attention/linear_1", WIDTH, WIDTH, v)
        norm(f"{p}/attention/layer_norm", v)
        linear(f"{p}/attention/linear_0", WIDTH, WIDTH, v)
        linear(f"{p}/attention/linear_1", 2 * WIDTH, WIDTH, v)
        linear(f"{p}/attention/linear_2", WIDTH, WIDTH, v)
        norm(f"{p}/ffn/layer_norm", v)
        linear(f"{p}/ffn/linear_0", FFN, WIDTH, v)
        linear(f"{p}/ffn/linear_1", WIDTH, FFN, v)
    norm("decoder/layer_norm", v)
    return v


def write_model_bin(path, weights, scalars):
    entries = []
    for name, array in sorted(weights.items()):
        entries.append(ct2_string(name) + bytes([array.ndim]) + b"".join(struct.pack("<I", d) for d in array.shape)
                       + bytes([0]) + struct.pack("<I", array.nbytes) + array.tobytes())
    for name, (dtype, raw) in sorted(scalars.items()):
        if name.endswith("num_heads"):
            raw = struct.pack("<h", HEADS)
        entries.append(ct2_string(name) + bytes([0]) + bytes([dtype]) + struct.pack("<I", len(raw)) + raw)
    with open(path, "wb") as f:
        f.write(struct.pack("<I", 6) + ct2_string("WhisperSpec") + struct.pack("<I", 3) + struct.pack("<I", len(entries)))
        for e in entries:
            f.write(e)
        f.write(struct.pack("<I", 1) + ct2_string("decoder/projection/weight") + ct2_string("decoder/embeddings/weight"))


def write_tokenizer(tiny, out):
    with open(os.path.join(tiny, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = {t: i for t, i in tok["model"]["vocab"].items() if i < REGULAR - 1}
    # The multilingual vocabulary has one regular token more than GPT-2's before its specials: the
    # empty string, by which CTranslate2 tells a multilingual vocabulary.
    vocab[""] = REGULAR - 1
    tok["model"]["vocab"] = vocab
    tok["added_tokens"] = [
        {"id": ID[t], "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False, "special": True}
        for t in SPECIALS
    ]
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    tokens = [""] * VOCAB
    for t, i in vocab.items():
        tokens[i] = t
    for t in SPECIALS:
        tokens[ID[t]] = t
    with open(os.path.join(out, "vocabulary.txt"), "w") as f:
        f.write("\n".join(tokens) + "\n")


os.makedirs(out_dir, exist_ok=True)
write_model_bin(os.path.join(out_dir, "model.bin"), variables(np.random.default_rng(3)), read_ct2_scalars(os.path.join(tiny_dir, "model.bin")))
write_tokenizer(tiny_dir, out_dir)
with open(os.path.join(out_dir, "config.json"), "w") as f:
    json.dump({
        "alignment_heads": [[DEC_LAYERS - 1, 0], [DEC_LAYERS - 1, 1]],
        "lang_ids": [ID[f"<|{l}|>"] for l in LANGUAGES],
        "suppress_ids": [1, 2, 7, 8, 9, 10, 14, 25, 26, 27, 28, 29, 31, 58, 59, 60, 61, 62, 63, 90, 91, 92, 93, 359, 503, 522, 542, 873, 893, 902, 918, 922, 931, 1350, 1853, 1982, 2460, 2627],
        "suppress_ids_begin": [220, ID["<|endoftext|>"]],
    }, f)

model = ctranslate2.models.Whisper(out_dir, device="cpu", compute_type="float32", intra_threads=2)
assert model.n_mels == MELS
features = FeatureExtractor(feature_size=MELS)(decode_audio(wav, sampling_rate=16000))[:, :3000]
features = np.pad(features, ((0, 0), (0, 3000 - features.shape[1])))
features = np.ascontiguousarray(features[None].astype(np.float32))
features.tofile(out_json + ".mel.f32")
view = ctranslate2.StorageView.from_array(features)

languages = model.detect_language(view)[0]
result = {"languages": [[t, p] for t, p in languages], "prompts": {}}
detected = languages[0][0]
for task in ("transcribe", "translate"):
    prompt = [ID["<|startoftranscript|>"], ID[detected], ID[f"<|{task}|>"], ID["<|notimestamps|>"]]
    r = model.generate(view, [prompt], beam_size=1, return_scores=True, return_logits_vocab=True,
                       suppress_blank=False, suppress_tokens=[], max_length=len(prompt) + steps)[0]
    logits = [np.asarray(step, dtype=np.float32).reshape(-1).tolist() for step in r.logits[0]]
    result["prompts"][task] = {"prompt": prompt, "tokens": r.sequences_ids[0], "logits": logits}
with open(out_json, "w") as f:
    json.dump(result, f)
