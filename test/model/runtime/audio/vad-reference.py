"""Reference for vad.test.ts: Silero VAD's speech probabilities as the silero-vad package's ONNX
wrapper computes them (64 samples of context before each 512-sample window, the state carried over),
and faster-whisper's get_speech_timestamps over them.

Usage: vad-reference.py MODEL SAMPLES_F32 OUT_JSON
"""
import json
import sys

import numpy as np
import onnxruntime
import faster_whisper.vad as fv

model_path, samples_path, out = sys.argv[1:4]
audio = np.fromfile(samples_path, dtype=np.float32)
session = onnxruntime.InferenceSession(model_path, providers=["CPUExecutionProvider"])
padded = np.pad(audio, (0, 512 - audio.shape[0] % 512))
state = np.zeros((2, 1, 128), np.float32)
context = np.zeros((1, 64), np.float32)
probabilities = []
for i in range(0, len(padded), 512):
    x = np.concatenate([context, padded[None, i : i + 512]], 1)
    p, state = session.run(None, {"input": x, "state": state, "sr": np.array(16000, dtype=np.int64)})
    context = x[:, -64:]
    probabilities.append(float(p[0, 0]))


class Probabilities:
    def __call__(self, _audio):
        return np.array(probabilities, dtype=np.float32)


fv.get_vad_model = lambda: Probabilities()
with open(out, "w") as f:
    json.dump({"probabilities": probabilities, "chunks": fv.get_speech_timestamps(audio)}, f)
