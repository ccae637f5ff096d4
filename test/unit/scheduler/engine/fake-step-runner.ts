/**
 * A fake step runner for engine and API unit tests: no model. Each KV slot is a list of token ids,
 * and the "model" picks the next token from a slot's whole history, so a sequence read from the
 * wrong slot, or a bad copy, shows up as different output. Like the real worker it applies each
 * message's slot operations in order before the forward pass, fails only the sequence an operation
 * names, checks drafts as it does, and enforces the worker's rules (a multi-token step only at rows = 1, copies of at most
 * what a slot holds, samplers opened first). Scored prompt chunks get {@link fakePromptLogprob}s.
 */
import type { SamplingParams } from "../../../../src/runtime/sampling/index.js";
import type { PositionScores } from "../../../../src/runtime/sampling/index.js";
import type { RowSample, SequenceFailure, SlotOp, StepRequest, StepResult } from "../../../../src/runtime/text-worker/protocol.js";
import type { StepCall, StepRunner } from "../../../../src/scheduler/engine/step-runner.js";
import type { TokenText } from "../../../../src/scheduler/types.js";

export interface FakeSampler {
  seqId: number;
  sampling: SamplingParams;
  stream: number;
  /** Samples drawn so far. */
  draws: number;
}

export interface FakeStepOptions {
  slots: number;
  /** Token id -> text (or bytes). */
  vocab: Array<string | Uint8Array>;
  /** The next token from a slot's history (prompt + generated) and the sequence's sampler. Default: a hash of both. */
  next?: (history: readonly number[], sampler: FakeSampler) => number;
  /**
   * Instead of `next`: the tokens each sequence generates, in order, then the first stop token
   * (a function gets the prompt and the sampling). Sample i has log probability -0.5 - i, with
   * token 0 at -3 as the runner-up.
   */
  script?: number[] | ((prompt: readonly number[], sampling: SamplingParams) => number[]);
  contextLength?: number;
  stopTokenIds?: number[];
  /** Milliseconds each step takes. Default 0 (still a macrotask, so callers can interleave). */
  stepDelayMs?: number;
  /** The first step call the predicate matches rejects with this error (the message never comes back). */
  failWhen?: { match: (call: StepCall) => boolean; error: Error };
  /** The first slot operation the predicate matches fails in the "worker" (as a bad copy would). */
  failOp?: { match: (op: SlotOp) => boolean; message: string };
  /** The first forward pass whose rows include this sequence index (1-based order of opening) fails. */
  failForwardOf?: { opened: number; message: string };
}

export interface StepLog {
  kind: "decode" | "prefill";
  firstSlot: number;
  rows: number;
  tokensPerRow: number;
  seqIds: number[];
  tokens: number[];
  forks: number;
  /** Slot operations the message carried. */
  ops: SlotOp[];
  /** The prompt scoring it asked for. */
  score?: StepRequest["score"];
  /** It checked a draft (the tokens after the first). */
  verify?: boolean;
  /** The pooling it asked for. */
  embed?: StepRequest["embed"];
}

export interface FakeStepRunner extends StepRunner, TokenText {
  readonly contextLength: number;
  readonly stopTokenIds: number[];
  /** Messages with a forward pass, in order. */
  readonly calls: StepLog[];
  /** Every message, forward pass or not. */
  messages: number;
  readonly copies: Array<{ from: number; to: number; length: number }>;
  readonly opened: FakeSampler[];
  readonly closed: number[];
  /** Sampling parameters of each opened sequence, in order. */
  readonly samplings: SamplingParams[];
  /** Tokens sampled over all sequences. */
  computed: number;
  /** The simulated cache of each slot. */
  readonly kv: number[][];
  /** Open samplers by sequence id. */
  readonly samplers: Map<number, FakeSampler>;
}

const utf8 = new TextEncoder();

/**
 * The fake model's log probability of a scored prompt token; it is always the top alternative,
 * followed by the next ids at one nat less each.
 */
export const fakePromptLogprob = (token: number) => -0.5 - (token % 4) / 4;

function fakeScores(call: StepCall, score: NonNullable<StepCall["score"]>, vocabSize: number): PositionScores {
  const row = [...call.tokens.subarray(score.row * call.tokensPerRow, (score.row + 1) * call.tokensPerRow)];
  const targets = [...row.slice(1), ...(score.next >= 0 ? [score.next] : [])];
  const k = score.top;
  const out = {
    top: k,
    logprobs: new Float64Array(targets.length),
    topIds: new Int32Array(targets.length * k),
    topLogprobs: new Float64Array(targets.length * k),
    // The token that followed is its own first alternative.
    ranks: new Int32Array(targets.length).fill(1),
  };
  targets.forEach((t, p) => {
    out.logprobs[p] = fakePromptLogprob(t);
    for (let i = 0; i < k; i++) {
      out.topIds[p * k + i] = (t + i) % vocabSize;
      out.topLogprobs[p * k + i] = fakePromptLogprob(t) - i;
    }
  });
  return out;
}

/** Values in the fake model's hidden states. */
export const FAKE_HIDDEN_WIDTH = 4;

/** The fake model's final hidden state at `position` of a slot holding `token` there. */
export const fakeHidden = (token: number, position: number) => Float32Array.of(token, position + 1, 1, (token * position) % 7);

/** Row `row`'s pooled part of a call (as the worker's poolChunk pools the graph's hidden output). */
function fakePooled(call: StepCall, embed: NonNullable<StepCall["embed"]>, startPosition: number): Float32Array {
  const tokens = call.tokens.subarray(embed.row * call.tokensPerRow, (embed.row + 1) * call.tokensPerRow);
  const states = [...tokens].map((t, p) => fakeHidden(t, startPosition + p));
  if (embed.pooling === "last") return states.at(-1)!;
  const sum = new Float32Array(FAKE_HIDDEN_WIDTH);
  for (const v of states) v.forEach((x, i) => (sum[i] += x));
  return sum;
}

/** Default model: a deterministic hash of the history, the seed and the stream, avoiding stop tokens. */
export function hashNext(vocabSize: number, stops: readonly number[] = []) {
  return (history: readonly number[], sampler: FakeSampler): number => {
    let h = 2166136261 ^ (Number(sampler.sampling.seed ?? 0) * 31 + sampler.stream * 7);
    for (const t of history) h = Math.imul(h ^ t, 16777619);
    for (let k = 0; ; k++) {
      const token = ((h >>> 0) + k) % vocabSize;
      if (!stops.includes(token)) return token;
    }
  };
}

export function fakeStepRunner(options: FakeStepOptions): FakeStepRunner {
  const bytes = options.vocab.map((v) => (typeof v === "string" ? utf8.encode(v) : v));
  const kv: number[][] = Array.from({ length: options.slots }, () => []);
  const samplers = new Map<number, FakeSampler>();
  const stops = options.stopTokenIds ?? [];
  const next = options.next ?? hashNext(bytes.length, stops);
  const contextLength = options.contextLength ?? 1024;
  let stepFailed = false;
  let opFailed = false;
  let forwardFailed = false;

  const scripted = (history: readonly number[], sampler: FakeSampler): RowSample => {
    const prompt = history.slice(0, history.length - sampler.draws);
    const script = typeof options.script === "function" ? options.script(prompt, sampler.sampling) : options.script!;
    const i = sampler.draws;
    if (i >= script.length) return { token: stops[0], logprob: -0.1 };
    return {
      token: script[i],
      logprob: -0.5 - i,
      top: [
        { token: script[i], logprob: -0.5 - i },
        { token: 0, logprob: -3 },
      ],
    };
  };
  const sample = (slot: number, seqId: number, failed: SequenceFailure[]): RowSample | null => {
    const sampler = samplers.get(seqId);
    if (!sampler) {
      failed.push({ seqId, message: `fake: sequence ${seqId} is not open` });
      return null;
    }
    const out = options.script
      ? scripted(kv[slot], sampler)
      : (() => {
          const token = next(kv[slot], sampler);
          return { token, logprob: -0.25, top: [{ token, logprob: -0.25 }] };
        })();
    sampler.draws++;
    runner.computed++;
    return out;
  };
  const apply = (op: SlotOp): void => {
    if (!opFailed && options.failOp?.match(op)) {
      opFailed = true;
      throw new Error(options.failOp.message);
    }
    if (op.op === "open") {
      if (kv[op.slot].length < op.keepCached) throw new Error(`fake: slot ${op.slot} holds ${kv[op.slot].length}, not ${op.keepCached}`);
      kv[op.slot].length = op.keepCached;
      const sampler = { seqId: op.seqId, sampling: op.sampling, stream: op.stream, draws: 0 };
      samplers.set(op.seqId, sampler);
      runner.opened.push(sampler);
      runner.samplings.push(op.sampling);
    } else if (op.op === "copy") {
      if (op.length > kv[op.from].length) throw new Error(`fake: copy of ${op.length} from slot ${op.from} holding ${kv[op.from].length}`);
      kv[op.to] = kv[op.from].slice(0, op.length);
      runner.copies.push({ from: op.from, to: op.to, length: op.length });
    } else {
      samplers.delete(op.seqId);
      runner.closed.push(op.seqId);
    }
  };

  const runner: FakeStepRunner = {
    slots: options.slots,
    contextLength,
    stopTokenIds: stops,
    calls: [],
    messages: 0,
    copies: [],
    opened: [],
    closed: [],
    samplings: [],
    computed: 0,
    kv,
    samplers,
    async step(call: StepCall): Promise<StepResult> {
      await new Promise((r) => setTimeout(r, options.stepDelayMs ?? 0));
      runner.messages++;
      if (call.rows > 1 && call.tokensPerRow > 1) throw new Error("fake: a multi-token step needs rows = 1");
      if (call.rows > 0 && (call.firstSlot < 0 || call.firstSlot + call.rows > options.slots)) throw new Error(`fake: rows outside the slots`);
      if (!stepFailed && options.failWhen?.match(call)) {
        stepFailed = true;
        throw options.failWhen.error;
      }
      const failed: SequenceFailure[] = [];
      for (const op of call.ops) {
        try {
          apply(op);
        } catch (err) {
          if (op.op === "copy") kv[op.to].length = 0;
          if (op.op !== "close" && op.seqId !== undefined) failed.push({ seqId: op.seqId, message: (err as Error).message });
        }
      }
      if (call.rows === 0) return { samples: [], failed, runMs: 0, sampleMs: 0 };
      const failing = options.failForwardOf && runner.opened[options.failForwardOf.opened - 1];
      if (!forwardFailed && failing && call.seqIds.includes(failing.seqId)) {
        forwardFailed = true;
        return { samples: [], failed, forwardError: options.failForwardOf!.message, runMs: 0, sampleMs: 0 };
      }
      runner.calls.push({
        // A row whose sequence has not sampled yet is prompt work.
        kind: call.rows === 1 && (samplers.get(call.seqIds[0])?.draws ?? 0) === 0 ? "prefill" : "decode",
        firstSlot: call.firstSlot,
        rows: call.rows,
        tokensPerRow: call.tokensPerRow,
        seqIds: [...call.seqIds],
        tokens: [...call.tokens],
        forks: call.forks?.length ?? 0,
        ops: call.ops,
        ...(call.score ? { score: call.score } : {}),
        ...(call.verify ? { verify: true } : {}),
        ...(call.embed ? { embed: call.embed } : {}),
      });
      const gone = new Set(failed.map((f) => f.seqId));
      if (call.verify) {
        // As the worker checks a draft: each position sampled in turn while it equals the next token.
        const slot = call.firstSlot;
        const kept: RowSample[] = [];
        for (let p = 0; p < call.tokensPerRow && !gone.has(call.seqIds[0]); p++) {
          kv[slot].push(call.tokens[p]);
          const s = sample(slot, call.seqIds[0], failed);
          if (!s) break;
          kept.push(s);
          if (s.token !== call.tokens[p + 1]) break;
        }
        return { samples: [kept[0] ?? null], confirmed: kept.slice(1), failed, runMs: 0, sampleMs: 0 };
      }
      const pooled =
        call.embed && !gone.has(call.seqIds[call.embed.row]) ? fakePooled(call, call.embed, kv[call.firstSlot + call.embed.row].length) : undefined;
      const samples: Array<RowSample | null> = [];
      for (let r = 0; r < call.rows; r++) {
        const slot = call.firstSlot + r;
        kv[slot].push(...call.tokens.subarray(r * call.tokensPerRow, (r + 1) * call.tokensPerRow));
        if (kv[slot].length > contextLength) throw new Error(`fake: slot ${slot} past the context`);
        samples.push(call.sample[r] && !gone.has(call.seqIds[r]) ? sample(slot, call.seqIds[r], failed) : null);
      }
      const forkSamples = call.forks?.map((f) => (gone.has(f.seqId) ? null : sample(call.firstSlot + f.row, f.seqId, failed)));
      const scores = call.score && !gone.has(call.seqIds[call.score.row]) ? fakeScores(call, call.score, bytes.length) : undefined;
      return { samples, ...(forkSamples ? { forkSamples } : {}), ...(scores ? { scores } : {}), ...(pooled ? { pooled } : {}), failed, runMs: 0, sampleMs: 0 };
    },
    createDecoder() {
      const decoder = new TextDecoder("utf-8", { fatal: false });
      return { push: (id) => decoder.decode(bytes[id], { stream: true }), flush: () => decoder.decode() };
    },
    tokenBytes: (id) => bytes[id],
  };
  return runner;
}
