/**
 * Transcription fields beyond the plain upload, on the real whisper-tiny-en through the real
 * `kiln serve` over HTTP with the official client: `prompt` conditioning the first window as
 * Whisper's does, `hotwords` every window as faster-whisper's do, voice activity detection (`vad_filter`, `chunking_strategy`) on speech padded
 * with long silences, `include[]=logprobs`, and translations refused on an English-only model.
 */
import { createReadStream } from "node:fs";
import OpenAI from "openai";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pullModel } from "../../../src/catalogue/pull/index.js";
import { referenceAvailable, referencePython, referenceTranscribe } from "../../support/faster-whisper.js";
import { type RunningServer, startServer, stopServer } from "../../support/server.js";
import { paddedSpeech, speechFixture } from "../../support/speech.js";
import { wordErrorRate } from "../../support/wer.js";

const SLUG = "whisper-tiny-en";
/** Silence before and after the sentence, in seconds: without the filter the audio takes three 30 s windows, with it one. */
const LEAD_SECONDS = 30;
const TAIL_SECONDS = 30;
/** faster-whisper's padding around speech (400 ms) and a timestamp's rounding. */
const SPEECH_MARGIN = 0.5;

let server: RunningServer | undefined;
let client: OpenAI;

beforeAll(async () => {
  server = await startServer(SLUG, ["--max-running", "2"]);
  client = new OpenAI({ baseURL: server.baseURL, apiKey: "test", maxRetries: 0, timeout: 300_000 });
}, 600_000);

afterAll(async () => {
  expect(await stopServer(server)).toBe(0);
});

/** A verbose_json transcription with extension form fields (the client passes unknown fields through). */
async function verbose(path: string, extra: Record<string, unknown>) {
  const started = performance.now();
  const r = await client.audio.transcriptions.create({
    model: SLUG,
    file: createReadStream(path),
    response_format: "verbose_json",
    timestamp_granularities: ["word", "segment"],
    ...extra,
  } as OpenAI.Audio.TranscriptionCreateParamsNonStreaming<"verbose_json">);
  return { r, ms: performance.now() - started };
}

describe("prompt", () => {
  it("conditions the first window's decoding as Whisper's prompt does: its style carries into the text", async () => {
    const f = speechFixture("lighthouse");
    const plain = await client.audio.transcriptions.create({ model: SLUG, file: createReadStream(f.files.wav) });
    const lower = await client.audio.transcriptions.create({
      model: SLUG,
      file: createReadStream(f.files.wav),
      prompt: "the following is written in lower case without punctuation",
    });
    const hyphen = await client.audio.transcriptions.create({ model: SLUG, file: createReadStream(f.files.wav), prompt: "Kiln, lighthouse-keeper; railing." });
    // faster-whisper 1.2.1 on the same weights: "The old light housekeeper painted…", "the old light housekeeper … every spring"
    // (lower case, no full stop) and "The old lighthouse-keeper painted the railing…".
    expect(plain.text).toMatch(/^The old/);
    expect(lower.text).toBe(lower.text.toLowerCase());
    expect(lower.text).not.toMatch(/\.$/);
    expect(hyphen.text).toContain("lighthouse-keeper");
    expect(wordErrorRate(f.text, lower.text)).toBeLessThan(0.5);
  }, 120_000);
});

describe("hotwords (faster-whisper's)", () => {
  it("condition every window as faster-whisper's hotwords do: its transcript on the same weights, not the one without them", async () => {
    expect(referenceAvailable(), `faster-whisper is missing at ${referencePython()}: run scripts/setup.sh`).toBe(true);
    const f = speechFixture("long");
    const hotwords = "Kiln lighthouse-keeper";
    const ask = (extra: Record<string, unknown>) =>
      client.audio.transcriptions.create({
        model: SLUG,
        file: createReadStream(f.files.wav),
        beam_size: 1,
        ...extra,
      } as OpenAI.Audio.TranscriptionCreateParamsNonStreaming);
    const [plain, hot] = [await ask({}), await ask({ hotwords })];
    const modelDir = (await pullModel(SLUG)).dir;
    const reference = await referenceTranscribe(modelDir, [f.files.wav], { threads: 2, beamSize: 1, hotwords });
    const peer = reference.results[0].text;
    console.log(`hotwords ${JSON.stringify(hotwords)}:\n  kiln:           ${hot.text}\n  faster-whisper: ${peer}\n  kiln without:   ${plain.text}`);
    // The same words as faster-whisper's with the same hotwords, where the answer without them differs.
    expect(wordErrorRate(peer, hot.text)).toBeLessThan(wordErrorRate(peer, plain.text));
    expect(wordErrorRate(peer, hot.text)).toBeLessThan(0.05);
    expect(wordErrorRate(f.text, hot.text)).toBeLessThan(0.5);
  }, 300_000);
});

describe("voice activity detection", () => {
  const padded = () => paddedSpeech("lighthouse", LEAD_SECONDS, TAIL_SECONDS);

  it("skips the silence: faster, the same words, and every time on the speech of the original audio", async () => {
    const p = padded();
    // Untimed first: the detector's model is pulled and loaded on the first request that asks for it.
    await verbose(p.path, { vad_filter: "true" });
    const whole = await verbose(p.path, { vad_filter: "false" });
    const filtered = await verbose(p.path, { vad_filter: "true" });
    const speedup = whole.ms / filtered.ms;
    console.log(
      `VAD on ${p.seconds.toFixed(1)} s (${(p.speechEnd - p.speechStart).toFixed(1)} s of speech): ${whole.ms.toFixed(0)} ms without, ${filtered.ms.toFixed(0)} ms with (x${speedup.toFixed(1)}); ` +
        `without: "${whole.r.text}"; with: "${filtered.r.text}"`,
    );
    expect(speedup).toBeGreaterThan(1.25);
    expect(wordErrorRate(p.text, filtered.r.text)).toBeLessThan(0.5);
    expect(filtered.r.duration).toBeCloseTo(p.seconds, 1);
    const segments = filtered.r.segments ?? [];
    const words = filtered.r.words ?? [];
    expect(segments.length).toBeGreaterThan(0);
    expect(words.length).toBeGreaterThan(3);
    for (const t of [...segments, ...words]) {
      expect(t.start).toBeGreaterThanOrEqual(p.speechStart - SPEECH_MARGIN);
      expect(t.end).toBeLessThanOrEqual(p.speechEnd + SPEECH_MARGIN);
    }
  }, 300_000);

  it("chunking_strategy auto, or a server_vad object as the client sends it, filters the same way", async () => {
    const p = padded();
    const filtered = await verbose(p.path, { vad_filter: "true" });
    const auto = await verbose(p.path, { chunking_strategy: "auto" });
    const serverVad = await verbose(p.path, { chunking_strategy: { type: "server_vad", threshold: 0.5, prefix_padding_ms: 400, silence_duration_ms: 2000 } });
    expect(auto.r.text).toBe(filtered.r.text);
    expect(serverVad.r.text).toBe(filtered.r.text);
    expect(serverVad.r.segments?.[0].start).toBe(filtered.r.segments?.[0].start);
  }, 300_000);

  it("answers silence only with empty text without decoding", async () => {
    const silence = speechFixture("silence");
    const r = await client.audio.transcriptions.create({ model: SLUG, file: createReadStream(silence.files.wav), vad_filter: "true" } as never);
    expect(r.text).toBe("");
  });
});

describe("include[]=logprobs", () => {
  it("gives each text token of the json answer with its log-probability and bytes", async () => {
    const f = speechFixture("train");
    const r = await client.audio.transcriptions.create({ model: SLUG, file: createReadStream(f.files.wav), include: ["logprobs"] });
    const logprobs = r.logprobs ?? [];
    expect(logprobs.length).toBeGreaterThan(5);
    expect(
      logprobs
        .map((l) => l.token)
        .join("")
        .trim(),
    ).toBe(r.text);
    for (const l of logprobs) {
      expect(l.logprob).toBeLessThanOrEqual(0);
      expect(Buffer.from(l.bytes ?? []).toString("utf8")).toBe(l.token);
    }
  });

  it("is refused outside the json format, naming include", async () => {
    const f = speechFixture("train");
    const err = await client.audio.transcriptions
      .create({ model: SLUG, file: createReadStream(f.files.wav), include: ["logprobs"], response_format: "text" })
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("include");
  });
});

describe("translations", () => {
  it("an English-only model cannot translate: 400 naming model", async () => {
    const f = speechFixture("train");
    const err = await client.audio.translations.create({ model: SLUG, file: createReadStream(f.files.wav) }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(OpenAI.BadRequestError);
    expect((err as InstanceType<typeof OpenAI.BadRequestError>).param).toBe("model");
    expect((err as Error).message).toMatch(/English-only/);
  });
});
