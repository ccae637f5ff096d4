/**
 * kiln's compiled Whisper tiny.en (two ONNX graphs) against CTranslate2 on the same model.bin.
 *
 * Both sides get the same log-mel features (faster-whisper's FeatureExtractor, computed in Python) of a
 * short espeak-ng utterance. The graphs are run with onnxruntime-node directly (no kiln runtime), with
 * the decoder's KV cache grown step by step as the runtime does; CTranslate2 decodes greedily without
 * token suppression, so both must pick the plain argmax at every step.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pullModel } from "../../../src/catalogue/pull/index.js";
import type { CompileResult } from "../../../src/compiler/compile.js";
import { provisionArtifact } from "../../../src/provision/index.js";
import { presentEntry, readSpeechManifest, SPEECH_FILES, SPEECH_GRAPH, type SpeechArtifactManifest } from "../../../src/runtime/artifact/index.js";
import { alwaysSuppressed, filterByWhisperRules, forceTimestamps, maskByWhisperRules } from "../../../src/runtime/speech/whisper-rules.js";
import type { WhisperSampling } from "../../../src/runtime/speech-worker/protocol.js";
import { ruleFeeds } from "../../support/whisper-feeds.js";

const SLUG = "whisper-tiny-en";
const PYTHON = process.env.KILN_TEST_PYTHON ?? resolve(".cache/pyclient/bin/python");
const MAX_LENGTH = 48;
const D = SPEECH_GRAPH.decoder;

interface Reference {
  tokens: number[];
  score: number;
  encodeMs: number;
  logits: number[][];
}

interface Kv {
  /** [1, heads, headDim, past] */
  keyT: Float32Array;
  /** [1, heads, past, headDim] */
  value: Float32Array;
}

const argmax = (a: Float32Array) => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
};

/** Appends new keys [1, H, S, Dh] to transposed cached keys [1, H, Dh, P] -> [1, H, Dh, P+S]. */
function appendKeysT(pastT: Float32Array, fresh: Float32Array, heads: number, headDim: number, past: number, seq: number): Float32Array {
  const total = past + seq;
  const out = new Float32Array(heads * headDim * total);
  for (let h = 0; h < heads; h++)
    for (let d = 0; d < headDim; d++) {
      const row = (h * headDim + d) * total;
      out.set(pastT.subarray((h * headDim + d) * past, (h * headDim + d + 1) * past), row);
      for (let s = 0; s < seq; s++) out[row + past + s] = fresh[(h * seq + s) * headDim + d];
    }
  return out;
}

/** Appends new values [1, H, S, Dh] to cached values [1, H, P, Dh]. */
function appendValues(past: Float32Array, fresh: Float32Array, heads: number, headDim: number, pastLen: number, seq: number): Float32Array {
  const out = new Float32Array(heads * (pastLen + seq) * headDim);
  for (let h = 0; h < heads; h++) {
    out.set(past.subarray(h * pastLen * headDim, (h + 1) * pastLen * headDim), h * (pastLen + seq) * headDim);
    out.set(fresh.subarray(h * seq * headDim, (h + 1) * seq * headDim), (h * (pastLen + seq) + pastLen) * headDim);
  }
  return out;
}

function causalMask(seq: number): Float32Array {
  const m = new Float32Array(seq * seq);
  for (let i = 0; i < seq; i++) for (let j = i + 1; j < seq; j++) m[i * seq + j] = -Infinity;
  return m;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

describe("compiled Whisper tiny.en against CTranslate2", () => {
  let work: string;
  let artifact: CompileResult;
  let manifest: SpeechArtifactManifest;
  let reference: Reference;
  let mel: Float32Array;
  const options: ort.InferenceSession.SessionOptions = { intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: "all" };

  beforeAll(async () => {
    if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run scripts/setup.sh (it installs faster-whisper for this test)`);
    work = mkdtempSync(join(tmpdir(), "kiln-whisper-"));
    artifact = await provisionArtifact(SLUG);
    manifest = readSpeechManifest(artifact.dir);
    const pulled = await pullModel(SLUG);
    const wav = join(work, "speech.wav");
    // espeak-ng writes 22.05 kHz; faster-whisper's decode_audio resamples to 16 kHz itself.
    execFileSync("espeak-ng", ["-w", wav, "The quick brown fox jumps over the lazy dog. Kiln compiles whisper into two graphs."]);
    const prompt = [manifest.tokens.startOfTranscript, manifest.tokens.noTimestamps].join(",");
    execFileSync(PYTHON, [resolve("test/model/compiler/whisper-reference.py"), wav, pulled.dir, join(work, "ref.json"), prompt, String(MAX_LENGTH)], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    reference = JSON.parse(readFileSync(join(work, "ref.json"), "utf8")) as Reference;
    const bytes = readFileSync(join(work, "ref.json.mel.f32"));
    mel = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
  });
  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("records the tiny.en token ids and shape", () => {
    expect(manifest.tokens.startOfTranscript).toBe(50257);
    expect(manifest.tokens.noTimestamps).toBe(50362);
    expect(manifest.tokens.endOfText).toBe(50256);
    expect(manifest.tokens.timestampBegin).toBe(50363);
    expect(manifest.tokens.languages).toEqual({});
    expect(manifest.speech).toMatchObject({ melBins: 80, audioContext: 1500, width: 384, heads: 6, encoderLayers: 4, decoderLayers: 4, vocab: 51864 });
    expect(manifest.stopTokenIds).toEqual([50256]);
  });

  it("decodes greedily to CTranslate2's tokens with close logits", async () => {
    const s = manifest.speech;
    const encoder = await ort.InferenceSession.create(join(artifact.dir, SPEECH_FILES.encoder), options);
    const decoder = await ort.InferenceSession.create(join(artifact.dir, SPEECH_FILES.decoder), options);
    const melTensor = new ort.Tensor("float32", mel, [1, s.melBins, 3000]);
    await encoder.run({ [SPEECH_GRAPH.encoder.mel]: melTensor }); // warm-up
    let started = performance.now();
    const cross = await encoder.run({ [SPEECH_GRAPH.encoder.mel]: melTensor });
    const encodeMs = performance.now() - started;

    const kv: Kv[] = Array.from({ length: s.decoderLayers }, () => ({ keyT: new Float32Array(0), value: new Float32Array(0) }));
    const prompt = [manifest.tokens.startOfTranscript, manifest.tokens.noTimestamps];
    const generated: number[] = [];
    let pending = prompt;
    let past = 0;
    let maxLogitDiff = 0;
    const stepMs: number[] = [];
    let firstAlignment: ort.Tensor | null = null;
    while (prompt.length + generated.length < MAX_LENGTH) {
      const seq = pending.length;
      const feeds: Record<string, ort.Tensor> = {
        [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(pending.map(BigInt)), [1, seq]),
        [D.positionIds]: new ort.Tensor("int64", BigInt64Array.from(pending.map((_, i) => BigInt(past + i))), [1, seq]),
        [D.pastMask]: new ort.Tensor("float32", new Float32Array(past), [1, 1, 1, past]),
        [D.newMask]: new ort.Tensor("float32", causalMask(seq), [1, 1, seq, seq]),
      };
      for (let l = 0; l < s.decoderLayers; l++) {
        feeds[D.pastKey(l)] = new ort.Tensor("float32", kv[l].keyT, [1, s.heads, s.headDim, past]);
        feeds[D.pastValue(l)] = new ort.Tensor("float32", kv[l].value, [1, s.heads, past, s.headDim]);
        feeds[D.crossKey(l)] = cross[SPEECH_GRAPH.encoder.crossKey(l)];
        feeds[D.crossValue(l)] = cross[SPEECH_GRAPH.encoder.crossValue(l)];
      }
      Object.assign(feeds, ruleFeeds(1, s.vocab, manifest.tokens.timestampBegin));
      started = performance.now();
      const out = await decoder.run(feeds);
      if (past > 0) stepMs.push(performance.now() - started);
      firstAlignment ??= out[D.alignment];
      const logits = out[D.logits].data as Float32Array;
      const ref = reference.logits[generated.length];
      if (ref) for (let i = 0; i < logits.length; i++) if (Number.isFinite(ref[i])) maxLogitDiff = Math.max(maxLogitDiff, Math.abs(logits[i] - ref[i]));
      const presents = out[D.presents].data as Float32Array;
      const entry = presents.length / (2 * s.decoderLayers);
      const part = (l: number, kind: "key" | "value") => presents.subarray(presentEntry(l, kind) * entry, (presentEntry(l, kind) + 1) * entry);
      for (let l = 0; l < s.decoderLayers; l++) {
        kv[l].keyT = appendKeysT(kv[l].keyT, part(l, "key"), s.heads, s.headDim, past, seq);
        kv[l].value = appendValues(kv[l].value, part(l, "value"), s.heads, s.headDim, past, seq);
      }
      past += seq;
      const next = argmax(logits);
      if (next === manifest.tokens.endOfText) break;
      generated.push(next);
      pending = [next];
    }
    console.log(
      `whisper-tiny.en: max |logit diff| ${maxLogitDiff.toExponential(2)} over ${reference.logits.length} steps; ` +
        `encoder ${encodeMs.toFixed(0)} ms (CTranslate2 float32 encode ${reference.encodeMs.toFixed(0)} ms); decoder step median ${median(stepMs).toFixed(2)} ms`,
    );
    expect(generated).toEqual(reference.tokens);
    expect(maxLogitDiff).toBeLessThan(2e-2);

    // The alignment heads' cross-attention weights: [1, heads, seq, audio_ctx], each row a distribution.
    const alignment = firstAlignment!;
    expect(alignment.dims).toEqual([1, s.alignmentHeads.length, prompt.length, s.audioContext]);
    const a = alignment.data as Float32Array;
    for (let row = 0; row < a.length / s.audioContext; row++) {
      let sum = 0;
      for (let j = 0; j < s.audioContext; j++) sum += a[row * s.audioContext + j];
      expect(Math.abs(sum - 1)).toBeLessThan(1e-4);
    }
  });

  it("reads a window shared by several rows once, with the same outputs as one window per row", async () => {
    const s = manifest.speech;
    const encoder = await ort.InferenceSession.create(join(artifact.dir, SPEECH_FILES.encoder), options);
    const decoder = await ort.InferenceSession.create(join(artifact.dir, SPEECH_FILES.decoder), options);
    const cross = await encoder.run({ [SPEECH_GRAPH.encoder.mel]: new ort.Tensor("float32", mel, [1, s.melBins, 3000]) });
    const rows = 3;
    const seq = 2;
    const t = manifest.tokens;
    // Each row its own two tokens after a shared cached position, so rows differ in every layer.
    const ids = [t.startOfTranscript, t.noTimestamps, t.startOfTranscript, 464, t.startOfTranscript, 1002];
    const past = 1;
    const pastKeys = Float32Array.from({ length: rows * s.heads * s.headDim * past }, (_, i) => Math.sin(i));
    const pastValues = Float32Array.from({ length: rows * s.heads * past * s.headDim }, (_, i) => Math.cos(i));
    const repeated = (tensor: ort.Tensor) => {
      const data = tensor.data as Float32Array;
      const out = new Float32Array(rows * data.length);
      for (let r = 0; r < rows; r++) out.set(data, r * data.length);
      return new ort.Tensor("float32", out, [rows, ...tensor.dims.slice(1)]);
    };
    const run = async (perRow: boolean) => {
      const feeds: Record<string, ort.Tensor> = {
        [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [rows, seq]),
        [D.positionIds]: new ort.Tensor("int64", BigInt64Array.from(ids.map((_, i) => BigInt(past + (i % seq)))), [rows, seq]),
        [D.pastMask]: new ort.Tensor("float32", new Float32Array(rows * past), [rows, 1, 1, past]),
        [D.newMask]: new ort.Tensor("float32", causalMask(seq), [1, 1, seq, seq]),
      };
      for (let l = 0; l < s.decoderLayers; l++) {
        feeds[D.pastKey(l)] = new ort.Tensor("float32", pastKeys, [rows, s.heads, s.headDim, past]);
        feeds[D.pastValue(l)] = new ort.Tensor("float32", pastValues, [rows, s.heads, past, s.headDim]);
        const key = cross[SPEECH_GRAPH.encoder.crossKey(l)];
        const value = cross[SPEECH_GRAPH.encoder.crossValue(l)];
        feeds[D.crossKey(l)] = perRow ? repeated(key) : key;
        feeds[D.crossValue(l)] = perRow ? repeated(value) : value;
      }
      Object.assign(feeds, ruleFeeds(rows, s.vocab, t.timestampBegin));
      return decoder.run(feeds);
    };
    const [grouped, perRow] = [await run(false), await run(true)];
    const maxDiff = (name: string) => {
      const [a, b] = [grouped[name].data as Float32Array, perRow[name].data as Float32Array];
      expect(grouped[name].dims).toEqual(perRow[name].dims);
      let worst = 0;
      for (let i = 0; i < a.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
      return worst;
    };
    expect(grouped[D.alignment].dims).toEqual([rows, s.alignmentHeads.length, seq, s.audioContext]);
    expect(maxDiff(D.logits)).toBeLessThan(1e-3);
    expect(maxDiff(D.alignment)).toBeLessThan(1e-6);
    expect(maxDiff(D.presents)).toBeLessThan(1e-4);
    // The rows really differ: the test would not see rows mixed up between groups otherwise.
    const logits = grouped[D.logits].data as Float32Array;
    expect(argmax(logits.subarray(0, s.vocab))).not.toBe(argmax(logits.subarray(s.vocab, 2 * s.vocab)));
  });

  // The GPU artifact's graph sorts by blocks (DecoderTopK); both run here on the CPU provider, which takes either exactly.
  it.each(["cpu", "webgpu"] as const)(
    "takes each row's likeliest tokens under Whisper's rules in the graph, as the rules in JavaScript give them (%s artifact)",
    async (device) => {
      const dir = device === "cpu" ? artifact.dir : (await provisionArtifact(SLUG, { device })).dir;
      const s = manifest.speech;
      const t = manifest.tokens;
      const encoder = await ort.InferenceSession.create(join(dir, SPEECH_FILES.encoder), options);
      const decoder = await ort.InferenceSession.create(join(dir, SPEECH_FILES.decoder), options);
      const cross = await encoder.run({ [SPEECH_GRAPH.encoder.mel]: new ort.Tensor("float32", mel, [1, s.melBins, 3000]) });
      const base = {
        temperature: 0,
        seed: 0,
        timestamps: true,
        lastWasTimestamp: false,
        penultimateWasTimestamp: true,
        lastTimestamp: -1,
        maxInitialTimestampIndex: -1,
      };
      const rules: WhisperSampling[] = [
        // Six tokens allowed (the first timestamps): fewer than k, so the top k ends in entries at -inf.
        { ...base, sampled: 0, maxInitialTimestampIndex: 5 },
        { ...base, sampled: 3, lastWasTimestamp: true, penultimateWasTimestamp: false, lastTimestamp: t.timestampBegin + 20 },
        { ...base, sampled: 5, lastTimestamp: t.timestampBegin + 10 },
        { ...base, sampled: 2, timestamps: false },
        // Text kept only where it is least likely: the timestamps' mass wins and text is forced out.
        { ...base, sampled: 4 },
      ];
      const rows = rules.length;
      const ids = [t.startOfTranscript, 464, 1002, 2068, 383];
      const feeds: Record<string, ort.Tensor> = {
        [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(ids.map(BigInt)), [rows, 1]),
        [D.positionIds]: new ort.Tensor("int64", new BigInt64Array(rows), [rows, 1]),
        [D.pastMask]: new ort.Tensor("float32", new Float32Array(0), [rows, 1, 1, 0]),
        [D.newMask]: new ort.Tensor("float32", new Float32Array(1), [1, 1, 1, 1]),
      };
      for (let l = 0; l < s.decoderLayers; l++) {
        feeds[D.pastKey(l)] = new ort.Tensor("float32", new Float32Array(0), [rows, s.heads, s.headDim, 0]);
        feeds[D.pastValue(l)] = new ort.Tensor("float32", new Float32Array(0), [rows, s.heads, 0, s.headDim]);
        feeds[D.crossKey(l)] = cross[SPEECH_GRAPH.encoder.crossKey(l)];
        feeds[D.crossValue(l)] = cross[SPEECH_GRAPH.encoder.crossValue(l)];
      }
      const plain = await decoder.run({ ...feeds, ...ruleFeeds(rows, s.vocab, t.timestampBegin) }, [D.logits]);
      const logits = plain[D.logits].data as Float32Array;
      const suppressed = alwaysSuppressed(t);
      const mask = new Float32Array(rows * s.vocab);
      rules.forEach((rule, r) => maskByWhisperRules(mask.subarray(r * s.vocab, (r + 1) * s.vocab), rule, t, suppressed));
      // The last row: text tokens kept only below its row's median logit.
      const last = logits.subarray((rows - 1) * s.vocab, rows * s.vocab);
      const median = [...last.subarray(0, t.timestampBegin)].sort((a, b) => a - b)[Math.floor(t.timestampBegin / 2)];
      for (let i = 0; i < t.timestampBegin; i++) if (last[i] > median - 8) mask[(rows - 1) * s.vocab + i] = -Infinity;
      const k = 10;
      const out = await decoder.run({ ...feeds, ...ruleFeeds(rows, s.vocab, t.timestampBegin, k, mask) }, [D.logits, D.top]);
      // [rows, 2, k]: each row's log-probabilities, then their ids.
      expect(out[D.top].dims).toEqual([rows, 2, k]);
      const top = out[D.top].data as Float32Array;
      const topLogprobs = (r: number) => top.subarray(2 * r * k, (2 * r + 1) * k);
      const topIds = (r: number) => Array.from(top.subarray((2 * r + 1) * k, (2 * r + 2) * k));
      let forcedRows = 0;
      for (let r = 0; r < rows; r++) {
        const row = Float32Array.from(logits.subarray(r * s.vocab, (r + 1) * s.vocab), (x, i) => x + mask[r * s.vocab + i]);
        const textBefore = row.subarray(0, t.timestampBegin).some((x) => x > -Infinity);
        if (r < rows - 1 || rules[r].timestamps) forceTimestamps(row, t.timestampBegin);
        if (textBefore && !row.subarray(0, t.timestampBegin).some((x) => x > -Infinity)) forcedRows++;
        let max = -Infinity;
        for (const x of row) max = Math.max(max, x);
        let sum = 0;
        for (const x of row) sum += Math.exp(x - max);
        const logZ = max + Math.log(sum);
        // The allowed tokens, likeliest first, the lower id first on ties; then entries at -inf (no token, whatever their ids).
        const allowed = [...row.keys()].filter((i) => row[i] > -Infinity).sort((a, b) => row[b] - row[a] || a - b);
        const expected = allowed.slice(0, k);
        if (r === 0) expect(allowed.length).toBeLessThan(k);
        expect(topIds(r).slice(0, expected.length), `row ${r}`).toEqual(expected);
        for (let i = 0; i < expected.length; i++) expect(Math.abs(topLogprobs(r)[i] - (row[expected[i]] - logZ)), `row ${r}`).toBeLessThan(1e-4);
        expect(Array.from(topLogprobs(r).subarray(expected.length)), `row ${r}`).toEqual(new Array(k - expected.length).fill(-Infinity));
        // The mask and the timestamp rule together are the JavaScript rules.
        const filtered = Float32Array.from(logits.subarray(r * s.vocab, (r + 1) * s.vocab));
        if (r < rows - 1) {
          filterByWhisperRules(filtered, rules[r], t, suppressed);
          expect(Array.from(filtered)).toEqual(Array.from(row));
        }
      }
      // The forced-out case happened (the last row), so the test would see the graph skip the rule.
      expect(forcedRows).toBeGreaterThanOrEqual(1);
    },
  );
});
