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
import { alwaysSuppressed, filterByWhisperRules, likeliestId, likeliestIds, readRow } from "../speech/whisper-rules.js";
import { LogSoftmax } from "./log-softmax.js";

class SpeechThreadState {
  session: SpeechSession | null = null;
  logSoftmax: LogSoftmax | null = null;
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
    await this.requireSession().encode(req.slot, req.mel, req.copies ?? 1);
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
   * JavaScript, their log-probabilities from one ONNX Runtime log-softmax over the call's rows;
   * sampled rows wholly in JavaScript (their draw passes over the row anyway).
   */
  private async readRows(logits: Float32Array, rows: DecodeRequest["rows"], vocab: number): Promise<Array<DecodeRowResult | null>> {
    const rowOf = (r: number) => logits.subarray(r * vocab, (r + 1) * vocab);
    const normalised = rows.map((row) => row?.sample != null && row.sample.temperature <= 0);
    const results = rows.map((row, r) => {
      if (!row || normalised[r])
        return row ? readRow(rowOf(r), { sample: null, noSpeech: row.noSpeech, detectLanguage: row.detectLanguage }, this.tokens, this.suppressed) : null;
      return readRow(rowOf(r), row, this.tokens, this.suppressed);
    });
    if (!normalised.includes(true)) return results;
    rows.forEach((row, r) => normalised[r] && filterByWhisperRules(rowOf(r), row!.sample!, this.tokens, this.suppressed));
    const logprobs = await this.requireLogSoftmax().run(logits, rows.length, vocab);
    rows.forEach((row, r) => {
      if (!normalised[r]) return;
      const at = r * vocab;
      if (row!.candidates) {
        const tokens = likeliestIds(rowOf(r), row!.candidates);
        results[r]!.candidates = { tokens, logprobs: tokens.map((t) => logprobs[at + t]) };
      } else {
        const token = likeliestId(rowOf(r));
        Object.assign(results[r]!, { token, logprob: logprobs[at + token] });
      }
    });
    return results;
  }

  private requireLogSoftmax(): LogSoftmax {
    if (!this.logSoftmax) throw new Error("speech worker: no model loaded");
    return this.logSoftmax;
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
      await state.logSoftmax?.release();
      state.session = await SpeechSession.load(req.artifactDir, req.options);
      state.logSoftmax = await LogSoftmax.create(req.options.threads ?? 2);
      state.suppressed = alwaysSuppressed(state.session.manifest.tokens);
      const m = state.session.manifest;
      return { artifactId: m.id, slots: state.session.slots, shape: m.speech, tokens: m.tokens };
    }
  }
}
