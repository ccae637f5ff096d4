/** A scripted TokenBackend for scheduler and API unit tests: no model, tokens from a tiny vocabulary. */
import type { FinishReason, SampledToken, SamplingParams, TokenBackend } from "../../../src/scheduler/types.js";

export interface FakeBackendOptions {
  /** Token id -> its bytes (strings are UTF-8 encoded). */
  vocab: Array<string | Uint8Array>;
  /** Tokens each generation yields (before its "stop"); a function gets the prompt and sampling. */
  script: number[] | ((prompt: number[], sampling: SamplingParams) => number[]);
  /** Milliseconds each token takes. Default 0 (a macrotask). */
  tokenDelayMs?: number;
  /** Reason when the script runs out before maxTokens. Default "stop". */
  end?: FinishReason;
  /** Throw this error at the given token index. */
  failAt?: { index: number; error: Error };
}

export interface FakeBackend extends TokenBackend {
  /** Tokens computed over all generations (a cancelled generation stops adding to it). */
  computed: number;
  /** Generations started, and the most running at once. */
  started: number;
  maxConcurrent: number;
  samplings: SamplingParams[];
}

const utf8 = new TextEncoder();

export function fakeBackend(options: FakeBackendOptions): FakeBackend {
  const bytes = options.vocab.map((v) => (typeof v === "string" ? utf8.encode(v) : v));
  let running = 0;
  const backend: FakeBackend = {
    computed: 0,
    started: 0,
    maxConcurrent: 0,
    samplings: [],
    async *generate(prompt, { maxTokens, sampling, signal }): AsyncGenerator<SampledToken, FinishReason> {
      backend.started++;
      backend.samplings.push(sampling);
      running++;
      backend.maxConcurrent = Math.max(backend.maxConcurrent, running);
      try {
        const script = typeof options.script === "function" ? options.script(prompt, sampling) : options.script;
        for (let i = 0; ; i++) {
          await new Promise((r) => setTimeout(r, options.tokenDelayMs ?? 0));
          if (signal.aborted) return "cancelled";
          if (options.failAt && options.failAt.index === i) throw options.failAt.error;
          if (i >= script.length) return options.end ?? "stop";
          backend.computed++;
          yield { token: script[i], logprob: -0.5 - i, top: [{ token: script[i], logprob: -0.5 - i }, { token: 0, logprob: -3 }] };
          if (i + 1 >= maxTokens) return "length";
        }
      } finally {
        running--;
      }
    },
    createDecoder() {
      const decoder = new TextDecoder("utf-8", { fatal: false });
      return { push: (id) => decoder.decode(bytes[id], { stream: true }), flush: () => decoder.decode() };
    },
    tokenBytes: (id) => bytes[id],
  };
  return backend;
}
