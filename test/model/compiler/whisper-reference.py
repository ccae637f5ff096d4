"""Reference for whisper-graph.test.ts: faster-whisper's log-mel features and CTranslate2's own greedy decode.

Usage: whisper-reference.py WAV MODEL_DIR OUT_JSON PROMPT_IDS(comma-separated) MAX_LENGTH
Writes OUT_JSON (tokens, per-step logits, score, float32 encode time) and OUT_JSON.mel.f32 ([1, mels, 3000]).
"""
import json
import sys
import time

import ctranslate2
import numpy as np
from faster_whisper.audio import decode_audio
from faster_whisper.feature_extractor import FeatureExtractor

wav, model_dir, out, prompt, max_length = sys.argv[1:6]
prompt_ids = [int(t) for t in prompt.split(",")]

model = ctranslate2.models.Whisper(model_dir, device="cpu", compute_type="float32", intra_threads=2)
features = FeatureExtractor(feature_size=model.n_mels)(decode_audio(wav, sampling_rate=16000))[:, :3000]
features = np.pad(features, ((0, 0), (0, 3000 - features.shape[1])))
features = np.ascontiguousarray(features[None].astype(np.float32))
view = ctranslate2.StorageView.from_array(features)

model.encode(view)  # warm-up
started = time.perf_counter()
model.encode(view)
encode_ms = (time.perf_counter() - started) * 1000

# Plain greedy argmax: no suppression, so the compiled graph's own argmax must agree.
result = model.generate(
    view, [prompt_ids], beam_size=1, return_scores=True, return_logits_vocab=True,
    suppress_blank=False, suppress_tokens=[], max_length=int(max_length),
)[0]
features.tofile(out + ".mel.f32")
logits = [np.asarray(step, dtype=np.float32).reshape(-1).tolist() for step in result.logits[0]] if result.logits else []
with open(out, "w") as f:
    json.dump({"tokens": result.sequences_ids[0], "score": result.scores[0], "encodeMs": encode_ms, "logits": logits}, f)
