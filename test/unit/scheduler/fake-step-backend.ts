/**
 * A scripted StepBackend for batch-engine tests: no model. Each KV slot is a list of token ids, and
 * the "model" picks the next token from a slot's whole history, so a sequence read from the wrong
 * slot, or a bad copy, shows up as different output. It also enforces the worker's rules (a
 * multi-token step only at rows = 1, copies of at most what a slot holds, samplers opened first).
 */
import type { SamplingParams } from "../../../src/runtime/sampling/index.js";
import type { RowSample, StepResult } from "../../../src/runtime/step-protocol.js";
import type { StepBackend, StepCall } from "../../../src/scheduler/step-backend.js";

export interface FakeSampler {
  seqId: number;
  sampling: SamplingParams;
  stream: number;
  /** Samples drawn so far. */
  draws: number;
}

export interface FakeStepOptions {
  slots: number;
  /** Token id -> text. */
  vocab: string[];
  /** The next token from a slot's history (prompt + generated) and the sequence's sampler. Default: a hash of both. */
  next?: (history: readonly number[], sampler: FakeSampler) => number;
  contextLength?: number;
  stopTokenIds?: number[];
  /** Milliseconds each step takes. Default 0 (still a macrotask, so callers can interleave). */
  stepDelayMs?: number;
  /** Throw this error from the first step call the predicate matches. */
  failWhen?: { match: (call: StepCall) => boolean; error: Error };
}

export interface StepLog {
  kind: "decode" | "prefill";
  firstSlot: number;
  rows: number;
  seq: number;
  seqIds: number[];
  tokens: number[];
  forks: number;
}

export interface FakeStepBackend extends StepBackend {
  readonly calls: StepLog[];
  readonly copies: Array<{ from: number; to: number; length: number }>;
  readonly opened: FakeSampler[];
  readonly closed: number[];
  /** The simulated cache of each slot. */
  readonly kv: number[][];
  /** Open samplers by sequence id. */
  readonly samplers: Map<number, FakeSampler>;
}

const utf8 = new TextEncoder();

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

export function fakeStepBackend(options: FakeStepOptions): FakeStepBackend {
  const kv: number[][] = Array.from({ length: options.slots }, () => []);
  const samplers = new Map<number, FakeSampler>();
  const next = options.next ?? hashNext(options.vocab.length, options.stopTokenIds);
  const contextLength = options.contextLength ?? 1024;
  let failed = false;
  const sample = (slot: number, seqId: number): RowSample => {
    const sampler = samplers.get(seqId);
    if (!sampler) throw new Error(`fake: sequence ${seqId} is not open`);
    const token = next(kv[slot], sampler);
    sampler.draws++;
    return { token, logprob: -0.25, top: [{ token, logprob: -0.25 }] };
  };
  const backend: FakeStepBackend = {
    slots: options.slots,
    contextLength,
    stopTokenIds: options.stopTokenIds ?? [],
    calls: [],
    copies: [],
    opened: [],
    closed: [],
    kv,
    samplers,
    async open(seqId, slot, sampling, stream, keepCached) {
      if (kv[slot].length < keepCached) throw new Error(`fake: slot ${slot} holds ${kv[slot].length}, not ${keepCached}`);
      kv[slot].length = keepCached;
      const sampler = { seqId, sampling, stream, draws: 0 };
      samplers.set(seqId, sampler);
      backend.opened.push(sampler);
    },
    async copy(from, to, length) {
      if (length > kv[from].length) throw new Error(`fake: copy of ${length} from slot ${from} holding ${kv[from].length}`);
      kv[to] = kv[from].slice(0, length);
      backend.copies.push({ from, to, length });
    },
    async step(call: StepCall): Promise<StepResult> {
      await new Promise((r) => setTimeout(r, options.stepDelayMs ?? 0));
      if (call.rows > 1 && call.seq > 1) throw new Error("fake: a multi-token step needs rows = 1");
      if (call.firstSlot < 0 || call.firstSlot + call.rows > options.slots) throw new Error(`fake: rows outside the slots`);
      if (!failed && options.failWhen?.match(call)) {
        failed = true;
        throw options.failWhen.error;
      }
      backend.calls.push({
        // A row whose sequence has not sampled yet is prompt work.
        kind: call.rows === 1 && (samplers.get(call.seqIds[0])?.draws ?? 0) === 0 ? "prefill" : "decode",
        firstSlot: call.firstSlot,
        rows: call.rows,
        seq: call.seq,
        seqIds: [...call.seqIds],
        tokens: [...call.tokens],
        forks: call.forks?.length ?? 0,
      });
      const samples: Array<RowSample | null> = [];
      for (let r = 0; r < call.rows; r++) {
        const slot = call.firstSlot + r;
        kv[slot].push(...call.tokens.subarray(r * call.seq, (r + 1) * call.seq));
        if (kv[slot].length > contextLength) throw new Error(`fake: slot ${slot} past the context`);
        samples.push(call.sample[r] ? sample(slot, call.seqIds[r]) : null);
      }
      const forkSamples = call.forks?.map((f) => sample(call.firstSlot + f.row, f.seqId));
      return { samples, ...(forkSamples ? { forkSamples } : {}), runMs: 0, sampleMs: 0 };
    },
    async close(seqId) {
      samplers.delete(seqId);
      backend.closed.push(seqId);
    },
    createDecoder() {
      const decoder = new TextDecoder("utf-8", { fatal: false });
      return { push: (id) => decoder.decode(utf8.encode(options.vocab[id]), { stream: true }), flush: () => decoder.decode() };
    },
    tokenBytes: (id) => utf8.encode(options.vocab[id]),
  };
  return backend;
}
