/**
 * Whisper large-v3's layout on synthetic weights: 128 mel bins and the multilingual vocabulary of
 * 51,866 ids (100 languages with Cantonese last, the special tokens shifted one place from large-v2),
 * with two narrow encoder and decoder layers of seeded random weights so that it runs in seconds.
 * whisper-v3-synthetic.py writes the CTranslate2 folder and CTranslate2's own numerics on it; kiln
 * compiles the folder and must give the same logits, detect the same language (the argmax over the
 * language tokens after <|startoftranscript|>) and put the translate task token in the decoder's
 * prompt when asked to translate. KILN_TEST_WHISPER_V3_DIMS=1280,20,5120,1,1 runs the layout and
 * numerics checks at large-v3's own width (one layer each; about 0.5 GB of weights, 3 minutes on 2
 * cores; max |logit diff| 2.4e-4 on 2026-11-27), leaving out the runtime's whole-window decoding.
 */
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import * as ort from "onnxruntime-node";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pullModel } from "../../../src/catalogue/pull/index.js";
import { compileCt2Whisper } from "../../../src/compiler/compile-whisper.js";
import type { CompileResult } from "../../../src/compiler/compile.js";
import { readSpeechManifest, SPEECH_FILES, SPEECH_GRAPH, type SpeechArtifactManifest } from "../../../src/runtime/artifact/index.js";
import { decodeAudio } from "../../../src/runtime/audio/index.js";
import { LoadedSpeechModel } from "../../../src/runtime/loaded-speech-model.js";
import { languageName } from "../../../src/runtime/speech/index.js";
import type { SpeechRunner } from "../../../src/scheduler/speech/index.js";
import { serveSpeechRunner } from "../../../src/scheduler/speech/index.js";
import { speechFixture } from "../../support/speech.js";
import { ruleFeeds } from "../../support/whisper-feeds.js";

const PYTHON = process.env.KILN_TEST_PYTHON ?? resolve(".cache/pyclient/bin/python");
const STEPS = 8;
/** width,heads,ffn,encoder layers,decoder layers of the synthetic model. */
const DIMS = process.env.KILN_TEST_WHISPER_V3_DIMS ?? "128,2,512,2,2";
const NARROW = process.env.KILN_TEST_WHISPER_V3_DIMS === undefined;
const D = SPEECH_GRAPH.decoder;

interface PromptReference {
  prompt: number[];
  tokens: number[];
  logits: number[][];
}

interface Reference {
  /** CTranslate2's detect_language: [token, probability], likeliest first. */
  languages: Array<[string, number]>;
  prompts: Record<"transcribe" | "translate", PromptReference>;
}

const argmax = (a: ArrayLike<number>) => {
  let best = 0;
  for (let i = 1; i < a.length; i++) if (a[i] > a[best]) best = i;
  return best;
};

/** Runs the decoder over `tokens` in one call from an empty cache: the logits after the last. */
async function decodeAll(
  decoder: ort.InferenceSession,
  cross: ort.InferenceSession.OnnxValueMapType,
  s: SpeechArtifactManifest["speech"],
  timestampBegin: number,
  tokens: number[],
) {
  const seq = tokens.length;
  const mask = new Float32Array(seq * seq);
  for (let i = 0; i < seq; i++) for (let j = i + 1; j < seq; j++) mask[i * seq + j] = -Infinity;
  const feeds: Record<string, ort.Tensor> = {
    [D.inputIds]: new ort.Tensor("int64", BigInt64Array.from(tokens.map(BigInt)), [1, seq]),
    [D.positionIds]: new ort.Tensor("int64", BigInt64Array.from(tokens.map((_, i) => BigInt(i))), [1, seq]),
    [D.pastMask]: new ort.Tensor("float32", new Float32Array(0), [1, 1, 1, 0]),
    [D.newMask]: new ort.Tensor("float32", mask, [1, 1, seq, seq]),
  };
  for (let l = 0; l < s.decoderLayers; l++) {
    feeds[D.pastKey(l)] = new ort.Tensor("float32", new Float32Array(0), [1, s.heads, s.headDim, 0]);
    feeds[D.pastValue(l)] = new ort.Tensor("float32", new Float32Array(0), [1, s.heads, 0, s.headDim]);
    feeds[D.crossKey(l)] = cross[SPEECH_GRAPH.encoder.crossKey(l)] as ort.Tensor;
    feeds[D.crossValue(l)] = cross[SPEECH_GRAPH.encoder.crossValue(l)] as ort.Tensor;
  }
  Object.assign(feeds, ruleFeeds(1, s.vocab, timestampBegin));
  const out = await decoder.run(feeds, [D.logits]);
  return out[D.logits];
}

describe("Whisper large-v3 layout on synthetic weights, against CTranslate2", () => {
  let work: string;
  let artifact: CompileResult;
  let manifest: SpeechArtifactManifest;
  let reference: Reference;
  let mel: Float32Array;
  let wav: string;

  beforeAll(async () => {
    if (!existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run scripts/setup.sh (it installs faster-whisper for this test)`);
    work = mkdtempSync(join(tmpdir(), "kiln-whisper-v3-"));
    const tiny = await pullModel("whisper-tiny-en");
    const folder = join(work, "model");
    wav = speechFixture("lighthouse").files.wav;
    execFileSync(PYTHON, [resolve("test/model/compiler/whisper-v3-synthetic.py"), tiny.dir, folder, wav, join(work, "ref.json"), String(STEPS), DIMS], {
      stdio: ["ignore", "ignore", "inherit"],
    });
    reference = JSON.parse(readFileSync(join(work, "ref.json"), "utf8")) as Reference;
    const bytes = readFileSync(join(work, "ref.json.mel.f32"));
    mel = new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4);
    artifact = await compileCt2Whisper({ slug: "whisper-large-v3", modelDir: folder, home: join(work, "home") });
    manifest = readSpeechManifest(artifact.dir);
  }, 300_000);

  afterAll(() => {
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it("reads large-v3's shape and its shifted special tokens from the vocabulary", () => {
    expect(manifest.speech).toMatchObject({ melBins: 128, vocab: 51866, audioContext: 1500, textContext: 448 });
    const t = manifest.tokens;
    expect(t).toMatchObject({ endOfText: 50257, startOfTranscript: 50258, translate: 50359, transcribe: 50360, startOfLm: 50361 });
    expect(t).toMatchObject({ startOfPrev: 50362, noSpeech: 50363, noTimestamps: 50364, timestampBegin: 50365 });
    expect(Object.keys(t.languages)).toHaveLength(100);
    expect([t.languages.en, t.languages.haw, t.languages.yue]).toEqual([50259, 50352, 50358]);
  });

  it("gives CTranslate2's logits for the transcribe and translate prompts, and the same language", async () => {
    const options: ort.InferenceSession.SessionOptions = { intraOpNumThreads: 2, interOpNumThreads: 1, graphOptimizationLevel: "all" };
    const s = manifest.speech;
    const encoder = await ort.InferenceSession.create(join(artifact.dir, SPEECH_FILES.encoder), options);
    const decoder = await ort.InferenceSession.create(join(artifact.dir, SPEECH_FILES.decoder), options);
    try {
      const cross = await encoder.run({ [SPEECH_GRAPH.encoder.mel]: new ort.Tensor("float32", mel, [1, s.melBins, 3000]) });
      // The language: the argmax over the language tokens after <|startoftranscript|> alone.
      const first = (await decodeAll(decoder, cross, s, manifest.tokens.timestampBegin, [manifest.tokens.startOfTranscript])).data as Float32Array;
      const ids = Object.values(manifest.tokens.languages);
      const codes = Object.keys(manifest.tokens.languages);
      const detected = codes[argmax(ids.map((id) => first[id]))];
      expect(`<|${detected}|>`).toBe(reference.languages[0][0]);

      let maxDiff = 0;
      let agreeing = 0;
      let steps = 0;
      for (const task of ["transcribe", "translate"] as const) {
        const ref = reference.prompts[task];
        expect(ref.prompt).toEqual([
          manifest.tokens.startOfTranscript,
          manifest.tokens.languages[detected],
          manifest.tokens[task]!,
          manifest.tokens.noTimestamps,
        ]);
        // Teacher-forced on CTranslate2's tokens: each step's prefix from an empty cache (the graph gives the last position's logits).
        for (const [step, row] of ref.logits.entries()) {
          const mine = (await decodeAll(decoder, cross, s, manifest.tokens.timestampBegin, [...ref.prompt, ...ref.tokens.slice(0, step)])).data as Float32Array;
          for (let i = 0; i < s.vocab; i++) maxDiff = Math.max(maxDiff, Math.abs(mine[i] - row[i]));
          steps++;
          if (argmax(mine) === argmax(row)) agreeing++;
        }
      }
      console.log(
        `synthetic large-v3 layout: max |logit diff| against CTranslate2 ${maxDiff.toExponential(2)} over ${steps} steps; argmax agrees on ${agreeing}/${steps}`,
      );
      expect(agreeing).toBe(steps);
      expect(maxDiff).toBeLessThan(1e-2);
    } finally {
      await encoder.release();
      await decoder.release();
    }
  }, 120_000);

  it.runIf(NARROW)(
    "through the runtime: a translation detects CTranslate2's language and decodes with <|translate|> in the prompt",
    async () => {
      const loaded = await LoadedSpeechModel.load(artifact.dir, { threads: 2, slots: 1 });
      const prompts: number[][] = [];
      const runner: SpeechRunner = {
        slots: loaded.worker.slots,
        encode: (r) => loaded.worker.encode(r),
        decode: (r) => {
          for (const row of r.rows) if (row) prompts.push([...row.tokens]);
          return loaded.worker.decode(r);
        },
        align: (r) => loaded.worker.align(r),
      };
      const m = manifest;
      const served = serveSpeechRunner(runner, {
        slug: "whisper-large-v3",
        artifactId: m.id,
        artifactCreatedAt: m.createdAt,
        model: { shape: m.speech, tokens: m.tokens, tokenizer: loaded.tokenizer, multilingual: true },
        close: () => loaded.close(),
      });
      try {
        const samples = await decodeAudio(readFileSync(wav), { filename: wav });
        // Temperature 1: one sampled attempt per window, as random weights never pass Whisper's checks.
        const transcript = await served.transcribe(samples, { task: "translate", temperature: 1 });
        const detected = reference.languages[0][0].slice(2, -2);
        expect(transcript.task).toBe("translate");
        expect(transcript.language).toBe(languageName(detected));
        const t = m.tokens;
        const start = [t.startOfTranscript, t.languages[detected], t.translate!];
        // The decoder's rows in the order they were run (a prompt may go in several rows): the start sequence is among them.
        const fed = prompts.flat();
        expect(`,${fed.join(",")},`, JSON.stringify(prompts.slice(0, 6))).toContain(`,${start.join(",")},`);
        expect(fed).not.toContain(t.transcribe);
      } finally {
        await served.close();
      }
    },
    120_000,
  );
});
