/**
 * The speech worker thread's entry: it owns one speech session, runs the encoder or decoder call each
 * message asks for, and applies Whisper's rules beside sampling. It never decides who runs.
 */
import type { WhisperTokens } from "../artifact/index.js";
import { alignRows } from "../speech/alignment.js";
import { SpeechSession } from "./session.js";
import type {
  AlignRequest,
  AlignResult,
  DecodeRequest,
  DecodeResult,
  DecodeRowResult,
  EncodeRequest,
  EncodeResult,
  SpeechLoadResult,
  SpeechWorkerRequest,
} from "./protocol.js";
import { alwaysSuppressed, filterByWhisperRules, readRow } from "../speech/whisper-rules.js";
import { TopLogprobs } from "./top-logprobs.js";

class SpeechThreadState {
  session: SpeechSession | null = null;
  topLogprobs: TopLogprobs | null = null;
  suppressed: number[] = [];

  requireSession(): SpeechSession {
    if (!this.session) throw new Error("speech worker: no model loaded");
    return this.session;
  }

  get tokens(): WhisperTokens {
    return this.requireSession().manifest.tokens;
  }

  async encode(req: EncodeRequest): Promise<EncodeResult> {
    const t0 = performance.now();
    await this.requireSession().encode(req.slot, req.mel);
    return { runMs: performance.now() - t0 };
  }

  async decode(req: DecodeRequest): Promise<DecodeResult> {
    const session = this.requireSession();
    const { tokensPerRow, rows } = req;
    const endOfText = this.tokens.endOfText;
    const past = rows.map((row, r) => row?.past ?? session.kv.lengths[req.firstSlot + r]);
    const tokens = rows.flatMap((row) => row?.tokens ?? new Array<number>(tokensPerRow).fill(endOfText));
    if (rows.some((row) => row !== null && row.tokens.length !== tokensPerRow))
      throw new RangeError(`every row of a decoder call takes ${tokensPerRow} tokens`);
    const t0 = performance.now();
    const { logits } = await session.decode(
      req.firstSlot,
      past,
      rows.map((row) => row !== null),
      tokensPerRow,
      tokens,
      false,
      rows.map((row, r) => row?.from ?? req.firstSlot + r),
    );
    const runMs = performance.now() - t0;
    return { rows: await this.readRows(logits, rows, session.manifest.speech.vocab), runMs };
  }

  /**
   * Each row's answer from its logits (changed in place). Greedy and beam rows: the rules in
   * JavaScript, then their likeliest tokens and log-probabilities from one ONNX Runtime run over the
   * call's rows; sampled rows wholly in JavaScript (their draw passes over the row anyway).
   */
  private async readRows(logits: Float32Array, rows: DecodeRequest["rows"], vocab: number): Promise<Array<DecodeRowResult | null>> {
    const rowOf = (r: number) => logits.subarray(r * vocab, (r + 1) * vocab);
    const ranked = rows.map((row) => row?.sample != null && row.sample.temperature <= 0);
    const results = rows.map((row, r) => {
      if (!row || ranked[r])
        return row ? readRow(rowOf(r), { sample: null, noSpeech: row.noSpeech, detectLanguage: row.detectLanguage }, this.tokens, this.suppressed) : null;
      return readRow(rowOf(r), row, this.tokens, this.suppressed);
    });
    if (!ranked.includes(true)) return results;
    rows.forEach((row, r) => ranked[r] && filterByWhisperRules(rowOf(r), row!.sample!, this.tokens, this.suppressed));
    const k = Math.max(...rows.map((row, r) => (ranked[r] ? (row!.candidates ?? 1) : 1)));
    const top = await this.requireTopLogprobs().run(logits, rows.length, vocab, k);
    rows.forEach((row, r) => {
      if (!ranked[r]) return;
      const at = r * top.k;
      if (row!.candidates) {
        const n = Math.min(row!.candidates, top.k);
        results[r]!.candidates = { tokens: Array.from(top.tokens.subarray(at, at + n)), logprobs: Array.from(top.logprobs.subarray(at, at + n)) };
      } else {
        Object.assign(results[r]!, { token: top.tokens[at], logprob: top.logprobs[at] });
      }
    });
    return results;
  }

  private requireTopLogprobs(): TopLogprobs {
    if (!this.topLogprobs) throw new Error("speech worker: no model loaded");
    return this.topLogprobs;
  }

  async align(req: AlignRequest): Promise<AlignResult> {
    const session = this.requireSession();
    const shape = session.manifest.speech;
    const ids = [...req.prefix, ...req.textTokens, this.tokens.endOfText];
    const t0 = performance.now();
    const { alignment } = await session.decode(req.slot, [0], [true], ids.length, ids, true);
    const runMs = performance.now() - t0;
    if (!alignment) throw new Error("the decoder returned no alignment weights");
    // Rows from <|notimestamps|> (which predicts the first text token) to the last text token (which predicts the end).
    const first = req.prefix.length - 1;
    const rows = req.textTokens.length + 1;
    const heads = shape.alignmentHeads.length;
    const picked = new Float32Array(heads * rows * shape.audioContext);
    for (let h = 0; h < heads; h++) {
      const from = (h * ids.length + first) * shape.audioContext;
      picked.set(alignment.subarray(from, from + rows * shape.audioContext), h * rows * shape.audioContext);
    }
    return { starts: alignRows(picked, heads, rows, shape.audioContext, req.frames), runMs };
  }
}

const state = new SpeechThreadState();

/** Piscina task entry: one request in, one result out. */
export default async function handle(req: SpeechWorkerRequest): Promise<SpeechLoadResult | EncodeResult | DecodeResult | AlignResult> {
  switch (req.op) {
    case "encode":
      return state.encode(req);
    case "decode":
      return state.decode(req);
    case "align":
      return state.align(req);
    case "load": {
      await state.session?.release();
      await state.topLogprobs?.release();
      state.session = await SpeechSession.load(req.artifactDir, req.options);
      state.topLogprobs = await TopLogprobs.create(req.options.threads ?? 2);
      state.suppressed = alwaysSuppressed(state.session.manifest.tokens);
      const m = state.session.manifest;
      return { artifactId: m.id, slots: state.session.slots, shape: m.speech, tokens: m.tokens };
    }
  }
}
