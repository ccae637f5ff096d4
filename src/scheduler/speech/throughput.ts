/**
 * A loaded speech model's speed on this machine, measured through its worker as the speech engine
 * calls it (`kiln bench <whisper slug>`): one 30 s window's encode, then beam search's decoder calls
 * (a prompt, then one token a row a step, the beams reordered every step, each row's likeliest tokens
 * under Whisper's rules), at each number of transcriptions decoding together.
 */
import { WINDOW_FRAMES } from "../../runtime/artifact/index.js";
import type { LoadedSpeechModel } from "../../runtime/loaded-speech-model.js";
import type { DecodeRow, WhisperSampling } from "../../runtime/speech-worker/protocol.js";

/** What {@link measureSpeechThroughput} runs. */
export interface SpeechThroughputPlan {
  /** Transcriptions decoding together in each decode measurement, e.g. [1, 4]; each takes `beams` rows. */
  transcriptions: readonly number[];
  /** Rows (hypotheses) per transcription: the beam size. */
  beams: number;
  /** Prompt tokens each row's cache starts from. */
  context: number;
  /** Decoder steps (one token a row) of each decode measurement. */
  steps: number;
  /** Repetitions of every measurement; the figures are their medians. */
  runs: number;
}

export interface SpeechDecodeFigures {
  transcriptions: number;
  /** Decoder rows of each call: transcriptions x beams. */
  rows: number;
  /** Median milliseconds of the prompt call (every row's `context` tokens into an empty cache). */
  promptMs: number;
  /** Median milliseconds of a decoder step (one token a row). */
  msPerStep: number;
}

export interface SpeechThroughputFigures {
  /** Median milliseconds to encode one 30 s window, until a decoder call can read it. */
  encodeMs: number;
  decode: SpeechDecodeFigures[];
}

/** Tokens a 30 s window of speech decodes, for {@link windowSeconds}. */
export const WINDOW_TOKENS = 100;

/** Seconds one transcription's 30 s window takes at `figures`' speed: the encode, the prompt and {@link WINDOW_TOKENS} steps. */
export function windowSeconds(encodeMs: number, figures: SpeechDecodeFigures): number {
  return (encodeMs + figures.promptMs + WINDOW_TOKENS * figures.msPerStep) / 1000;
}

const median = (xs: number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[s.length >> 1] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
};

async function timed(fn: () => Promise<unknown>): Promise<number> {
  const t0 = performance.now();
  await fn();
  return performance.now() - t0;
}

/** A window's log-mel features: a smooth pattern in Whisper's normalized range, the same every run. */
function melWindow(melBins: number): Float32Array {
  const mel = new Float32Array(melBins * WINDOW_FRAMES);
  for (let m = 0; m < melBins; m++) for (let t = 0; t < WINDOW_FRAMES; t++) mel[m * WINDOW_FRAMES + t] = 0.6 * Math.sin(0.013 * t * (1 + m / 17)) - 0.2;
  return mel;
}

/**
 * Measures `model` (loaded with at least max(transcriptions) x beams slots in runs of `beams` rows
 * a window). The worker's first call of each shape compiles kernels on a GPU, so every measurement
 * has one unrecorded warm-up round.
 */
export async function measureSpeechThroughput(model: LoadedSpeechModel, plan: SpeechThroughputPlan): Promise<SpeechThroughputFigures> {
  const { worker, manifest } = model;
  const { beams, context, steps, runs } = plan;
  const most = Math.max(...plan.transcriptions) * beams;
  if (worker.slots < most) throw new RangeError(`${most} decoder rows asked of a model loaded with ${worker.slots}`);
  const tokens = manifest.tokens;
  const mel = () => melWindow(manifest.speech.melBins);
  // Beam search's rules after <|notimestamps|>, as a transcription without timestamps has them.
  const sampling = (sampled: number): WhisperSampling => ({
    temperature: 0,
    seed: 0,
    timestamps: false,
    sampled,
    lastWasTimestamp: false,
    penultimateWasTimestamp: true,
    lastTimestamp: -1,
    maxInitialTimestampIndex: -1,
  });
  const prompt = [tokens.startOfTranscript, ...(tokens.transcribe === null ? [] : [tokens.transcribe]), tokens.noTimestamps];
  while (prompt.length < context) prompt.push(prompt.length % 200);
  const candidates = 2 * beams;

  // A run whose outputs stay on a GPU returns once its work is queued: an encode is timed with one
  // small decoder call after it (a row that keeps nothing), less that call alone.
  const drain = () => worker.decode({ firstSlot: 0, tokensPerRow: 1, rows: [{ slot: 0, past: 0, tokens: [tokens.startOfTranscript], sample: null }] });
  await worker.encode({ slot: 0, mel: mel() });
  await drain();
  const encodes: number[] = [];
  const drains: number[] = [];
  for (let r = 0; r < runs; r++) {
    encodes.push(
      await timed(async () => {
        await worker.encode({ slot: 0, mel: mel() });
        await drain();
      }),
    );
    drains.push(await timed(drain));
  }
  const figures: SpeechThroughputFigures = { encodeMs: Math.max(0, median(encodes) - median(drains)), decode: [] };

  for (const transcriptions of plan.transcriptions) {
    const rows = transcriptions * beams;
    for (let slot = 0; slot < rows; slot += beams) await worker.encode({ slot, mel: mel() });
    const round = async (): Promise<{ promptMs: number; msPerStep: number }> => {
      const promptRows = Array.from({ length: rows }, (_, slot): DecodeRow => ({ slot, past: 0, tokens: prompt, sample: sampling(0), candidates }));
      let out: Awaited<ReturnType<typeof worker.decode>> | undefined;
      const promptMs = await timed(async () => {
        out = await worker.decode({ firstSlot: 0, tokensPerRow: context, rows: promptRows });
      });
      const t0 = performance.now();
      for (let s = 0; s < steps; s++) {
        // Each transcription's beams rotate by one: every row continues another's hypothesis, as beam search moves rows.
        const stepRows = Array.from({ length: rows }, (_, slot): DecodeRow => {
          const from = slot - (slot % beams) + ((slot + 1) % beams);
          const next = out!.rows[from]?.candidates?.tokens[0] ?? tokens.noTimestamps;
          return { slot, past: context + s, from, tokens: [next], sample: sampling(s + 1), candidates };
        });
        out = await worker.decode({ firstSlot: 0, tokensPerRow: 1, rows: stepRows });
      }
      return { promptMs, msPerStep: (performance.now() - t0) / steps };
    };
    await round();
    const measured: Array<{ promptMs: number; msPerStep: number }> = [];
    for (let r = 0; r < runs; r++) measured.push(await round());
    figures.decode.push({
      transcriptions,
      rows,
      promptMs: median(measured.map((m) => m.promptMs)),
      msPerStep: median(measured.map((m) => m.msPerStep)),
    });
  }
  return figures;
}
