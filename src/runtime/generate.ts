import type { ModelWorker } from "./model-worker.js";
import type { SamplingParams } from "./sampling/index.js";
import type { RowSample } from "./step-protocol.js";

export type FinishReason = "stop" | "length" | "cancelled";

/** Options for one sequential generation on a model worker. */
export interface GenerateOptions {
  /** Most new tokens to produce. */
  maxTokens: number;
  sampling: SamplingParams;
  /** Token ids that end generation (not yielded). Default: the artifact's end-of-generation ids. */
  stopTokenIds?: number[];
  /** Prompt tokens per prefill step; bounds the activation memory of long prompts. Default 512. */
  prefillChunk?: number;
  /** KV slot to use. Default 0. */
  slot?: number;
  signal?: AbortSignal;
  /** Also report the top-n raw logits at each step (oracle checks). Default 0. */
  topLogits?: number;
}

let nextSeqId = 1;

/**
 * Prefills a prompt and decodes token by token on one slot. This is the single-sequence path; the
 * scheduler batches many sequences over the same worker protocol.
 */
export async function* generate(worker: ModelWorker, prompt: number[], opts: GenerateOptions): AsyncGenerator<RowSample, FinishReason> {
  const seqId = nextSeqId++;
  const slot = opts.slot ?? 0;
  const stop = new Set(opts.stopTokenIds ?? worker.info.stopTokenIds);
  const context = worker.info.shape.contextLength;
  const chunk = opts.prefillChunk ?? 512;
  if (prompt.length === 0) throw new RangeError("prompt must have at least one token");
  if (prompt.length >= context) throw new RangeError(`prompt of ${prompt.length} tokens does not fit the context of ${context}`);
  await worker.open({ seqId, slot, sampling: opts.sampling, keepCached: 0 });
  try {
    const run = (tokens: number[], sample: boolean) =>
      worker.step({ firstSlot: slot, rows: 1, seq: tokens.length, tokens: Int32Array.from(tokens), seqIds: [seqId], sample: [sample], topLogits: opts.topLogits });
    let result = null as RowSample | null;
    for (let at = 0; at < prompt.length; at += chunk) {
      const part = prompt.slice(at, at + chunk);
      result = (await run(part, at + chunk >= prompt.length)).samples[0];
    }
    let length = prompt.length;
    for (let produced = 0; ; ) {
      if (opts.signal?.aborted) return "cancelled";
      const sample = result!;
      if (stop.has(sample.token)) return "stop";
      yield sample;
      produced++;
      length++;
      if (produced >= opts.maxTokens || length >= context) return "length";
      result = (await run([sample.token], true)).samples[0];
    }
  } finally {
    await worker.close(seqId);
  }
}
