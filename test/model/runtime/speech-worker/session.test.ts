/**
 * The speech session on the real whisper tiny.en artifact: slots grouped in runs that share one
 * encoded window, and decoder calls whose rows span several runs (widened with gap fillers so each
 * run's rows read their window once) give every row what it gets in a call of its own. On the WebGPU
 * device (lavapipe here) the windows and the decoder's self-attention cache stay device tensors,
 * never read by JavaScript, the rows get the CPU's logits, and neither graph copies a value back from
 * the device before its results (a copy mid-call waits for everything queued before it).
 */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { provisionArtifact } from "../../../../src/provision/index.js";
import { SPEECH_FILES, SPEECH_GRAPH, WINDOW_FRAMES } from "../../../../src/runtime/artifact/index.js";
import { nodeNamesOf } from "../../../../src/runtime/device/onnx-nodes.js";
import { SpeechSession } from "../../../../src/runtime/speech-worker/session.js";
import { decodeAudio, logMel, melWindow } from "../../../../src/runtime/audio/index.js";
import { copiesFromDevice, profiledKernelOps, profiledNodes, ranOn } from "../../../support/onnx-profile.js";
import { speechFixture } from "../../../support/speech.js";

const RUN = 2;
/** Mean KL (nats) the float16 artifact's next-token distributions may be from the CPU artifact's. */
const KL_BOUND = 0.04;
const SLOTS = 6;

/** A deterministic stand-in for a window's log-mel features (the decoder only needs windows that differ). */
function features(melBins: number, seed: number): Float32Array {
  let state = seed;
  return Float32Array.from({ length: melBins * WINDOW_FRAMES }, () => ((state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31) * 2 - 1);
}

describe("SpeechSession windows shared by runs of slots", () => {
  let dir: string;
  const sessions: SpeechSession[] = [];
  const open = async (device: "cpu" | "webgpu" = "cpu") => {
    const session = await SpeechSession.load(dir, { device, threads: 2, slots: SLOTS, rowsPerWindow: RUN });
    sessions.push(session);
    const { melBins } = session.manifest.speech;
    // Three runs, three windows: slots 0-1 read the first, 2-3 the second, 4-5 the third.
    for (let run = 0; run < SLOTS / RUN; run++) await session.encode(run * RUN + (run % RUN), features(melBins, run + 1));
    const t = session.manifest.tokens;
    const prefix = [t.startOfTranscript, t.noTimestamps];
    await session.decode(0, new Array(SLOTS).fill(0), new Array(SLOTS).fill(true), prefix.length, Array.from({ length: SLOTS }, () => prefix).flat());
    return session;
  };

  beforeAll(async () => {
    dir = (await provisionArtifact("whisper-tiny-en")).dir;
  }, 600_000);
  afterAll(async () => {
    for (const s of sessions) await s.release();
  });

  it("refuses slots that do not split into whole runs", async () => {
    await expect(SpeechSession.load(dir, { slots: 5, rowsPerWindow: 2 })).rejects.toThrow(/runs of 2/);
  });

  it("gives rows spanning several runs the logits each gets alone, and keeps the other rows' caches", async () => {
    const together = await open();
    const alone = await open();
    const vocab = together.manifest.speech.vocab;
    const tokens = [464, 1002, 2068];
    // Slots 1..3: the end of the first run, the whole second run; slot 0 is not in the call, slot 4 not either.
    const lengthsBefore = Array.from(together.kv.lengths);
    const logits = (await together.decode(1, [2, 2, 2], [true, true, true], 1, tokens)).logits!;
    for (let r = 0; r < 3; r++) {
      const single = await alone.decode(1 + r, [2], [true], 1, [tokens[r]]);
      let worst = 0;
      for (let i = 0; i < vocab; i++) worst = Math.max(worst, Math.abs(logits[r * vocab + i] - single.logits![i]));
      expect(worst, `row ${r}`).toBeLessThan(1e-3);
    }
    // Rows of different windows differ (a mix-up of windows would not go unseen).
    let differs = 0;
    for (let i = 0; i < vocab; i++) differs = Math.max(differs, Math.abs(logits[i] - logits[vocab + i]));
    expect(differs).toBeGreaterThan(0.1);
    // The gap filler (slot 0) and the slots outside the call keep their caches.
    expect(Array.from(together.kv.lengths)).toEqual(lengthsBefore.map((n, s) => (s >= 1 && s <= 3 ? 3 : n)));
  });

  it("keeps the windows on the WebGPU device, joins them there for a call spanning runs, and gives the CPU's logits", async () => {
    const deviceReads: string[] = [];
    const dataGetter = Object.getOwnPropertyDescriptor(ort.Tensor.prototype, "data")!.get!;
    Object.defineProperty(ort.Tensor.prototype, "data", {
      configurable: true,
      get(this: ort.Tensor) {
        if (this.location === "gpu-buffer") deviceReads.push(`data of a gpu-buffer tensor [${this.dims.join(", ")}]`);
        return dataGetter.call(this);
      },
    });
    try {
      const onCpu = await open("cpu");
      const onDevice = await open("webgpu");
      const vocab = onCpu.manifest.speech.vocab;
      const tokens = [464, 1002, 2068];
      const expected = await onCpu.decode(1, [2, 2, 2], [true, true, true], 1, tokens);
      const got = await onDevice.decode(1, [2, 2, 2], [true, true, true], 1, tokens);
      let worst = 0;
      for (let i = 0; i < 3 * vocab; i++) worst = Math.max(worst, Math.abs(expected.logits![i] - got.logits![i]));
      console.log(`webgpu windows: max |logit diff| against the CPU over 3 rows of 2 windows: ${worst.toExponential(2)}`);
      expect(worst).toBeLessThan(1e-2);
      // One window: fed as the device tensor it is.
      const single = await onDevice.decode(2, [3, 3], [true, true], 1, [11, 12]);
      const reference = await onCpu.decode(2, [3, 3], [true, true], 1, [11, 12]);
      worst = 0;
      for (let i = 0; i < 2 * vocab; i++) worst = Math.max(worst, Math.abs(single.logits![i] - reference.logits![i]));
      expect(worst).toBeLessThan(1e-2);
      expect(deviceReads).toEqual([]);
    } finally {
      Object.defineProperty(ort.Tensor.prototype, "data", { configurable: true, get: dataGetter });
    }
  }, 300_000);

  it("keeps the decoder's self-attention cache on the WebGPU device through gap fillers and beam moves, and gives the CPU's logits", async () => {
    const onCpu = await open("cpu");
    const onDevice = await open("webgpu");
    const vocab = onCpu.manifest.speech.vocab;
    const layers = onCpu.manifest.speech.decoderLayers;
    const D = SPEECH_GRAPH.decoder;
    const pastNames = new Set([...Array(layers).keys()].flatMap((l) => [D.pastKey(l), D.pastValue(l)]));
    // Every run while the device session decodes: no past of its decoder is fed from JavaScript (only the new positions come back).
    const crossings: string[] = [];
    type Run = (this: ort.InferenceSession, feeds: ort.InferenceSession.FeedsType, ...rest: unknown[]) => Promise<ort.InferenceSession.ReturnType>;
    // The factory's typings hide the class whose instances every session is.
    const sessionClass = (ort.InferenceSession as unknown as { prototype: { run: Run } }).prototype;
    const run = sessionClass.run;
    const spy: Run = async function (feeds, ...rest) {
      for (const [name, t] of Object.entries(feeds)) if (pastNames.has(name) && t.location === "cpu") crossings.push(`fed ${name} from JavaScript`);
      return run.call(this, feeds, ...rest);
    };
    // Each call: first slot, each row's past, kept, new tokens per row, tokens, and the slots rows continue from.
    const calls: Array<[number, number[], boolean[], number, number[], number[]?]> = [
      [1, [2, 2, 2], [true, true, true], 1, [464, 1002, 2068]], // spans two runs: slot 0 a gap filler
      [2, [3, 3], [true, true], 2, [11, 12, 13, 14]],
      [0, [3, 3], [true, true], 1, [21, 22], [1, 1]], // both rows fork from slot 1
      [2, [5, 4], [true, true], 1, [31, 32], [3, 2]], // the two rows swap (a cycle of moves)
      [4, [2, 2], [true, false], 1, [41, 42]], // the second row is dropped again
    ];
    let worst = 0;
    for (const [first, past, keep, perRow, tokens, from] of calls) {
      const expected = await onCpu.decode(first, past, keep, perRow, tokens, {}, from);
      sessionClass.run = spy;
      let got;
      try {
        got = await onDevice.decode(first, past, keep, perRow, tokens, {}, from);
      } finally {
        sessionClass.run = run;
      }
      for (let i = 0; i < past.length * vocab; i++) worst = Math.max(worst, Math.abs(expected.logits![i] - got.logits![i]));
      expect(Array.from(onDevice.kv.lengths)).toEqual(Array.from(onCpu.kv.lengths));
    }
    console.log(`webgpu decoder cache: max |logit diff| against the CPU over ${calls.length} calls: ${worst.toExponential(2)}`);
    expect(worst).toBeLessThan(1e-2);
    expect(crossings).toEqual([]);
  }, 300_000);
});

describe("the GPU speech artifact", () => {
  it("attends in the encoder with MatMul and Softmax, all on the WebGPU device, and gives the CPU artifact's logits and top log-probabilities", async () => {
    const cpu = await provisionArtifact("whisper-tiny-en");
    const gpu = await provisionArtifact("whisper-tiny-en", { device: "webgpu" });
    expect(gpu.dir).not.toBe(cpu.dir);
    expect(gpu.manifest.device).toBe("webgpu");
    expect(cpu.manifest.device).toBeUndefined();
    // The fused node, which the WebGPU provider computes wrongly and so would run on the CPU provider, is not in the GPU encoder.
    const attention = (dir: string) => nodeNamesOf(readFileSync(join(dir, SPEECH_FILES.encoder)), "Attention", "com.microsoft").length;
    expect(attention(gpu.dir)).toBe(0);
    expect(attention(cpu.dir)).toBeGreaterThan(0);
    const logitsOf = async (dir: string, device: "cpu" | "webgpu") => {
      const session = await SpeechSession.load(dir, { device, threads: 2, slots: 1 });
      try {
        await session.encode(0, features(session.manifest.speech.melBins, 7));
        const t = session.manifest.tokens;
        const prompt = await session.decode(0, [0], [true], 3, [t.startOfTranscript, t.startOfTranscript + 1, t.noTimestamps]);
        // The top k under a rule mask: the GPU graph takes its log-softmax in reductions (its provider has no LogSoftmax).
        const mask = new Float32Array(session.manifest.speech.vocab);
        mask[440] = -Infinity;
        const next = await session.decode(0, [3], [true], 1, [440], { logits: true, top: { mask, k: 5 } });
        return { logits: [prompt.logits!, next.logits!], top: next.top! };
      } finally {
        await session.release();
      }
    };
    const expected = await logitsOf(cpu.dir, "cpu");
    const got = await logitsOf(gpu.dir, "webgpu");
    const worst = Math.max(...got.logits.map((row, i) => row.reduce((m, v, j) => Math.max(m, Math.abs(v - expected.logits[i][j])), 0)));
    const worstTop = Math.max(...got.top.logprobs.map((v, i) => Math.abs(v - expected.top.logprobs[i])));
    console.log(
      `webgpu speech artifact against the CPU artifact on the CPU: max |logit diff| ${worst.toExponential(2)}, top-5 log-probabilities ${worstTop.toExponential(2)}`,
    );
    expect(worst).toBeLessThan(1e-2);
    expect([...got.top.tokens]).toEqual([...expected.top.tokens]);
    expect(got.top.tokens).not.toContain(440);
    expect(worstTop).toBeLessThan(1e-2);
  }, 300_000);
});

describe("the GPU speech artifact's calls", () => {
  it("encode and decode copying nothing back from the device before their results, within a budget of kernels", async () => {
    const gpu = await provisionArtifact("whisper-tiny-en", { device: "webgpu" });
    const profiles = mkdtempSync(join(tmpdir(), "kiln-speech-profile-"));
    try {
      const session = await SpeechSession.load(gpu.dir, { device: "webgpu", threads: 2, slots: 2, profileFilePrefix: join(profiles, "speech") });
      try {
        await session.encode(0, features(session.manifest.speech.melBins, 3));
        const t = session.manifest.tokens;
        const mask = new Float32Array(2 * session.manifest.speech.vocab);
        await session.decode(
          0,
          [0, 0],
          [true, true],
          3,
          [t.startOfTranscript, t.startOfTranscript + 1, t.noTimestamps].flatMap((id) => [id, id]),
          {
            logits: true,
            top: { mask, k: 5 },
          },
        );
        await session.decode(0, [3, 3], [true, true], 1, [440, 441], { logits: false, alignment: true, top: { mask, k: 5 } });
        session.endProfiling();
      } finally {
        await session.release();
      }
      for (const graph of ["encoder", "decoder"]) {
        const nodes = profiledNodes(profiles, `speech-${graph}`);
        expect(ranOn(nodes, "WebGpuExecutionProvider"), graph).toBeGreaterThan(50);
        expect(copiesFromDevice(nodes), graph).toEqual([]);
      }
      // Each call's top k in two sorts of one dispatch each: one TopK over the vocabulary would take about 138.
      // A dispatch budget: a GPU's host records each kernel. With the biases in their Gemms and the top k
      // in two sorts, whisper tiny's two calls here take 344 (384 with MatMul then Add; about 620 with one sort over the vocabulary).
      const kernels = profiledKernelOps(profiles, "speech-decoder");
      expect(kernels.filter((op) => op === "TopK").length / 2).toBe(2);
      expect(kernels.length).toBeLessThanOrEqual(344);
    } finally {
      rmSync(profiles, { recursive: true, force: true });
    }
  }, 300_000);
});

describe("the float16 GPU speech artifact", () => {
  /** Log-softmax of a logits row, in float64. */
  const logSoftmax = (row: Float32Array) => {
    let max = -Infinity;
    for (const v of row) max = Math.max(max, v);
    let sum = 0;
    for (const v of row) sum += Math.exp(v - max);
    const lse = max + Math.log(sum);
    return Float64Array.from(row, (v) => v - lse);
  };
  const argmax = (row: ArrayLike<number>) => {
    let best = 0;
    for (let i = 1; i < row.length; i++) if (row[i] > row[best]) best = i;
    return best;
  };

  it("keeps windows and cache in float16 on the device, and follows the CPU artifact's next-token distributions over spoken English", async () => {
    const cpu = await provisionArtifact("whisper-tiny-en");
    const float32 = await provisionArtifact("whisper-tiny-en", { device: "webgpu" });
    const half = await provisionArtifact("whisper-tiny-en", { device: "webgpu", deviceActivations: "float16" });
    expect(new Set([cpu.dir, float32.dir, half.dir]).size).toBe(3);
    expect(half.manifest.choices.find((c) => c.what === "activations")?.choice).toMatch(/^float16/);
    expect(float32.manifest.choices.find((c) => c.what === "activations")).toBeUndefined();
    // The CPU provider has no float16 kernels for it: refused with the reason, not run slowly or wrongly.
    await expect(SpeechSession.load(half.dir, { device: "cpu" })).rejects.toThrow(/float16, for a GPU/);
    // An adapter without room for its weights and caches refuses it before they are allocated, in float16 figures.
    const room = { device: "webgpu" as const, slots: 10, rowsPerWindow: 5 };
    await expect(SpeechSession.load(half.dir, { ...room, adapterFreeBytes: 100 * 2 ** 20 })).rejects.toThrow(
      /^whisper-tiny-en-\w+ needs about 0\.\d\d GiB of the adapter's memory \(weights 0\.\d\d GiB, decoder cache 0\.\d\d GiB for 10 rows, windows 0\.\d\d GiB for 2 transcriptions, encoder 0\.\d\d GiB\) and 0\.10 GiB are free: decode fewer transcriptions or beams at once$/,
    );
    await (await SpeechSession.load(half.dir, { ...room, adapterFreeBytes: 2 ** 30 })).release();

    const melBins = cpu.manifest.speech!.melBins;
    const samples = await decodeAudio(readFileSync(speechFixture("lighthouse").files.wav));
    const mel = melWindow(logMel(samples, melBins), melBins, 0);
    const t = cpu.manifest.tokens!;
    const prompt = [t.startOfTranscript, t.noTimestamps];
    const STEPS = 12;
    // The CPU artifact's own greedy continuation, then both artifacts teacher-forced along it. Two rows
    // in two windows (the same audio) make each call join the windows on the device.
    const rowsOf = async (dir: string, device: "cpu" | "webgpu", forced?: number[]) => {
      const session = await SpeechSession.load(dir, { device, threads: 2, slots: 2, rowsPerWindow: 1 });
      try {
        await session.encode(0, mel);
        await session.encode(1, mel);
        const steps: Float32Array[][] = [];
        const tokens: number[] = [];
        let out = await session.decode(0, [0, 0], [true, true], prompt.length, [...prompt, ...prompt]);
        for (let s = 0; s < STEPS; s++) {
          const vocab = session.manifest.speech.vocab;
          steps.push([out.logits!.slice(0, vocab), out.logits!.slice(vocab)]);
          const next = forced ? forced[s] : argmax(steps[s][0]);
          tokens.push(next);
          out = await session.decode(0, [prompt.length + s, prompt.length + s], [true, true], 1, [next, next]);
        }
        return { steps, tokens };
      } finally {
        await session.release();
      }
    };
    const reference = await rowsOf(cpu.dir, "cpu");
    const got = await rowsOf(half.dir, "webgpu", reference.tokens);
    let kl = 0;
    let agree = 0;
    let worst = 0;
    for (let s = 0; s < STEPS; s++) {
      const p = logSoftmax(reference.steps[s][0]);
      for (const row of got.steps[s]) {
        const q = logSoftmax(row);
        let d = 0;
        for (let i = 0; i < p.length; i++) d += Math.exp(p[i]) * (p[i] - q[i]);
        kl += d / (2 * STEPS);
        if (argmax(row) === argmax(p)) agree++;
      }
      for (let i = 0; i < got.steps[s][0].length; i++) worst = Math.max(worst, Math.abs(got.steps[s][0][i] - got.steps[s][1][i]));
    }
    console.log(
      `float16 speech artifact on webgpu against the CPU artifact, ${STEPS} teacher-forced steps of spoken English: mean KL ${kl.toExponential(2)} nats, top-1 agreement ${agree}/${2 * STEPS}, rows apart ${worst.toExponential(2)}`,
    );
    // Greedy decoding follows the same words when every step's likeliest token is the CPU's; the KL bound
    // is 10x the measured 2026-11-28 figure (see the log line), far below a changed word's share.
    expect(agree).toBe(2 * STEPS);
    expect(kl).toBeLessThan(KL_BOUND);
    // Both rows read the same audio through the device's window join: the same numbers.
    expect(worst).toBeLessThan(1e-3);
  }, 300_000);
});
