"""The reference kiln's speech tests compare with: faster-whisper (CTranslate2) on the CPU.

Modes (one JSON document on stdout):
  transcribe --model DIR [--compute-type float32|int8] [--threads N] [--beam-size N] [--seed N]
             [--word-timestamps] FILE...
      -> {"results": [{"file", "text", "segments": [{"start", "end", "text", "words"?}],
                        "duration", "seconds"}], "load_seconds"}
      Greedy by default (beam 1), language "en", no VAD; the rest (conditioning on previous
      text, temperature fallback) as faster-whisper defaults.
  mel --bins N --out RAW FILE
      -> {"bins", "frames", "samples"}; writes FeatureExtractor's log-mel of FILE (decoded with
      faster-whisper's own decode_audio, or read raw float32 with --f32) as float32 [bins, frames]
      row-major into RAW, and with --samples-out the samples it used.
"""

import argparse
import json
import sys
import time

import numpy as np


def transcribe(args):
    import ctranslate2
    from faster_whisper import WhisperModel

    started = time.perf_counter()
    model = WhisperModel(args.model, device="cpu", compute_type=args.compute_type, cpu_threads=args.threads)
    load_seconds = time.perf_counter() - started
    results = []
    for path in args.files:
        # CTranslate2 seeds its sampling (the temperature fallback) at random unless told: a fixed
        # seed per file makes the reference the same on every run and in any file order.
        ctranslate2.set_random_seed(args.seed)
        started = time.perf_counter()
        segments, info = model.transcribe(
            path,
            language="en",
            beam_size=args.beam_size,
            vad_filter=False,
            word_timestamps=args.word_timestamps,
            condition_on_previous_text=args.condition_on_previous_text,
            initial_prompt=args.initial_prompt,
            hotwords=args.hotwords,
        )
        out = []
        for s in segments:  # the generator does the work: consume it inside the timing
            seg = {"start": s.start, "end": s.end, "text": s.text}
            if args.word_timestamps and s.words:
                seg["words"] = [{"start": w.start, "end": w.end, "word": w.word, "probability": w.probability} for w in s.words]
            out.append(seg)
        seconds = time.perf_counter() - started
        results.append({
            "file": path,
            "text": "".join(seg["text"] for seg in out).strip(),
            "segments": out,
            "duration": info.duration,
            "seconds": seconds,
        })
    json.dump({"results": results, "load_seconds": load_seconds}, sys.stdout)


def mel(args):
    from faster_whisper.audio import decode_audio
    from faster_whisper.feature_extractor import FeatureExtractor

    if args.f32:
        samples = np.fromfile(args.file, dtype="<f4")
    else:
        samples = decode_audio(args.file, sampling_rate=16000)
    features = FeatureExtractor(feature_size=args.bins)(samples)
    np.ascontiguousarray(features, dtype="<f4").tofile(args.out)
    if args.samples_out:
        np.ascontiguousarray(samples, dtype="<f4").tofile(args.samples_out)
    json.dump({"bins": int(features.shape[0]), "frames": int(features.shape[1]), "samples": int(samples.shape[0])}, sys.stdout)


def main():
    parser = argparse.ArgumentParser()
    modes = parser.add_subparsers(dest="mode", required=True)
    t = modes.add_parser("transcribe")
    t.add_argument("--model", required=True)
    t.add_argument("--compute-type", default="float32")
    t.add_argument("--threads", type=int, default=0)
    t.add_argument("--beam-size", type=int, default=1)
    t.add_argument("--seed", type=int, default=1, help="CTranslate2's random seed, set before each file")
    t.add_argument("--word-timestamps", action="store_true")
    t.add_argument("--no-condition-on-previous-text", dest="condition_on_previous_text", action="store_false")
    t.add_argument("--initial-prompt")
    t.add_argument("--hotwords")
    t.add_argument("files", nargs="+")
    m = modes.add_parser("mel")
    m.add_argument("--bins", type=int, default=80)
    m.add_argument("--out", required=True)
    m.add_argument("--samples-out")
    m.add_argument("--f32", action="store_true", help="FILE is raw little-endian float32 16 kHz samples")
    m.add_argument("file")
    args = parser.parse_args()
    transcribe(args) if args.mode == "transcribe" else mel(args)


if __name__ == "__main__":
    main()
