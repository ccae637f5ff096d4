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
import { alwaysSuppressed, maskByWhisperRules, readRow } from "../speech/whisper-rules.js";

class SpeechThreadState {
  session: SpeechSession | null = null;
  /** The rule mask's buffer, reused call after call. */
  mask = new Float32Array(0);
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
    const vocab = session.manifest.speech.vocab;
    // Greedy and beam rows get their likeliest tokens from the decoder under their rules (a mask
    // built here); sampled rows, and the first step's no-speech and language questions, read logits.
    const ranked = rows.map((row) => row?.sample != null && row.sample.temperature <= 0);
    const wantsLogits = rows.some((row, r) => row !== null && (!ranked[r] || row.noSpeech || row.detectLanguage));
    const top = ranked.includes(true)
      ? { mask: this.ruleMask(rows, ranked, vocab), k: Math.max(...rows.map((row, r) => (ranked[r] ? (row!.candidates ?? 1) : 1))) }
      : undefined;
    const t0 = performance.now();
    const out = await session.decode(
      req.firstSlot,
      past,
      rows.map((row) => row !== null),
      tokensPerRow,
      tokens,
      { logits: wantsLogits, top },
      rows.map((row, r) => row?.from ?? req.firstSlot + r),
    );
    const runMs = performance.now() - t0;
    const rowOf = (r: number) => out.logits!.subarray(r * vocab, (r + 1) * vocab);
    const results = rows.map((row, r): DecodeRowResult | null => {
      if (!row) return null;
      if (!ranked[r]) return readRow(rowOf(r), row, this.tokens, this.suppressed);
      const result =
        row.noSpeech || row.detectLanguage
          ? readRow(rowOf(r), { sample: null, noSpeech: row.noSpeech, detectLanguage: row.detectLanguage }, this.tokens, this.suppressed)
          : {};
      const at = r * out.top!.k;
      // Entries at -inf are tokens the rules forbid (or none): only the allowed ones are candidates.
      const logprobs = Array.from(out.top!.logprobs.subarray(at, at + Math.min(row.candidates ?? 1, out.top!.k))).filter((p) => p > -Infinity);
      if (logprobs.length === 0) throw new Error("the decoder's rules left no token to choose");
      const tokens = Array.from(out.top!.tokens.subarray(at, at + logprobs.length));
      return row.candidates ? { ...result, candidates: { tokens, logprobs } } : { ...result, token: tokens[0], logprob: logprobs[0] };
    });
    return { rows: results, runMs };
  }

  /** The call's rule mask [rows, vocab]: each ranked row's rules as 0 / -inf, the other rows all 0. */
  private ruleMask(rows: DecodeRequest["rows"], ranked: boolean[], vocab: number): Float32Array {
    if (this.mask.length < rows.length * vocab) this.mask = new Float32Array(rows.length * vocab);
    const mask = this.mask.subarray(0, rows.length * vocab).fill(0);
    rows.forEach((row, r) => ranked[r] && maskByWhisperRules(mask.subarray(r * vocab, (r + 1) * vocab), row!.sample!, this.tokens, this.suppressed));
    return mask;
  }

  async align(req: AlignRequest): Promise<AlignResult> {
    const session = this.requireSession();
    const shape = session.manifest.speech;
    const ids = [...req.prefix, ...req.textTokens, this.tokens.endOfText];
    const t0 = performance.now();
    const { alignment } = await session.decode(req.slot, [0], [true], ids.length, ids, { logits: false, alignment: true });
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
      state.session = await SpeechSession.load(req.artifactDir, req.options);
      state.suppressed = alwaysSuppressed(state.session.manifest.tokens);
      const m = state.session.manifest;
      return { artifactId: m.id, slots: state.session.slots, shape: m.speech, tokens: m.tokens };
    }
  }
}
